package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/sawtooth-dev/sawtooth/batch"
	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/internal/footprint"
	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/internal/monitor"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// drainRequest is what run, retry, rerun and demo ask of drain.
type drainRequest struct {
	// Pipeline holds the run's settings; without Job, its stage flags
	// define the job too (compiled by buildStages).
	Pipeline *pipelineOptions
	// Job, if set, is the job to run: a job file's, or the one the
	// database recorded. Input and Batch are then unused: the job says
	// where its items come from and how its stages run.
	Job *job.Job
	// Resume says Job is the one the database recorded, run with no
	// --input: a stored input file that is gone is skipped, not an error.
	Resume bool
	Input  inputOptions
	Obs    monitor.Options
	// RerunFrom, if set, re-runs every item from that stage (rerun).
	RerunFrom string
	// RetryStage, if set, re-queues that stage's dead letters (retry).
	RetryStage string
	// Out gets the run summary and a dry run's plan; ErrOut progress and
	// notices.
	Out, ErrOut io.Writer
	// ExitNow ends the process at once on a second signal.
	ExitNow func(error)
	// Batch says whether classify runs online or through batch jobs.
	Batch batchOptions
}

// logWords words the store's errors the run logs (a damaged cached
// answer, say) with the commands that deal with them, as its errors are:
// on the database the run names, --db when given, else the job file's.
func (req *drainRequest) logWords() func(error) error {
	given := req.Pipeline.DB
	if req.Job != nil {
		given = req.Job.DB
	}
	return func(err error) error { return wordStore(err, given) }
}

// drain is run, retry, rerun and demo, from flags or from a job: check
// every argument, build the stages (one builder), open, settle a changed
// job, ingest, re-queue, record the job, drain, summarise.
//
// Everything the command line names (flags, stage names, the input file
// and its format, the prompt file, the --db path) is checked before the
// DB is opened for writing or any file is created, so a command that
// fails on its arguments changes nothing.
func drain(ctx context.Context, req drainRequest) (pipeline.RunSummary, error) {
	req.Obs.Words = req.logWords()
	// Signals are handled from here on, so a Ctrl-C while the input is
	// checked or ingested stops cleanly too (exit 3); messages follow the
	// progress display once it exists.
	sigOut := monitor.NewSwitchWriter(req.ErrOut)
	ctx, stop := withSignals(ctx, sigOut, req.ExitNow)
	defer stop()
	// The packages' init touched the code and tables of every command
	// and dependency; the checks, the open and the ingest below need a
	// fraction of them (#31).
	footprint.ReleaseExecutable()
	open := openFlags
	if req.Job != nil {
		open = openJob
	}
	b, input, db, err := open(ctx, &req)
	if err != nil || db == nil {
		return pipeline.RunSummary{}, err // db nil: a dry run, or a re-run nobody confirmed
	}
	defer db.Close()
	d := &drainRun{req: &req, b: b, db: db, obs: req.Obs, sigOut: sigOut}
	d.obs.Quiet = d.obs.Quiet || req.Pipeline.Quiet
	if err := d.ready(ctx, input); err != nil {
		return d.sum, err
	}
	runStages, err := d.runBatch(ctx)
	if err != nil {
		return d.sum, err
	}
	prog, err := d.startProgress()
	if err != nil {
		return d.sum, err
	}
	sum, runErr := d.runOnline(ctx, runStages, prog)
	prog.Close()
	return finish(db, b, &req, sum, runErr, d.phase)
}

// drainRun is a drain past its open: its steps (ready, runBatch,
// startProgress, runOnline) hand each other the run's mode, its record
// and its batch phase through it rather than through a dozen locals.
type drainRun struct {
	req *drainRequest
	b   *jobStages
	db  pipeline.Database
	// obs is req.Obs made quiet by --quiet too, for the run's own log
	// and its progress display; the batch phase is handed req.Obs.
	obs monitor.Options
	// sigOut is where the signal messages go: stderr, then the progress
	// display's writer once it is drawn.
	sigOut *monitor.SwitchWriter
	mode   batch.Mode
	runID  string
	// sum is the run record as saved before a batch phase, and as its
	// failure ended it; empty for a run with no batch phase (the
	// runner's summary is drain's own, returned by runOnline).
	sum   pipeline.RunSummary
	phase *batchPhase
}

