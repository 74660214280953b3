package cli

import (
	"io"

	"github.com/urfave/cli/v2"
)

// Config is what the process gives the commands.
type Config struct {
	// Stdout gets data (summaries, reports, exports); Stderr progress,
	// notices and errors.
	Stdout, Stderr io.Writer
	// DemoReviews is the JSONL input `sawtooth demo` drains.
	DemoReviews []byte
	// ExitNow ends the process at once with err's exit code: a second
	// Ctrl-C during a run. Nil means return normally instead.
	ExitNow func(err error)
}

// NewApp assembles every command. Errors come back from Run unprinted and
// typed (see the package doc): the caller prints them once and maps them
// to an exit code.
func NewApp(cfg Config) *cli.App {
	if cfg.ExitNow == nil {
		cfg.ExitNow = func(error) {}
	}
	return &cli.App{
		Name:      "sawtooth",
		Usage:     "drain big batches of LLM work through a resumable pipeline, as fast as the live quota allows",
		Writer:    cfg.Stdout,
		ErrWriter: cfg.Stderr,
		// Errors are printed once, by the caller, with their exit code.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usagef("%v (see --help)", err)
		},
		Commands: []*cli.Command{
			newRunCommand(cfg),
			newRetryCommand(cfg),
			newRerunCommand(cfg),
			newStatusCommand(),
			newDLQCommand(),
			newExportCommand(),
			newReportCommand(),
			newVerifyCommand(),
			newSimCommand(),
			newDemoCommand(cfg),
			newBenchCommand(),
		},
	}
}
