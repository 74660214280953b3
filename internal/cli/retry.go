package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/sawtooth-dev/sawtooth/internal/monitor"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/urfave/cli/v2"
)

// retryOptions are `sawtooth retry`'s.
type retryOptions struct {
	Pipeline pipelineOptions
	Obs      monitor.Options
	// Stage is the stage whose dead letters are re-queued.
	Stage       string
	Out, ErrOut io.Writer
	ExitNow     func(error)
}

func newRetryCommand(cfg Config) *cli.Command {
	var opts retryOptions
	return &cli.Command{
		Name:  "retry",
		Usage: "re-queue the dead letters of one stage and run again (re-runs only what failed there)",
		Flags: append([]cli.Flag{dbFlag(), &cli.StringFlag{Name: "stage", Required: true, Usage: "stage whose dead letters to retry", Destination: &opts.Stage}},
			append(pipelineFlags(&opts.Pipeline), obsFlags(&opts.Obs)...)...),
		Before: loadConfigFile,
		Action: func(c *cli.Context) error {
			opts.Pipeline.fromContext(c)
			opts.Out, opts.ErrOut, opts.ExitNow = c.App.Writer, c.App.ErrWriter, cfg.ExitNow
			return runRetry(c.Context, &opts)
		},
	}
}

// runRetry re-queues the stage's dead letters and drains the pipeline. It
// never creates the DB.
func runRetry(ctx context.Context, opts *retryOptions) error {
	opts.Pipeline.MustExist = true
	_, err := drain(ctx, drainRequest{Pipeline: &opts.Pipeline, Obs: opts.Obs, Out: opts.Out, ErrOut: opts.ErrOut, ExitNow: opts.ExitNow,
		Prepare: func(db *store.DB) error {
			n, err := db.Requeue(opts.Stage, nil)
			if err == nil {
				fmt.Fprintf(opts.ErrOut, "re-queued %d dead letters at %s\n", n, opts.Stage)
			}
			return err
		}})
	return err
}