// ready checks and prepares the open run (begin), keeping how classify
// runs for the steps after it.
func (d *drainRun) ready(ctx context.Context, input *ingest.Plan) error {
	// The fleet limiter's warnings (the shared quota unreachable) follow
	// the progress display, in the run's log format, as the runner's do.
	fleetLog, err := d.obs.Logger(d.sigOut)
	if err != nil {
		return usage(err)
	}
	d.mode, err = begin(ctx, d.db, d.b, input, d.req, fleetLog)
	return err
}

// runBatch runs the stages batch jobs run, if any, and returns the
// stages left to run online.
//
// One run record for the whole command: a batch phase is part of the
// run, so the record is saved "running" before it (a run killed in it
// reads killed, with what its commits recorded) and its duration is the
// command's.
func (d *drainRun) runBatch(ctx context.Context) ([]pipeline.StageConfig, error) {
	start := time.Now()
	d.runID = store.NewRunID(start)
	if d.mode != batch.ModeOnline {
		var err error
		if d.sum, err = startBatchRun(d.db, d.b, d.runID, start); err != nil {
			return nil, err
		}
	}
	req := d.req
	runStages, phase, err := drainBatch(ctx, d.db, d.b, req.Pipeline, req.Batch, req.Obs, req.ErrOut)
	d.phase = phase
	if err != nil {
		// worded as finish words the runner's: the runs before a batched
		// stage and its driver's online calls meet the same errors
		return nil, endFailedBatch(d.db, &d.sum, phase, wordsFor(d.b.fromFlags).word(err))
	}
	return runStages, nil
}

// startProgress draws the progress display the online run reports to
// and stores an online run's job. The job is stored once nothing is left
// to refuse the run, before its first call: a refused command changes
// nothing a later `run --db` reads.
func (d *drainRun) startProgress() (*monitor.Progress, error) {
	o := d.req.Pipeline
	rc, err := monitorConfig(d.db, d.b, d.runID, o.Quiet)
	if err != nil {
		return nil, err
	}
	rc.BudgetUSD = o.Budget
	prog, err := monitor.Start(d.req.ErrOut, d.obs, rc)
	if err != nil {
		return nil, usage(err)
	}
	d.sigOut.Set(prog.Writer())
	if d.mode == batch.ModeOnline {
		if err := storeJob(d.db, d.b); err != nil {
			prog.Close()
			return nil, err
		}
	}
	return prog, nil
}

// runOnline runs the stages left after the batch phase, reporting to
// prog, under what the phase left of the run's budget; the error is the
// runner's, for finish to settle.
func (d *drainRun) runOnline(ctx context.Context, runStages []pipeline.StageConfig, prog *monitor.Progress) (pipeline.RunSummary, error) {
	if len(runStages) == 0 {
		// Every stage ran through batch jobs: no online call is left.
		return pipeline.RunSummary{ID: d.runID, Started: d.sum.Started, Ended: time.Now(), Status: "complete", Stages: map[string]*pipeline.StageStats{}}, nil
	}
	o := d.req.Pipeline
	r := &pipeline.Runner{
		Store: d.db, Stages: runStages, RunID: d.runID, Started: d.sum.Started, Grace: o.Grace, Lease: o.Lease, Heartbeat: o.Heartbeat,
		OnTick: prog.Tick, Log: prog.Log(),
		NoCache: o.NoCache, Budget: d.phase.onlineBudget(o),
	}
	return runLean(ctx, r)
}

// runLean runs r with what the setup touched of the binary handed back
// and the runtime's memory limit following the heap from a floor: a
// night's peak resident set was as much the binary's pages and the
// heap's growth between collections as its work (#31).
func runLean(ctx context.Context, r *pipeline.Runner) (pipeline.RunSummary, error) {
	footprint.ReleaseExecutable()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	defer footprint.Follow(footprint.DefaultFloor, tick.C)()
	return r.Run(ctx)
}

