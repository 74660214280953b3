package cli

import (
	"context"
	"io"

	"github.com/sawtooth-dev/sawtooth/internal/monitor"
	"github.com/urfave/cli/v2"
)

// runOptions are `sawtooth run`'s.
type runOptions struct {
	Pipeline    pipelineOptions
	Input       inputOptions
	Obs         monitor.Options
	Batch       batchOptions
	Out, ErrOut io.Writer
	ExitNow     func(error)
}

func newRunCommand(cfg Config) *cli.Command {
	var opts runOptions
	return &cli.Command{
		Name:  "run",
		Usage: "ingest --input (new or edited ids only) and drain every stage; resumes where the last run stopped",
		Description: `Exit codes: 0 every item reached done or a dead letter; 3 stopped early but
resumable (signal, quota exhausted); 1 fatal error; 2 usage error.
The API key is read from GEMINI_API_KEY (or GOOGLE_API_KEY), never from a flag.`,
		Flags:  append(append(append(append([]cli.Flag{dbFlag()}, inputFlags(&opts.Input)...), pipelineFlags(&opts.Pipeline)...), rerunFlags(&opts.Pipeline, true)...), append(obsFlags(&opts.Obs), batchFlags(&opts.Batch)...)...),
		Before: before("db"),
		Action: func(c *cli.Context) error {
			opts.Pipeline.fromContext(c)
			opts.Out, opts.ErrOut, opts.ExitNow = c.App.Writer, c.App.ErrWriter, cfg.ExitNow
			opts.Pipeline.Confirm = cfg.Confirm
			return runRun(c.Context, &opts)
		},
	}
}

// runRun ingests the input, if any, and drains every stage.
func runRun(ctx context.Context, opts *runOptions) error {
	_, err := drain(ctx, drainRequest{Pipeline: &opts.Pipeline, Input: opts.Input, Obs: opts.Obs, Batch: opts.Batch,
		Out: opts.Out, ErrOut: opts.ErrOut, ExitNow: opts.ExitNow})
	return err
}
