package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
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
	// MaxFieldLines, DateFormat and RatingRange are ingest.Options'.
	MaxFieldLines int
	DateFormat    string
	RatingRange   string
}

func inputFlags(in *inputOptions) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "input", Aliases: []string{"i"}, Usage: "JSONL or CSV `FILE` of items to ingest (optional when resuming)", EnvVars: []string{"SAWTOOTH_INPUT"}, Destination: &in.Path},
		&cli.StringFlag{Name: "format", Usage: "input format jsonl|csv|tsv (default: from the file extension)", Destination: &in.Format},
		&cli.StringFlag{Name: "id-field", Value: "id", Usage: "field or column holding each item's id", Destination: &in.IDField},
		&cli.StringFlag{Name: "text-field", Value: "text", Usage: "field or column holding each item's text", Destination: &in.TextField},
		&cli.IntFlag{Name: "max-line-bytes", Value: ingest.DefaultMaxLineBytes, Usage: "longest input line read; longer lines are skipped and reported", Destination: &in.MaxLine},
		&cli.IntFlag{Name: "max-field-lines", Value: ingest.DefaultMaxFieldLines, Usage: "most lines one quoted CSV field may span; past it the quote is taken for a missing closing quote and only its line is skipped", Destination: &in.MaxFieldLines},
		&cli.StringFlag{Name: "date-format", Usage: "Go time `LAYOUT` of the date field when it is none of the common ones, e.g. \"02/01/2006 15:04\"", Destination: &in.DateFormat},
		&cli.StringFlag{Name: "rating-range", Value: ingest.DefaultRatingRange, Usage: "`MIN-MAX` of the rating field; a line with a rating outside it, or not finite, is skipped and reported", Destination: &in.RatingRange},
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
	// Signals are handled from here on, so a Ctrl-C while the input is
	// checked or ingested stops cleanly too (exit 3); messages follow the
	// progress display once it exists.
	sigOut := &switchWriter{w: stderr}
	ctx, stop := withSignals(ctx, sigOut)
	defer stop()
	// The input is read and accepted before the DB is opened: a refused
	// file changes nothing.
	var input *ingest.Plan
	if in.Path != "" {
		var err error
		if input, err = checkInput(ctx, o, in, stderr); err != nil {
			return sum, err
		}
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
	if input != nil {
		if err := ingestFile(ctx, db, input, stderr); err != nil {
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
		case errors.As(runErr, &fe) && fe.DeadLettered == 0:
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

// checkInput reads the input once, writing nothing, and accepts it or not
// (see ingest.Check). A refused file's problems are printed.
func checkInput(ctx context.Context, o *pipelineOptions, in *inputOptions, stderr io.Writer) (*ingest.Plan, error) {
	format := ingest.Format(strings.ToLower(in.Format))
	if format == "" {
		var err error
		if format, err = ingest.DetectFormat(in.Path); err != nil {
			return nil, usagef("%v", err)
		}
	}
	opt := ingest.Options{
		Format: format, IDField: in.IDField, TextField: in.TextField, MaxLineBytes: in.MaxLine, MaxFieldLines: in.MaxFieldLines,
		GroupBy: o.GroupBy, DateField: o.DateField, RatingField: o.RatingField, DateFormat: in.DateFormat, RatingRange: in.RatingRange,
		// A file need not have the default fields; one it lacks only in
		// most rows, or a field the user named, gets a warning.
		OptionalFields: append(slices.Clone(stages.DefaultGroupBy), stages.DefaultDateField, stages.DefaultRatingField),
	}
	if err := opt.Validate(); err != nil {
		return nil, usagef("input %s: %v", in.Path, err)
	}
	plan, err := ingest.Check(ctx, in.Path, opt)
	var refused *ingest.RefusedError
	switch {
	case errors.As(err, &refused):
		printProblems(stderr, refused.Result)
		return nil, err
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("interrupted while checking %s: nothing was ingested: %w", in.Path, pipeline.ErrStopped)
	case err != nil:
		return nil, err
	}
	return plan, nil
}

// ingestFile applies an accepted input to the DB in batches of one
// transaction each, and says what it did.
func ingestFile(ctx context.Context, db *store.DB, plan *ingest.Plan, stderr io.Writer) error {
	var total store.IngestStats
	res, err := plan.Apply(ctx, ingestBatch, func(batch []pipeline.Record) error {
		st, err := db.Ingest(batch)
		total = total.Add(st)
		return err
	})
	kept := total.New + total.Changed + total.Updated + total.Unchanged
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("interrupted while ingesting %s after %d records (all kept): %w", res.Path, kept, pipeline.ErrStopped)
	case err != nil:
		return fmt.Errorf("ingest %s: %w (the %d records ingested before it are kept)", res.Path, err, kept)
	}
	printProblems(stderr, res)
	fmt.Fprintf(stderr, "ingested %s: %d new, %d edited (re-entering at the first stage that reads what changed), %d updated (no work redone), %d unchanged, %d lines skipped\n",
		res.Path, total.New, total.Changed, total.Updated, total.Unchanged, res.BadLines)
	return nil
}

// printProblems prints the first 20 skipped lines of an input, and what
// it says about the date order and the fields the aggregate reads.
func printProblems(stderr io.Writer, res ingest.Result) {
	for i, p := range res.Problems {
		if i == 20 {
			fmt.Fprintf(stderr, "input %s: ... and %d more skipped lines\n", res.Path, res.ProblemCount-20)
			break
		}
		fmt.Fprintf(stderr, "input %s: %s\n", res.Path, p)
	}
	if res.DateOrder != "" {
		fmt.Fprintf(stderr, "input %s: %s\n", res.Path, res.DateOrder)
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(stderr, "warning: input %s: %s\n", res.Path, w)
	}
}