// startBatchRun stores the job and a run record saved "running" before
// a batch phase, so that a run killed in it reads killed.
func startBatchRun(db pipeline.Database, b *jobStages, runID string, start time.Time) (pipeline.RunSummary, error) {
	if err := storeJob(db, b); err != nil {
		return pipeline.RunSummary{}, err
	}
	sum := pipeline.RunSummary{ID: runID, Started: start, Status: "running"}
	return sum, db.SaveRun(sum)
}

// endFailedBatch ends the run record of a run whose batch phase failed
// with err (none when the run saved none), with what the phase spent, and
// returns err.
func endFailedBatch(db pipeline.Database, sum *pipeline.RunSummary, phase *batchPhase, err error) error {
	if sum.ID == "" {
		return err
	}
	sum.Ended = time.Now()
	phase.addTo(sum)
	endRun(sum, err)
	if serr := db.SaveRun(*sum); serr != nil {
		err = fmt.Errorf("%w (and its run record: %v)", err, serr)
	}
	return err
}

// begin readies an open run: every check that can refuse it first (its
// limiters, a batch mode the database cannot keep jobs for), then
// prepare. It returns how classify runs; fleetLog is the fleet
// limiter's log.
func begin(ctx context.Context, db pipeline.Database, b *jobStages, input *ingest.Plan, req *drainRequest, fleetLog *slog.Logger) (batch.Mode, error) {
	b.noteNewModels(db, req.ErrOut)
	if err := b.addLimiters(ctx, db, fleetLog); err != nil {
		return "", err
	}
	mode, err := req.Batch.check()
	if err != nil {
		return "", err
	}
	if err := batchReady(db, mode); err != nil {
		return "", err
	}
	return mode, prepare(ctx, db, b, input, req)
}

// batchReady refuses a batch or auto run on a database that cannot keep
// batch jobs, before the run ingests or stores anything.
func batchReady(db pipeline.Database, mode batch.Mode) error {
	if mode == batch.ModeOnline {
		return nil
	}
	_, err := batchStore(db)
	return err
}

// prepare does what the run does before it drains: ingest the input,
// re-queue what rerun --from-stage or retry asks, and say how the job
// differs from the one stored (storeJob stores it once the run starts).
func prepare(ctx context.Context, db pipeline.Database, b *jobStages, input *ingest.Plan, req *drainRequest) error {
	stderr := req.ErrOut
	if input != nil {
		if err := ingestFile(ctx, db, input, stderr); err != nil {
			return err
		}
	}
	if req.Job != nil && req.RerunFrom != "" {
		// A job's rerun --from-stage is settled here, after the ingest
		// (the flags' reconcile re-queued it before).
		n, err := db.Rerun(req.RerunFrom)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "rerun --from-stage %s: re-queued %s\n", req.RerunFrom, plural(n, "item"))
	}
	if req.RetryStage != "" {
		n, err := db.Requeue(req.RetryStage, nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "re-queued %s at %s\n", plural(n, "dead letter"), req.RetryStage)
	}
	sayJobChanges(db, b, stderr)
	return nil
}

