package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/urfave/cli/v2"
)

// inputOptions say where items come from.
type inputOptions struct {
	Path      string
	Format    string
	IDField   string
	TextField string
	MaxLine   int
}

func inputFlags(in *inputOptions) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "input", Aliases: []string{"i"}, Usage: "JSONL or CSV `FILE` of items to ingest (optional when resuming)", EnvVars: []string{"SAWTOOTH_INPUT"}, Destination: &in.Path},
		&cli.StringFlag{Name: "format", Usage: "input format jsonl|csv|tsv (default: from the file extension)", Destination: &in.Format},
		&cli.StringFlag{Name: "id-field", Value: "id", Usage: "field or column holding each item's id", Destination: &in.IDField},
		&cli.StringFlag{Name: "text-field", Value: "text", Usage: "field or column holding each item's text", Destination: &in.TextField},
		&cli.IntFlag{Name: "max-line-bytes", Value: ingest.DefaultMaxLineBytes, Usage: "longest input line read; longer lines are skipped and reported", Destination: &in.MaxLine},
	}
}

func runCommand() *cli.Command {
	var (
		o   pipelineOptions
		in  inputOptions
		obs obsOptions
	)
	return &cli.Command{
		Name:  "run",
		Usage: "ingest --input (new or edited ids only) and drain every stage; resumes where the last run stopped",
		Description: `Exit codes: 0 every item reached done or a dead letter; 3 stopped early but
resumable (signal, quota exhausted); 1 fatal error; 2 usage error.
The API key is read from GEMINI_API_KEY (or GOOGLE_API_KEY), never from a flag.`,
		Flags:  append(append(append([]cli.Flag{dbFlag()}, inputFlags(&in)...), pipelineFlags(&o)...), obsFlags(&obs)...),
		Before: loadConfigFile,
		Action: func(c *cli.Context) error {
			o.fromContext(c)
			_, err := runPipeline(c.Context, &o, &in, c.App.Writer, c.App.ErrWriter, nil, obs)
			return err
		},
	}
}

func retryCommand() *cli.Command {
	var (
		o     pipelineOptions
		obs   obsOptions
		stage string
	)
	return &cli.Command{
		Name:   "retry",
		Usage:  "re-queue the dead letters of one stage and run again (re-runs only what failed there)",
		Flags:  append([]cli.Flag{dbFlag(), &cli.StringFlag{Name: "stage", Required: true, Usage: "stage whose dead letters to retry", Destination: &stage}}, append(pipelineFlags(&o), obsFlags(&obs)...)...),
		Before: loadConfigFile,
		Action: func(c *cli.Context) error {
			o.fromContext(c)
			o.MustExist = true
			_, err := runPipeline(c.Context, &o, &inputOptions{}, c.App.Writer, c.App.ErrWriter, func(db *store.DB) error {
				n, err := db.Requeue(stage, nil)
				if err == nil {
					fmt.Fprintf(c.App.ErrWriter, "re-queued %d dead letters at %s\n", n, stage)
				}
				return err
			}, obs)
			return err
		},
	}
}

func rerunCommand() *cli.Command {
	var (
		o     pipelineOptions
		obs   obsOptions
		stage string
	)
	return &cli.Command{
		Name:   "rerun",
		Usage:  "re-run one stage and every stage after it for all items (e.g. after a prompt change), then drain",
		Flags:  append([]cli.Flag{dbFlag(), &cli.StringFlag{Name: "from-stage", Required: true, Usage: "first stage to re-run", Destination: &stage}}, append(pipelineFlags(&o), obsFlags(&obs)...)...),
		Before: loadConfigFile,
		Action: func(c *cli.Context) error {
			o.fromContext(c)
			o.RerunChanged = true
			o.MustExist = true
			_, err := runPipeline(c.Context, &o, &inputOptions{}, c.App.Writer, c.App.ErrWriter, func(db *store.DB) error {
				n, err := db.Rerun(stage)
				if err == nil {
					fmt.Fprintf(c.App.ErrWriter, "re-queued %d items at %s\n", n, stage)
				}
				return err
			}, obs)
			return err
		},
	}
}

