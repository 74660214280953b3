package cli

import (
	"context"
	"io"
	"path/filepath"

	"github.com/sawtooth-dev/sawtooth/internal/monitor"
	"github.com/urfave/cli/v2"
)

// runOptions are `sawtooth run`'s.
type runOptions struct {
	// JobFile is -f: the job file to run (its stages, input and DB).
	JobFile     string
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
		Usage: "run a job file (-f JOB.yaml), or ingest --input (new or edited ids only), and drain every stage; --db alone resumes where the last run stopped",
		Description: `Exit codes: 0 every item reached done or a dead letter; 3 stopped early but
resumable (signal, quota exhausted, the PostgreSQL database lost); 1 fatal
error; 2 usage error.
The API key is read from GEMINI_API_KEY (or GOOGLE_API_KEY), never from a flag.`,
		Flags: append(append(append(append([]cli.Flag{dbFlag(), jobFileFlag(&opts.JobFile)}, inputFlags(&opts.Input)...), pipelineFlags(&opts.Pipeline)...), rerunFlags(&opts.Pipeline, true)...), append(obsFlags(&opts.Obs), batchFlags(&opts.Batch)...)...),
		Before: func(c *cli.Context) error {
			if err := loadConfig(c); err != nil {
				return err
			}
			if c.String("file") != "" {
				return checkJobFlags(c)
			}
			return requireFlags(c, "db")
		},
		Action: func(c *cli.Context) error {
			opts.Pipeline.fromContext(c)
			opts.Out, opts.ErrOut, opts.ExitNow = c.App.Writer, c.App.ErrWriter, cfg.ExitNow
			opts.Pipeline.Confirm = cfg.Confirm
			opts.Obs.Quiet, opts.Obs.Now = opts.Pipeline.Quiet, cfg.Now
			// A job file, or a database that recorded one, runs as a job;
			// --input then names tonight's file in place of the job's.
			j, err := loadJob(opts.JobFile, opts.Pipeline.DB)
			if err != nil {
				return err
			}
			if j == nil {
				// A run naming no flag that defines the pipeline resumes
				// with the settings the database recorded; one naming any
				// is defined by its flags, the defaults for the rest.
				opts.Pipeline.KeepStored = !definesPipeline(c)
				if err := refuseBatchFlagsOnline(c); err != nil {
					return err
				}
				if !opts.Pipeline.KeepStored {
					if err := refuseSilentOnline(c, opts.Pipeline.DB); err != nil {
						return err
					}
				}
				return runRun(c.Context, &opts)
			}
			applyJobFlags(c, j)
			if opts.JobFile == "" {
				if err := checkJobFlags(c); err != nil {
					return err
				}
			}
			if opts.Input.Path != "" {
				if j.Input.Path, err = filepath.Abs(opts.Input.Path); err != nil {
					return usagef("--input %s: %v", opts.Input.Path, err)
				}
			}
			_, err = drain(c.Context, drainRequest{Pipeline: &opts.Pipeline, Job: j, Resume: opts.JobFile == "" && opts.Input.Path == "",
				Obs: opts.Obs, Out: opts.Out, ErrOut: opts.ErrOut, ExitNow: opts.ExitNow})
			return wordStore(err, j.DB) // the job's db, which --db need not name
		},
	}
}

// runRun ingests the input, if any, and drains every stage.
func runRun(ctx context.Context, opts *runOptions) error {
	_, err := drain(ctx, drainRequest{Pipeline: &opts.Pipeline, Input: opts.Input, Obs: opts.Obs, Batch: opts.Batch,
		Out: opts.Out, ErrOut: opts.ErrOut, ExitNow: opts.ExitNow})
	return err
}