// finish settles a drained run: the batch phase's figures, the learned
// limits, items left in batch jobs, the run record, the summary and the
// budget, and the error worded for the user.
func finish(db pipeline.Database, b *jobStages, req *drainRequest, sum pipeline.RunSummary, runErr error, phase *batchPhase) (pipeline.RunSummary, error) {
	o, stdout, stderr := req.Pipeline, req.Out, req.ErrOut
	phase.addTo(&sum)
	if err := b.saveLearned(db, sum); err != nil && runErr == nil {
		runErr = err
	}
	if runErr == nil {
		runErr = phase.leftover(db)
	}
	if runErr == nil && phase == nil {
		runErr = heldByOpenJobs(db)
	}
	// The record and the summary say how the run ended, as the exit code
	// does, even when what stopped it came after the runner.
	endRun(&sum, runErr)
	if sum.ID != "" {
		if err := db.SaveRun(sum); err != nil && runErr == nil {
			runErr = err
		}
	}
	if err := monitor.PrintSummary(stdout, stageOrder(db), sum, o.JSON, nextCommands(db.Path(), sum)); err != nil && runErr == nil {
		runErr = err
	}
	if !o.JSON {
		printBudget(stdout, db, o, sum)
	}
	if runErr != nil {
		runErr = wordsFor(b.fromFlags).word(runErr)
		var (
			fe   *pipeline.FatalError
			lost *pipeline.StoreLostError
		)
		switch {
		case errors.As(runErr, &lost):
			return sum, &storeLostError{db: db.Path(), lost: lost}
		case errors.Is(runErr, pipeline.ErrStopped):
			printResumeHint(stderr, db.Path(), o.Budget, o.BudgetTotal, runErr)
		case errors.As(runErr, &fe) && fe.DeadLettered == 0:
			// The runner's message says how many were dead-lettered
			// for the cause when some were.
			return sum, fmt.Errorf("%w\nno item was dead-lettered for this; fix the cause and run again to resume", runErr)
		default:
			return sum, wordSameFailure(runErr, db.Path())
		}
	}
	return sum, runErr
}

// endRun records in sum how the run ended when err, the command's error,
// came after the runner reported it complete (items left in batch jobs,
// a record that could not be saved) or before it ran (a batch phase that
// stopped): stopped for a resumable stop (exit 3), failed otherwise.
func endRun(sum *pipeline.RunSummary, err error) {
	if err == nil || (sum.Status != "complete" && sum.Status != "running") {
		return
	}
	sum.Status = "failed"
	if errors.Is(err, pipeline.ErrStopped) {
		sum.Status = "stopped"
	}
	sum.Message = err.Error()
}

// storeLostError is a fleet worker's stop after it gave its database up
// (exit 3, resumable, through the runner's error): the message names the
// database, without its password, and says what to do.
type storeLostError struct {
	db   string // as db.Path(): no password
	lost *pipeline.StoreLostError
}

func (e *storeLostError) Error() string {
	return fmt.Sprintf("lost the database %s: %v.\nCheck that the PostgreSQL server is running and reachable from this host, then run the same command again: the run resumes where it stopped, every worker taking the items this one held once their leases end",
		e.db, e.lost)
}

func (e *storeLostError) Unwrap() error { return e.lost }

// monitorConfig is what the monitor needs to know of a run, read from
// the DB and the stages: per stage its name, how many items wait there
// now, and its limiter.
func monitorConfig(db pipeline.Database, b *jobStages, runID string, quiet bool) (monitor.RunConfig, error) {
	rc := monitor.RunConfig{DBPath: db.Path(), RunID: runID, Quiet: quiet, StageCost: b.cost}
	if isPostgres(db.Path()) {
		rc.DBPath = "" // no file beside it for the live status: status reads the database
	}
	counts, err := db.Counts()
	if err != nil {
		return rc, err
	}
	for _, s := range counts.Stages {
		rc.Stages = append(rc.Stages, s.Stage)
		rc.Queued = append(rc.Queued, int64(s.Queued))
		rc.Before = append(rc.Before, int64(s.Output+s.Dead))
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

// nextCommands are the commands worth running after a run, each with
// its --db.
func nextCommands(path string, sum pipeline.RunSummary) []string {
	p := shellQuote(path)
	next := []string{"sawtooth status --db " + p}
	if sum.Totals().Dead > 0 {
		next = append(next, "sawtooth dlq list --db "+p)
	}
	return append(next, "sawtooth report --db "+p+" --format html -o report.html")
}

// stageOrder is the DB's stage names in pipeline order.
func stageOrder(db pipeline.Database) []string {
	var out []string
	for _, s := range db.Stages() {
		out = append(out, s.Name)
	}
	return out
}
