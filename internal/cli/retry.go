package cli

import (
	"context"
	"io"

	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/internal/monitor"
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
		Flags: append([]cli.Flag{dbFlag(), stageFlag(&opts.Stage, "stage whose dead letters to re-queue", true)},
			append(append(pipelineFlags(&opts.Pipeline), rerunFlags(&opts.Pipeline, false)...), obsFlags(&opts.Obs)...)...),
		Before: before("db", "stage"),
		Action: func(c *cli.Context) error {
			opts.Pipeline.fromContext(c)
			opts.Out, opts.ErrOut, opts.ExitNow = c.App.Writer, c.App.ErrWriter, cfg.ExitNow
			opts.Pipeline.Confirm = cfg.Confirm
			// A database run from a job file retries with its stored job.
			if j, err := storedJob(c, &opts.Pipeline, "stage", opts.Stage); err != nil || j != nil {
				if err != nil {
					return err
				}
				_, err := drain(c.Context, drainRequest{Pipeline: &opts.Pipeline, Job: j, RetryStage: opts.Stage,
					Obs: opts.Obs, Out: opts.Out, ErrOut: opts.ErrOut, ExitNow: opts.ExitNow})
				return err
			}
			return runRetry(c.Context, &opts)
		},
	}
}

// runRetry re-queues the stage's dead letters and drains the pipeline. It
// never creates the DB.
func runRetry(ctx context.Context, opts *retryOptions) error {
	opts.Pipeline.MustExist = true
	opts.Pipeline.KeepStored = true
	_, err := drain(ctx, drainRequest{Pipeline: &opts.Pipeline, Obs: opts.Obs, RetryStage: opts.Stage,
		Out: opts.Out, ErrOut: opts.ErrOut, ExitNow: opts.ExitNow})
	return err
}

// storedJob is the job stored in the database --db names, checked against
// the stage the command was given (flag names it) and the flags a job run
// takes; nil with no error when the database holds no job.
func storedJob(c *cli.Context, o *pipelineOptions, flag, stage string) (*job.Job, error) {
	j, err := loadJob("", o.DB)
	if err != nil || j == nil {
		return nil, err
	}
	if err := checkStageOf(j.DB, flag, stage); err != nil {
		return nil, err
	}
	if err := checkJobFlags(c); err != nil {
		return nil, err
	}
	applyJobFlags(c, j)
	return j, nil
}
