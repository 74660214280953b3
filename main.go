// Command sawtooth drains big batches of LLM work through a resumable,
// multi-stage pipeline kept in one bbolt file. See README.md.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	_ "time/tzdata" // per-day quotas reset at midnight Pacific, on any machine

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/urfave/cli/v2"
)

// Exit codes (see README): every item reached done or a dead letter; a
// fatal error; a usage error; stopped early but resumable.
const (
	exitOK      = 0
	exitFatal   = 1
	exitUsage   = 2
	exitStopped = 3
)

func main() {
	os.Exit(runCLI(os.Args, os.Stdout, os.Stderr))
}

// usageError marks a mistake in how the command was called (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func runCLI(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		// A bug must not look like a usage error (Go exits 2 on a panic),
		// and the user should know their data is safe.
		if p := recover(); p != nil {
			fmt.Fprintf(stderr, "sawtooth: internal error: %v\n%s\nThe database is consistent (every change is one transaction); run again to resume, and please report this.\n", p, debug.Stack())
			code = exitFatal
		}
	}()
	app := newApp(stdout, stderr)
	err := app.Run(args)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "sawtooth:", err)
	return exitCode(err)
}

// exitCode maps typed errors to exit codes, in one place.
func exitCode(err error) int {
	var ue usageError
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

func newApp(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:      "sawtooth",
		Usage:     "drain big batches of LLM work through a resumable pipeline, as fast as the live quota allows",
		Writer:    stdout,
		ErrWriter: stderr,
		// Errors are printed once, by runCLI, with their exit code.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usagef("%v (see --help)", err)
		},
		Commands: []*cli.Command{
			runCommand(),
			retryCommand(),
			rerunCommand(),
			statusCommand(),
			dlqCommand(),
			exportCommand(),
			reportCommand(),
			verifyCommand(),
			simCommand(),
			demoCommand(),
			benchCommand(),
		},
	}
}