// runPipeline is run, retry, rerun and demo: open, reconcile the
// configuration, ingest, prepare, drain, summarise.

// runPipelineObs is runPipeline with logging and metrics options.
func runPipeline(ctx context.Context, o *pipelineOptions, in *inputOptions, stdout, stderr io.Writer, prep func(*store.DB) error, obs obsOptions) (pipeline.RunSummary, error) {
	var sum pipeline.RunSummary
	if _, err := newLogger(io.Discard, obs.LogFormat, obs.LogLevel); err != nil {
		return sum, err
	}
	b, err := o.newStages(ctx)
	if err != nil {
		return sum, err
	}
	db, err := o.openDB(b)
	if err != nil {
		return sum, err
	}
	defer db.Close()

	if changed := db.ChangedStages(); len(changed) > 0 {
		produced, err := producedFrom(db, changed[0])
		if err != nil {
			return sum, err
		}
		switch {
		case !produced:
			// Nothing was ever produced under the old configuration (say a
			// run that stopped at once on an unknown model): adopt the new one.
			if err := db.AcceptDefinition(); err != nil {
				return sum, err
			}
		case !o.RerunChanged:
			return sum, usagef("the configuration of stage %s changed since %s was last run (model, labels, prompt or options): pass --rerun-changed to re-run %s and the stages after it for every item, or run again with the previous settings",
				changed[0], o.DB, changed[0])
		default:
			n, err := db.Rerun(changed[0])
			if err != nil {
				return sum, err
			}
			if err := db.AcceptDefinition(); err != nil {
				return sum, err
			}
			fmt.Fprintf(stderr, "configuration of %s changed: re-queued %d items at %s\n", changed[0], n, changed[0])
		}
	}
	// Signals are handled from here on, so a Ctrl-C during a long ingest
	// stops cleanly too (exit 3); messages follow the progress display
	// once it exists.
	sigOut := &switchWriter{w: stderr}
	ctx, stop := withSignals(ctx, sigOut)
	defer stop()
	if in.Path != "" {
		if err := ingestFile(ctx, db, in, stderr); err != nil {
			return sum, err
		}
	}
	if prep != nil {
		if err := prep(db); err != nil {
			return sum, err
		}
	}
	o.wire(b, db)

	runID := store.NewRunID(time.Now())
	prog, err := newRunMonitor(db, b, runID, o.Quiet, obs, stderr)
	if err != nil {
		return sum, err
	}
	sigOut.set(prog.Writer())
	r := &pipeline.Runner{
		Store: db, Stages: b.stages, RunID: runID, Grace: o.Grace,
		OnTick: prog.tick, Log: prog.log,
	}
	sum, runErr := r.Run(ctx)
	prog.close()
	if cs := sum.Stages["classify"]; cs != nil {
		cs.CostUSD = b.cost(cs.Usage)
		// A limit learned in a quota storm or a failed run (the floor) is
		// no guide for tomorrow: keep the last good one then.
		if o.Fixed == 0 && (sum.Status == "complete" || sum.Message == "interrupted") {
			if err := db.SetLearnedLimit("classify", b.limiter.Limit()); err != nil && runErr == nil {
				runErr = err
			}
		}
		if err := db.SaveRun(sum); err != nil && runErr == nil {
			runErr = err
		}
	}
	if err := printSummary(stdout, db, sum, o.JSON); err != nil && runErr == nil {
		runErr = err
	}
	if runErr != nil {
		var fe *pipeline.FatalError
		switch {
		case errors.Is(runErr, pipeline.ErrStopped):
			fmt.Fprintf(stderr, "stopped early; nothing is lost. Resume with the same command (sawtooth run --db %s ...)\n", db.Path())
		case errors.As(runErr, &fe):
			return sum, fmt.Errorf("%w\nno item was dead-lettered for this; fix the cause and run again to resume", runErr)
		}
	}
	return sum, runErr
}

