package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sawtooth-dev/sawtooth/internal/monitor"
)

// terminalConfirm asks a yes/no question on the terminal, or is nil when
// stdin or out is not one (then only --yes goes ahead): a script never
// hangs on a question nobody sees.
func terminalConfirm(in *os.File, out io.Writer) func(question string) bool {
	if in == nil || !monitor.IsTerminal(in) || !monitor.IsTerminal(out) {
		return nil
	}
	return func(question string) bool {
		return askYes(in, out, question)
	}
}

// askYes prints question and reads one line from in: y or yes (any case)
// is a yes, anything else (an empty line included) a no.
func askYes(in io.Reader, out io.Writer, question string) bool {
	fmt.Fprintf(out, "%s [y/N] ", question)
	line, _ := bufio.NewReader(in).ReadString('\n')
	a := strings.ToLower(strings.TrimSpace(line))
	return a == "y" || a == "yes"
}

// consent is what a command that may re-pay answers was told: --dry-run,
// --yes, --confirm-above and, on a terminal, someone to ask. A run from
// flags and a run of a job file (or of the job a database stored) follow
// this one rule, so a flag means the same whichever way the run was set.
type consent struct {
	// DryRun says what would run and changes nothing.
	DryRun bool
	// Yes re-runs even more than ConfirmAbove items.
	Yes          bool
	ConfirmAbove int
	// Confirm asks on the terminal (nil: no terminal, only Yes goes ahead).
	Confirm func(question string) bool
}

// consent is what o says about re-paying answers.
func (o *pipelineOptions) consent() consent {
	return consent{DryRun: o.DryRun, Yes: o.Yes, ConfirmAbove: o.ConfirmAbove, Confirm: o.Confirm}
}

// allowRerun decides whether a re-run of items may go ahead: up to
// ConfirmAbove items, or with --yes, it may; above, the plan is printed to
// errOut and the terminal asked, and without a yes there the command stops
// with a usage error (exit 2) before anything was changed.
func (c consent) allowRerun(items int, plan func(io.Writer), errOut io.Writer) error {
	if items <= c.ConfirmAbove || c.Yes {
		return nil
	}
	plan(errOut)
	if c.Confirm != nil && c.Confirm(fmt.Sprintf("re-run %s?", plural(items, "item"))) {
		return nil
	}
	return usagef("stopped before re-running %s (more than --confirm-above %d); nothing was changed. To go ahead, run the same command with --yes",
		plural(items, "item"), c.ConfirmAbove)
}
