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
