package cli

import (
	"context"
	"io"

	"github.com/sawtooth-dev/sawtooth/internal/monitor"
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
		Usage: "re-run one stage and every stage after it for all items (e.g. after a prompt change), then drain; a question already answered (same model, prompt and text) reuses its answer unless --no-cache",
		Flags: append([]cli.Flag{dbFlag(), &cli.StringFlag{Name: "from-stage", Category: catRerun, Usage: stageUsage("first stage to re-run for every item") + " (required)", Destination: &opts.FromStage}},
			append(append(pipelineFlags(&opts.Pipeline), rerunFlags(&opts.Pipeline, true)...), obsFlags(&opts.Obs)...)...),
		Before: before("db", "from-stage"),
		Action: func(c *cli.Context) error {
			opts.Pipeline.fromContext(c)
			opts.Out, opts.ErrOut, opts.ExitNow = c.App.Writer, c.App.ErrWriter, cfg.ExitNow
			opts.Pipeline.Confirm = cfg.Confirm
			// A database run from a job file re-runs with its stored job.
			if j, err := storedJob(c, &opts.Pipeline, "from-stage", opts.FromStage); err != nil || j != nil {
				if err != nil {
					return err
				}
				_, err := drain(c.Context, drainRequest{Pipeline: &opts.Pipeline, Job: j, RerunFrom: opts.FromStage,
					Obs: opts.Obs, Out: opts.Out, ErrOut: opts.ErrOut, ExitNow: opts.ExitNow})
				return err
			}
			return runRerun(c.Context, &opts)
		},
	}
}

// runRerun re-queues every item that reached FromStage there and drains
// the pipeline; settings not given keep what the DB recorded. It never
// creates the DB; with DryRun it prints the plan and changes nothing.
func runRerun(ctx context.Context, opts *rerunOptions) error {
	opts.Pipeline.MustExist = true
	opts.Pipeline.KeepStored = true
	_, err := drain(ctx, drainRequest{Pipeline: &opts.Pipeline, Obs: opts.Obs, RerunFrom: opts.FromStage,
		Out: opts.Out, ErrOut: opts.ErrOut, ExitNow: opts.ExitNow})
	return err
}