// producedFrom reports whether any item has an output or a dead letter at
// stage or a later one: whether a configuration change there matters.
func producedFrom(db *store.DB, stage string) (bool, error) {
	counts, err := db.Counts()
	if err != nil {
		return false, err
	}
	from := false
	for _, s := range counts.Stages {
		from = from || s.Stage == stage
		if from && (s.Output > 0 || s.Dead > 0) {
			return true, nil
		}
	}
	return false, nil
}

// withSignals cancels ctx on the first SIGINT/SIGTERM (stop taking work,
// let in-flight calls finish) and exits at once on the second: the
// database is consistent at every instant, so nothing is lost.
func withSignals(ctx context.Context, stderr io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
		case <-done:
			return
		}
		fmt.Fprintln(stderr, "\nstopping: finishing in-flight calls (signal again to exit at once; nothing is lost either way)")
		cancel()
		select {
		case <-ch:
			fmt.Fprintln(stderr, "exiting at once; run again to resume")
			os.Exit(exitStopped)
		case <-done:
		}
	}()
	return ctx, func() { signal.Stop(ch); close(done); cancel() }
}

const ingestBatch = 1000

// ingestFile streams the input into the DB in batches of one transaction
// each. Bad lines are reported and skipped; a file where most lines fail is
// an error, but what was ingested is kept.
func ingestFile(ctx context.Context, db *store.DB, in *inputOptions, stderr io.Writer) error {
	f, err := os.Open(in.Path)
	if err != nil {
		return fmt.Errorf("open input: %w", err)
	}
	defer f.Close()
	format := ingest.Format(strings.ToLower(in.Format))
	if format == "" {
		if format, err = ingest.DetectFormat(in.Path); err != nil {
			return usagef("%v", err)
		}
	}
	rd, err := ingest.NewReader(f, ingest.Options{Format: format, IDField: in.IDField, TextField: in.TextField, MaxLineBytes: in.MaxLine})
	if err != nil {
		return usagef("input %s: %v", in.Path, err)
	}
	var (
		total store.IngestStats
		batch []pipeline.Record
	)
	flush := func() error {
		st, err := db.Ingest(batch)
		if err != nil {
			return fmt.Errorf("ingest %s: %w", in.Path, err)
		}
		total = total.Add(st)
		batch = batch[:0]
		return nil
	}
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if len(batch) > 0 {
				if ferr := flush(); ferr != nil {
					return ferr
				}
			}
			return fmt.Errorf("input %s: %w (the %d records read before it are kept)", in.Path, err, total.New+total.Changed+total.Updated+total.Unchanged)
		}
		batch = append(batch, rec)
		if len(batch) == ingestBatch {
			if err := flush(); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted while ingesting %s after %d records (all kept): %w", in.Path, total.New+total.Changed+total.Updated+total.Unchanged, pipeline.ErrStopped)
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	problems := rd.Problems()
	for i, p := range problems {
		if i == 20 {
			fmt.Fprintf(stderr, "input %s: ... and %d more skipped lines\n", in.Path, rd.ProblemCount()-20)
			break
		}
		fmt.Fprintf(stderr, "input %s: %s\n", in.Path, p)
	}
	fmt.Fprintf(stderr, "ingested %s: %d new, %d edited (re-entering at the first stage that reads what changed), %d updated (no work redone), %d unchanged, %d lines skipped\n",
		in.Path, total.New, total.Changed, total.Updated, total.Unchanged, rd.ProblemCount())
	if lines := rd.Lines(); lines > 0 && rd.ProblemCount()*2 > lines {
		return fmt.Errorf("input %s: %d of %d lines could not be read: is it the right file, --format, --id-field and --text-field? "+
			"(the %d good lines are kept: fix the file and run again, or run without --input to process just them)",
			in.Path, rd.ProblemCount(), lines, total.New+total.Changed+total.Updated+total.Unchanged)
	}
	return nil
}
