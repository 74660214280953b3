package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sawtooth-dev/sawtooth/internal/monitor"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// drainRequest is what run, retry, rerun and demo ask of drain.
type drainRequest struct {
	Pipeline *pipelineOptions
	Input    inputOptions
	Obs      monitor.Options
	// Prepare, if set, changes the open DB after ingest and before the
	// run (retry and rerun re-queue items there).
	Prepare func(*store.DB) error
	// Out gets the run summary; ErrOut progress and notices.
	Out, ErrOut io.Writer
	// ExitNow ends the process at once on a second signal.
	ExitNow func(error)
}

// drain is run, retry, rerun and demo: open, reconcile the configuration,
// ingest, prepare, drain, summarise.
func drain(ctx context.Context, req drainRequest) (pipeline.RunSummary, error) {
	var sum pipeline.RunSummary
	o, in, obs, stdout, stderr := req.Pipeline, &req.Input, req.Obs, req.Out, req.ErrOut
	if _, err := monitor.NewLogger(io.Discard, obs.LogFormat, obs.LogLevel); err != nil {
		return sum, usage(err)
	}
	b, err := o.buildStages(ctx)
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
	sigOut := monitor.NewSwitchWriter(stderr)
	ctx, stop := withSignals(ctx, sigOut, req.ExitNow)
	defer stop()
	if in.Path != "" {
		if err := ingestFile(ctx, db, in, stderr); err != nil {
			return sum, err
		}
	}
	if req.Prepare != nil {
		if err := req.Prepare(db); err != nil {
			return sum, err
		}
	}
	o.addLimiter(b, db)

	runID := store.NewRunID(time.Now())
	rc, err := monitorConfig(db, b, runID, o.Quiet)
	if err != nil {
		return sum, err
	}
	prog, err := monitor.Start(stderr, obs, rc)
	if err != nil {
		return sum, usage(err)
	}
	sigOut.Set(prog.Writer())
	r := &pipeline.Runner{
		Store: db, Stages: b.stages, RunID: runID, Grace: o.Grace,
		OnTick: prog.Tick, Log: prog.Log(),
	}
	sum, runErr := r.Run(ctx)
	prog.Close()
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
	if err := monitor.PrintSummary(stdout, db.Path(), stageOrder(db), sum, o.JSON); err != nil && runErr == nil {
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

// monitorConfig is what the monitor needs to know of a run, read from
// the DB and the stages: per stage its name, how many items wait there
// now, and its limiter.
func monitorConfig(db *store.DB, b *stageSet, runID string, quiet bool) (monitor.RunConfig, error) {
	rc := monitor.RunConfig{DBPath: db.Path(), RunID: runID, Quiet: quiet, Cost: b.cost}
	counts, err := db.Counts()
	if err != nil {
		return rc, err
	}
	for _, s := range counts.Stages {
		rc.Stages = append(rc.Stages, s.Stage)
		rc.Queued = append(rc.Queued, int64(s.Queued))
		var lim pipeline.Limiter
		for _, sc := range b.stages {
			if sc.Stage.Name() == s.Stage && sc.Limiter != nil {
				lim = sc.Limiter
			}
		}
		rc.Limiters = append(rc.Limiters, lim)
	}
	return rc, nil
}

// stageOrder is the DB's stage names in pipeline order.
func stageOrder(db *store.DB) []string {
	var out []string
	for _, s := range db.Stages() {
		out = append(out, s.Name)
	}
	return out
}
