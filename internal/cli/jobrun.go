package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/internal/monitor"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// jobRequest is what `run -f` (or a resume of a stored job) asks.
type jobRequest struct {
	Job          *job.Job
	APIKey       string
	RerunChanged bool
	// Resume says the job is the one the database recorded, run with no
	// --input: a stored input file that is gone is skipped, not an error.
	Resume bool
	// RetryStage, if set, re-queues that stage's dead letters first
	// (retry and rerun ingest nothing).
	RetryStage string
	// RerunFrom, if set, re-runs every item that reached that stage
	// (rerun --from-stage).
	RerunFrom string
	// consent is --dry-run, --yes and --confirm-above: a dry run says what
	// would run and writes nothing; a re-run (of a changed stage or from
	// RerunFrom) of more items needs a yes, as a run from flags does.
	consent
	Quiet, JSON bool
	Grace       time.Duration
	// NoCache asks the API for every item (no answer reuse); Budget and
	// BudgetTotal cap the run's and the database's spend (0: none).
	NoCache             bool
	Budget, BudgetTotal float64
	Obs                 monitor.Options
	Out, ErrOut         io.Writer
	ExitNow             func(error)
}

// runJob runs a job: build every stage, open the DB (a stage added to
// the stored list runs for the items already past it), settle a changed
// job (refused with its diff, or re-run with --rerun-changed), ingest,
// record the job, drain, summarise.
func runJob(ctx context.Context, req jobRequest) error {
	j, stderr := req.Job, req.ErrOut
	sigOut := monitor.NewSwitchWriter(stderr)
	ctx, stop := withSignals(ctx, sigOut, req.ExitNow)
	defer stop()
	b, err := buildJob(ctx, j, buildOptions{APIKey: req.APIKey})
	if err != nil {
		return err
	}
	for _, l := range b.llm {
		if l.Mode == job.ModeBatch || l.Mode == job.ModeAuto {
			return errBatchOnlyFromFlags(fmt.Sprintf("%s: stage %s: mode: %s", j.File, l.Name, l.Mode))
		}
	}
	if req.Budget > 0 || req.BudgetTotal > 0 {
		if err := b.checkPriced(); err != nil {
			return err
		}
	}
	if err := checkDBPath(j.DB, false); err != nil {
		return err
	}
	var plan *ingest.Plan
	if j.Input.Path != "" && req.RetryStage == "" && req.RerunFrom == "" {
		if _, err := os.Stat(jobInputPath(j)); err != nil && req.Resume {
			// The stored job's input is gone (last night's file): resume
			// what the database holds.
			fmt.Fprintf(stderr, "the job's input %s is not there: resuming what %s holds (give --input FILE for new items)\n", jobInputPath(j), j.DB)
		} else if plan, err = checkJobInput(ctx, j, stderr); err != nil {
			return err
		}
	}
	if err := checkJobSample(j, plan); err != nil {
		return err
	}
	if !req.RerunChanged {
		if err := refuseChangeBeforeGrowth(j.DB, b); err != nil {
			return err
		}
	}
	if req.DryRun || req.RerunChanged || req.RerunFrom != "" {
		// Decided before the open, which already writes an added stage.
		if stop, err := consentToJob(ctx, b, req, plan); stop || err != nil {
			return err
		}
	}
	db, err := openJobDatabase(j.DB, b.defs)
	if err != nil {
		return err
	}
	defer db.Close()
	if added := addedStages(db); len(added) > 0 {
		fmt.Fprintf(stderr, "stage %s added to the job: the items already past it go through it (and the stages after it) once; nothing before it is paid again\n", strings.Join(added, ", "))
	}
	if err := settleChanges(db, b, req); err != nil {
		return err
	}
	if plan != nil {
		if err := ingestFile(ctx, db, plan, stderr); err != nil {
			return err
		}
	}
	if req.RerunFrom != "" {
		if stop, err := rerunJobFrom(db, req); stop || err != nil {
			return err
		}
	}
	if req.RetryStage != "" {
		n, err := db.Requeue(req.RetryStage, nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "re-queued %s at %s\n", plural(n, "dead letter"), req.RetryStage)
	}
	if err := db.SaveJob(b.stored.WithDir(j.Dir).Marshal()); err != nil {
		return err
	}
	// The fleet limiters' warnings follow the progress display, in the
	// run's log format, as the runner's do.
	fleetLog, err := monitor.NewLogger(sigOut, req.Obs.LogFormat, req.Obs.LogLevel)
	if err != nil {
		return usage(err)
	}
	if err := b.addLimiters(ctx, db, fleetLog); err != nil {
		return err
	}

	runID := store.NewRunID(time.Now())
	rc := monitor.RunConfig{DBPath: db.Path(), RunID: runID, Quiet: req.Quiet, StageCost: b.cost, BudgetUSD: req.Budget}
	if isPostgres(j.DB) {
		rc.DBPath = "" // no file beside it for the live status: status reads the database
	}
	counts, err := db.Counts()
	if err != nil {
		return err
	}
	for _, s := range counts.Stages {
		rc.Stages = append(rc.Stages, s.Stage)
		rc.Queued = append(rc.Queued, int64(s.Queued))
		rc.Before = append(rc.Before, int64(s.Output+s.Dead))
		var lim pipeline.Limiter
		if l := b.limiters[s.Stage]; l != nil {
			lim = l
		}
		rc.Limiters = append(rc.Limiters, lim)
	}
	prog, err := monitor.Start(stderr, req.Obs, rc)
	if err != nil {
		return usage(err)
	}
	sigOut.Set(prog.Writer())
	r := &pipeline.Runner{Store: db, Stages: b.stages, RunID: runID, Grace: req.Grace, OnTick: prog.Tick, Log: prog.Log(),
		NoCache: req.NoCache, Budget: pipeline.Budget{RunUSD: req.Budget, TotalUSD: req.BudgetTotal}}
	sum, runErr := r.Run(ctx)
	prog.Close()
	for name, lim := range b.limiters {
		if st := sum.Stages[name]; st != nil {
			// The runner priced the calls (StageConfig.Price).
			if sum.Status == "complete" || sum.Message == "interrupted" {
				if err := saveLearnedState(db, name, lim); err != nil && runErr == nil {
					runErr = err
				}
			}
		}
	}
	if runErr == nil {
		// A job runs online: open jobs of an earlier batch run from flags
		// (a flags database moved to a job file) hold items it never saw.
		runErr = heldByOpenJobs(db)
	}
	endRun(&sum, runErr)
	if sum.ID != "" {
		if err := db.SaveRun(sum); err != nil && runErr == nil {
			runErr = err
		}
	}
	if err := monitor.PrintSummary(req.Out, stageOrder(db), sum, req.JSON, nextCommands(db.Path(), sum)); err != nil && runErr == nil {
		runErr = err
	}
	if errors.Is(runErr, pipeline.ErrStopped) {
		printResumeHint(stderr, db.Path(), req.Budget, req.BudgetTotal, runErr)
	}
	return runErr
}

