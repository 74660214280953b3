package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/sawtooth-dev/sawtooth/internal/monitor"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/urfave/cli/v2"
)

// rerunOptions are `sawtooth rerun`'s.
type rerunOptions struct {
	Pipeline pipelineOptions
	Obs      monitor.Options
	// FromStage is the first stage re-run for every item.
	FromStage   string
	Out, ErrOut io.Writer
	ExitNow     func(error)
}

func newRerunCommand(cfg Config) *cli.Command {
	var opts rerunOptions
	return &cli.Command{
		Name:  "rerun",
		Usage: "re-run one stage and every stage after it for all items (e.g. after a prompt change), then drain",
		Flags: append([]cli.Flag{dbFlag(), &cli.StringFlag{Name: "from-stage", Required: true, Usage: "first stage to re-run", Destination: &opts.FromStage}},
			append(pipelineFlags(&opts.Pipeline), obsFlags(&opts.Obs)...)...),
		Before: loadConfigFile,
		Action: func(c *cli.Context) error {
			opts.Pipeline.fromContext(c)
			opts.Out, opts.ErrOut, opts.ExitNow = c.App.Writer, c.App.ErrWriter, cfg.ExitNow
			return runRerun(c.Context, &opts)
		},
	}
}

// runRerun re-queues every item at FromStage and drains the pipeline. It
// never creates the DB.
func runRerun(ctx context.Context, opts *rerunOptions) error {
	opts.Pipeline.RerunChanged = true
	opts.Pipeline.MustExist = true
	_, err := drain(ctx, drainRequest{Pipeline: &opts.Pipeline, Obs: opts.Obs, Out: opts.Out, ErrOut: opts.ErrOut, ExitNow: opts.ExitNow,
		Prepare: func(db *store.DB) error {
			n, err := db.Rerun(opts.FromStage)
			if err == nil {
				fmt.Fprintf(opts.ErrOut, "re-queued %d items at %s\n", n, opts.FromStage)
			}
			return err
		}})
	return err
}
