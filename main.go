// Command sawtooth drains big batches of LLM work through a resumable,
// multi-stage pipeline kept in one bbolt file, or in one PostgreSQL
// database that several workers drain together. See README.md.
//
// This file only assembles the app (internal/cli) and maps its typed
// errors to exit codes, in one place.
package main

import (
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	_ "time/tzdata" // per-day quotas reset at midnight Pacific, on any machine

	"github.com/sawtooth-dev/sawtooth/internal/cli"
	"github.com/sawtooth-dev/sawtooth/internal/monitor"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Exit codes (see README): every item reached done or a dead letter; a
// fatal error; a usage error; stopped early but resumable.
const (
	exitOK      = 0
	exitFatal   = 1
	exitUsage   = 2
	exitStopped = 3
)

// demoReviews is testdata/reviews.jsonl, embedded so `sawtooth demo` works
// from any directory.
//
//go:embed testdata/reviews.jsonl
var demoReviews []byte

func main() {
	os.Exit(runCLI(os.Args, os.Stdout, os.Stderr))
}

// runCLI runs the app on args and returns the exit code; an error is
// printed once, on stderr.
func runCLI(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		// A bug must not look like a usage error (Go exits 2 on a panic),
		// and the user should know their data is safe.
		if p := recover(); p != nil {
			fmt.Fprintf(stderr, "sawtooth: internal error: %v\n%s\nThe database is consistent (every change is one transaction); run again to resume, and please report this.\n", p, debug.Stack())
			code = exitFatal
		}
	}()
	app := cli.NewApp(cli.Config{
		Stdout: stdout, Stderr: stderr, DemoReviews: demoReviews,
		ExitNow: func(err error) { os.Exit(exitCode(err)) },
	})
	err := app.Run(args)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "sawtooth:", errorText(err))
	return exitCode(err)
}

// errorText is err's message as printed. It can quote a server's message
// or an input's text: its control characters are escaped, its line breaks
// kept, and the tabs that indent a line (pgx lists each address it tried
// so) become spaces rather than a literal \t.
func errorText(err error) string {
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		text := strings.TrimLeft(l, "\t")
		lines[i] = strings.Repeat("    ", len(l)-len(text)) + monitor.TerminalSafe(text)
	}
	return strings.Join(lines, "\n")
}

// exitCode maps the commands' typed errors to exit codes, in one place.
func exitCode(err error) int {
	var ue *cli.UsageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		return exitUsage
	case errors.Is(err, pipeline.ErrStopped):
		return exitStopped
	default:
		return exitFatal
	}
}