// settleChanges compares the job with the one the DB recorded. A stage
// whose answers would change (model, prompt, schema, labels, condition,
// a file's contents) is refused with the diff, unless --rerun-changed:
// then that stage and every stage after it run again. Changes that do not
// change answers (input, limiter, mode) are shown and adopted.
func settleChanges(db jobDatabase, b *jobStages, req jobRequest) error {
	var diff []job.Change
	if raw, err := db.Job(); err == nil && raw != nil {
		if old, err := job.UnmarshalStored(raw); err == nil {
			diff, _ = job.Diff(old, b.stored)
		}
	}
	added := addedStages(db)
	diff = slices.DeleteFunc(diff, func(c job.Change) bool { return c.Key == "" && slices.Contains(added, c.Stage) })
	changed := db.ChangedStages()
	if len(changed) == 0 {
		if len(diff) > 0 {
			fmt.Fprintf(req.ErrOut, "the job changed since the last run, in ways that change no stage's answers:\n  %s\n", joinChanges(diff))
		}
		return nil
	}
	produced, err := producedFrom(db, changed[0])
	if err != nil {
		return err
	}
	if !produced {
		return db.AcceptDefinition()
	}
	if !req.RerunChanged {
		return changedError(db.Path(), changed, diff)
	}
	n, err := db.Rerun(changed[0])
	if err != nil {
		return err
	}
	if err := db.AcceptDefinition(); err != nil {
		return err
	}
	fmt.Fprintf(req.ErrOut, "stage %s changed:\n  %s\nre-queued %s at %s\n", changed[0], joinChanges(diff), plural(n, "item"), changed[0])
	return nil
}

// consentToJob reads what the run would do and applies the rule a run
// from flags follows: a change nobody asked to re-run is refused, a dry
// run says what would run and stops, and a re-run of more than
// --confirm-above items needs a yes. Nothing is written either way.
func consentToJob(ctx context.Context, b *jobStages, req jobRequest, input *ingest.Plan) (stop bool, err error) {
	w, err := readJobWork(ctx, b, workRequest{RerunChanged: req.RerunChanged, RerunFrom: req.RerunFrom, NoCache: req.NoCache}, input)
	if err != nil {
		return true, err
	}
	if w.Refused {
		return true, changedError(b.job.DB, w.Changed, w.Diff)
	}
	if req.DryRun {
		w.print(req.Out, b.job.DB)
		return true, nil
	}
	if w.Rerun > 0 {
		if err := req.allowRerun(w.Rerun, w.printRerun, req.ErrOut); err != nil {
			return true, err
		}
	}
	return false, nil
}

// rerunJobFrom sends every item that reached req.RerunFrom back there
// (consentToJob has had the say on it).
func rerunJobFrom(db pipeline.Database, req jobRequest) (stop bool, err error) {
	n, err := db.Rerun(req.RerunFrom)
	if err != nil {
		return true, err
	}
	fmt.Fprintf(req.ErrOut, "rerun --from-stage %s: re-queued %s\n", req.RerunFrom, plural(n, "item"))
	return false, nil
}

// changedError refuses a run whose job changed stages that produced
// answers, with the diff.
func changedError(path string, changed []string, diff []job.Change) error {
	msg := fmt.Sprintf("the job changed since %s was last run, in stage %s", path, strings.Join(changed, ", "))
	if len(diff) > 0 {
		msg += ":\n  " + joinChanges(diff)
	}
	return usagef("%s\nRe-running %s and the stages after it re-pays the items that reached it: run again with --rerun-changed to do so, or restore the job as it was (`sawtooth job show --db %s`); nothing was changed",
		msg, changed[0], shellQuote(path))
}

// refuseChangeBeforeGrowth refuses, before the store opens, a job that
// both adds stages and changes a kept one: opening would already record
// the added stages (and re-queue the items past them), and a refusal
// after that would not leave the database as it was. Without added
// stages the refusal comes after the open, which then writes nothing.
func refuseChangeBeforeGrowth(path string, b *jobStages) error {
	if isPostgres(path) {
		return nil // its stage list never grows: Open refuses added stages
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		return nil
	}
	stored, err := store.ReadDefinition(path, 0)
	if err != nil || len(stored) == len(b.defs) {
		return nil // Open says what is wrong, or nothing was added
	}
	fingerprint := map[string]string{}
	for _, d := range b.defs {
		fingerprint[d.Name] = d.Fingerprint
	}
	var changed []string
	for _, d := range stored {
		if fp, kept := fingerprint[d.Name]; kept && fp != d.Fingerprint {
			changed = append(changed, d.Name)
		}
	}
	if len(changed) == 0 {
		return nil
	}
	var diff []job.Change
	if raw, err := store.ReadJob(path); err == nil && raw != nil {
		if old, err := job.UnmarshalStored(raw); err == nil {
			diff, _ = job.Diff(old, b.stored)
		}
	}
	return changedError(path, changed, diff)
}

func joinChanges(cs []job.Change) string {
	lines := make([]string, len(cs))
	for i, c := range cs {
		lines[i] = c.String()
	}
	return strings.Join(lines, "\n  ")
}
