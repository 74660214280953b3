package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/sawtooth-dev/sawtooth/batch"
	"github.com/sawtooth-dev/sawtooth/internal/monitor"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/urfave/cli/v2"
)

const catBatch = "Batch API"

// batchOptions choose how the classify stage is run: online calls, Gemini
// batch jobs at half the price, or batch jobs first and online calls for
// what they did not answer by the deadline.
type batchOptions struct {
	Mode        string
	Size        int
	Deadline    time.Duration
	Poll        time.Duration
	InlineBytes int
	Settle      time.Duration
}

func batchFlags(o *batchOptions) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Category: catBatch, Name: "mode", Value: string(batch.ModeOnline), Usage: "how classify is run: online (one call per item), batch (Gemini batch jobs, half the price, results within the deadline) or auto (batch jobs, then online calls for what they did not answer by --batch-deadline)", Destination: &o.Mode},
		&cli.IntFlag{Category: catBatch, Name: "batch-size", Value: batch.DefaultSize, Usage: "most requests per batch job (jobs over 19 MB go as an uploaded file)", Destination: &o.Size},
		&cli.DurationFlag{Category: catBatch, Name: "batch-deadline", Value: batch.DefaultDeadline, Usage: "a job still pending or running this long after create is cancelled and its items go back to the queue (the API expires jobs at 48h); in auto mode the whole batch phase's: no job is created past it and what is left goes online", Destination: &o.Deadline},
		&cli.DurationFlag{Category: catBatch, Name: "batch-poll", Value: batch.DefaultPoll, Usage: "first interval between polls of a job; it doubles up to 10m", Destination: &o.Poll},
		&cli.DurationFlag{Category: catBatch, Name: "batch-create-settle", Value: batch.DefaultCreateSettle, Hidden: true, Usage: "after a create whose answer was lost (or a run killed while it was in flight), how long the job may take to show in the API's list: it is looked for until then before being created again", Destination: &o.Settle},
		&cli.IntFlag{Category: catBatch, Name: "batch-inline-bytes", Value: batch.DefaultInlineBytes, Hidden: true, Usage: "largest job sent inlined; bigger ones are uploaded as a JSONL file", Destination: &o.InlineBytes},
	}
}

// batchOptions are how the job's batched stage runs (batch or auto, and
// its batch jobs' size, deadline and poll), the defaults for what the job
// leaves out; online when no stage asks for batch jobs.
func (b *jobStages) batchOptions() batchOptions {
	bo := batchOptions{Mode: string(batch.ModeOnline), Size: batch.DefaultSize, Deadline: batch.DefaultDeadline, Poll: batch.DefaultPoll,
		InlineBytes: batch.DefaultInlineBytes, Settle: batch.DefaultCreateSettle}
	if b.batched == nil {
		return bo
	}
	l := b.llm[b.batched.Name()]
	bo.Mode = orStr(l.Mode, bo.Mode)
	if l.Batch != nil {
		bo.Size = orInt(l.Batch.Size, bo.Size)
		bo.Deadline = orDuration(l.Batch.Deadline, bo.Deadline)
		bo.Poll = orDuration(l.Batch.Poll, bo.Poll)
	}
	return bo
}

// asksForBatch reports whether the flags bad, refused beside a job, ask
// for batch jobs: --mode other than online, or a --batch-* flag.
func asksForBatch(c *cli.Context, bad []string) bool {
	for _, f := range bad {
		if strings.HasPrefix(f, "--batch-") || f == "--mode" && !strings.EqualFold(strings.TrimSpace(c.String("mode")), string(batch.ModeOnline)) {
			return true
		}
	}
	return false
}

// check validates the options before anything is opened.
func (o batchOptions) check() (batch.Mode, error) {
	if o.Mode == "" {
		return batch.ModeOnline, nil // retry, rerun
	}
	m, err := batch.ParseMode(o.Mode)
	if err != nil {
		return "", usagef("--mode: %v", err)
	}
	if m != batch.ModeOnline && (o.Size <= 0 || o.Deadline <= 0 || o.Poll <= 0) {
		return "", usagef("--batch-size, --batch-deadline and --batch-poll must be positive")
	}
	if m != batch.ModeOnline && o.Settle < 0 {
		return "", usagef("--batch-create-settle %s: use a positive duration (default %s)", o.Settle, batch.DefaultCreateSettle)
	}
	return m, nil
}

// drainBatch runs the batch phase of a batch or auto run: the stages
// before the batched one (classify, from flags) online, then its queue
// through batch jobs. It returns the stages the online runner drains next:
// every stage in auto mode (the batched stage takes what the jobs did not
// answer), every stage but the batched one in batch mode (what the jobs did not answer
// stays queued for the next run). Online mode returns b.stages untouched.
func drainBatch(ctx context.Context, pdb pipeline.Database, b *jobStages, o *pipelineOptions, bo batchOptions, obs monitor.Options, stderr io.Writer) ([]pipeline.StageConfig, *batchPhase, error) {
	mode, err := bo.check()
	if err != nil || mode == batch.ModeOnline {
		return b.stages, nil, err
	}
	db, err := batchStore(pdb)
	if err != nil {
		return nil, nil, err
	}
	ci := -1
	for i, sc := range b.stages {
		if sc.Stage.Name() == b.batched.Name() {
			ci = i
		}
	}
	phase := &batchPhase{mode: mode, stage: b.batched.Name()}
	if ci > 0 {
		// No run record of its own: its figures are the command's run's
		// (addTo), and its commits count towards that run's record.
		r := &pipeline.Runner{Store: db, Stages: b.stages[:ci], Grace: o.Grace, Lease: o.Lease, Heartbeat: o.Heartbeat}
		sum, err := r.Run(ctx)
		if err != nil {
			return nil, nil, err
		}
		phase.before = &sum
	}
	api, err := batch.NewClient(ctx, o.APIKey, o.BaseURL)
	if err != nil {
		return nil, nil, usage(err)
	}
	// `batch cancel` must find the jobs where they are created.
	if err := db.SetBatchEndpoint(api.ClientConfig().HTTPOptions.BaseURL); err != nil {
		return nil, nil, err
	}
	// The batched stage's bar (or progress records) and the live status follow
	// the jobs; one log line per job event (reserved, created, state,
	// closed) goes above the bar.
	prog, err := batchMonitor(db, b, o, obs, stderr)
	if err != nil {
		return nil, nil, err
	}
	start := time.Now()
	tick := func(s batch.Summary) {
		prog.Tick(pipeline.Progress{Elapsed: time.Since(start), Stages: []pipeline.StageProgress{{
			Name: b.batched.Name(), Done: int64(s.Answered), Dead: int64(s.Dead), Usage: s.Usage,
		}}})
		publishBatchJobs(db)
	}
	publishBatchJobs(db)
	if snapshotted(db.Path()) {
		defer os.Remove(batchSnapshotPath(db.Path()))
	}
	log := prog.Log()
	if o.Quiet {
		log = slog.New(slog.DiscardHandler)
	}
	d := batch.New(db, b.batched, api, batch.Config{Mode: mode, Size: bo.Size, Deadline: bo.Deadline, Poll: bo.Poll,
		InlineBytes: bo.InlineBytes, CreateSettle: bo.Settle, NoCache: o.NoCache, Log: log, Progress: tick, Lease: o.Lease,
		Budget: pipeline.Budget{RunUSD: o.Budget, TotalUSD: o.BudgetTotal}})
	sum, err := d.Run(ctx)
	tick(sum)
	prog.Close()
	phase.batch = sum
	fmt.Fprintf(stderr, "batch: %d jobs created, %d re-attached; %d succeeded, %d failed, %d past the deadline; %d answered (%d without a request: the answer cache, or the same question asked by another item), %d dead, %d back in the queue, %d late results ignored; cost $%.4f (online: $%.4f, saved $%.4f)\n",
		sum.Created, sum.Reattached, sum.Succeeded, sum.Failed, sum.Deadline, sum.Answered, sum.Cached, sum.Dead, sum.Returned, sum.Ignored,
		sum.CostUSD, sum.OnlineCostUSD, sum.OnlineCostUSD-sum.CostUSD)
	var be *batch.BudgetError
	if errors.As(err, &be) {
		// The stages after the batched one still run; the stop is the run's
		// error once they did (see leftover).
		phase.stop, err = budgetStop(be, o), nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, phase, fmt.Errorf("batch jobs stay at the API and are picked up by the next run: %w", pipeline.ErrStopped)
		}
		return nil, phase, err
	}
	if mode == batch.ModeAuto && (phase.stop == nil || o.Budget <= 0 || o.Budget > phase.cost()) {
		// What the batch did not answer goes online, within what is left
		// of the budget (the runner's own reservations, at the online
		// price).
		if phase.stop != nil {
			fmt.Fprintf(stderr, "batch: the next job did not fit the budget\n")
			phase.stop = nil
		}
		if o.Budget > 0 {
			fmt.Fprintf(stderr, "batch: %s of --budget %s spent by batch jobs; online calls may spend the %s left\n",
				usd(phase.cost()), usd(o.Budget), usd(phase.onlineBudget(o).RunUSD))
		}
		return b.stages, phase, nil
	}
	rest := append([]pipeline.StageConfig{}, b.stages[:ci]...)
	return append(rest, b.stages[ci+1:]...), phase, nil
}

// batchPhase is what a batch or auto run did before the online runner:
// the stages before the batched one, and the batch jobs.
type batchPhase struct {
	mode   batch.Mode
	stage  string
	before *pipeline.RunSummary
	batch  batch.Summary
	// stop is the budget's stop of the batch jobs, when it ends the run.
	stop error
}

// onlineBudget is the budget of the online runner after the phase: the
// run's cap less what the batch jobs spent (the lifetime cap reads the
// ledger, which holds it already).
func (p *batchPhase) onlineBudget(o *pipelineOptions) pipeline.Budget {
	b := pipeline.Budget{RunUSD: o.Budget, TotalUSD: o.BudgetTotal}
	if p != nil && b.RunUSD > 0 {
		// Never 0, which is no cap: a spent budget admits no call.
		b.RunUSD = max(b.RunUSD-p.cost(), 1e-9)
	}
	return b
}

// leftover is the error of a batch-mode run that left items in the
// queue (their jobs failed, expired or passed the deadline every round):
// the run stopped early and a later one resumes.
func (p *batchPhase) leftover(db pipeline.Database) error {
	if p != nil && p.stop != nil {
		return p.stop
	}
	if p == nil || p.mode != batch.ModeBatch {
		return nil
	}
	counts, err := db.Counts()
	if err != nil {
		return err
	}
	for _, s := range counts.Stages {
		if s.Stage == p.stage && s.Queued > 0 {
			return fmt.Errorf("%s still queued at %s: their batch jobs did not answer them (see `sawtooth batch list --db %s`); run again to send them in new jobs, or with --mode auto to finish them online: %w",
				plural(s.Queued, "item"), p.stage, shellQuote(db.Path()), pipeline.ErrStopped)
		}
	}
	return nil
}

// heldByOpenJobs stops a run that drove no batch jobs (an online run, a
// job file's) while open jobs of an earlier batch or auto run hold items:
// the run never saw those items, so it is not complete, and only a batch
// or auto run polls the jobs and commits their answers.
func heldByOpenJobs(pdb pipeline.Database) error {
	db, ok := pdb.(interface {
		InBatchCount() (map[string]int, error)
	})
	if !ok {
		return nil // a store without batch jobs
	}
	held, err := db.InBatchCount()
	if err != nil {
		return err
	}
	n := 0
	for _, c := range held {
		n += c
	}
	if n == 0 {
		return nil
	}
	path := shellQuote(pdb.Path())
	return fmt.Errorf("%s still held by open batch jobs of an earlier run (see `sawtooth batch list --db %s`): run `sawtooth run --db %s --mode batch` (or auto) to collect their answers; `sawtooth batch cancel --db %s JOB` stops a job still running and puts its items back once the API confirms, and collects a job that already succeeded: %w",
		plural(n, "item"), path, path, path, pipeline.ErrStopped)
}

// cost is the batch answers' cost at the batch price (zero for a nil
// phase: an online run).
func (p *batchPhase) cost() float64 {
	if p == nil {
		return 0
	}
	return p.batch.CostUSD
}

// batchMonitor watches the batch phase as a run of the batched stage
// alone, its tokens priced at the batch rate.
func batchMonitor(db pipeline.Database, b *jobStages, o *pipelineOptions, obs monitor.Options, stderr io.Writer) (*monitor.Progress, error) {
	counts, err := db.Counts()
	if err != nil {
		return nil, err
	}
	rc := monitor.RunConfig{DBPath: db.Path(), RunID: store.NewRunID(time.Now()), Quiet: o.Quiet, Stages: []string{b.batched.Name()},
		Cost: func(u pipeline.Usage) float64 { return b.prices[b.batched.Name()].Cost(u) * stages.BatchPriceFactor }}
	for _, s := range counts.Stages {
		if s.Stage == b.batched.Name() {
			rc.Queued, rc.Before = []int64{int64(s.Queued)}, []int64{int64(s.Output + s.Dead)}
		}
	}
	rc.Limiters = []pipeline.Limiter{nil}
	prog, err := monitor.Start(stderr, monitor.Options{LogFormat: obs.LogFormat, LogLevel: obs.LogLevel}, rc)
	if err != nil {
		return nil, usage(err)
	}
	return prog, nil
}

// addTo folds the phase into the run's summary: the earlier stages'
// figures, and the items the batch jobs answered or dead-lettered as the
// classify stage's (their tokens are priced apart, at the batch rate: see
// cost).
func (p *batchPhase) addTo(sum *pipeline.RunSummary) {
	if p == nil {
		return
	}
	if sum.Stages == nil {
		sum.Stages = map[string]*pipeline.StageStats{}
	}
	stage := func(name string) *pipeline.StageStats {
		if sum.Stages[name] == nil {
			sum.Stages[name] = &pipeline.StageStats{}
		}
		return sum.Stages[name]
	}
	if p.before != nil {
		for name, s := range p.before.Stages {
			if s == nil {
				continue
			}
			t := stage(name)
			t.Done += s.Done
			t.Dead += s.Dead
			t.Attempts += s.Attempts
			t.Calls += s.Calls
			t.RateLimited += s.RateLimited
			t.Transient += s.Transient
			t.Usage = t.Usage.Add(s.Usage)
			t.CostUSD += s.CostUSD
		}
	}
	t := stage(p.stage)
	t.Done += int64(p.batch.Answered)
	t.Dead += int64(p.batch.Dead)
	t.Cached += int64(p.batch.Cached)
	t.SavedUSD += p.batch.CacheSavedUSD
	t.Usage = t.Usage.Add(p.batch.Usage)
}

// simBatchOptions configure the simulator's Batch API.
type simBatchOptions struct {
	Pending, Running, Expire time.Duration
	Fates                    string
	Shuffle                  bool
	RowErrors                float64
	MaxJobs, MaxTokens       int
	CreateDelay              time.Duration
}

func simBatchFlags(o *simBatchOptions, d simBatchOptions) []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Category: catSim, Name: "batch-pending", Value: d.Pending, Usage: "simulator: time a batch job spends PENDING", Destination: &o.Pending},
		&cli.DurationFlag{Category: catSim, Name: "batch-running", Value: d.Running, Usage: "simulator: time a batch job spends RUNNING before it ends", Destination: &o.Running},
		&cli.DurationFlag{Category: catSim, Name: "batch-expire", Value: d.Expire, Usage: "simulator: a batch job not ended this long after create is EXPIRED (0 = 48h)", Destination: &o.Expire},
		&cli.StringFlag{Category: catSim, Name: "batch-fates", Value: d.Fates, Usage: "simulator: how the first batch jobs end, in creation order, e.g. succeed,stuck,expire,fail,rows_fail (later ones succeed)", Destination: &o.Fates},
		&cli.BoolFlag{Category: catSim, Name: "batch-shuffle", Value: d.Shuffle, Usage: "simulator: return batch results out of order", Destination: &o.Shuffle},
		&cli.Float64Flag{Category: catSim, Name: "batch-row-errors", Value: d.RowErrors, Usage: "simulator: rate of batch requests answered with an error status", Destination: &o.RowErrors},
		&cli.IntFlag{Category: catSim, Name: "batch-max-jobs", Value: d.MaxJobs, Usage: "simulator: 429 on create past this many live batch jobs (0 = unlimited)", Destination: &o.MaxJobs},
		&cli.IntFlag{Category: catSim, Name: "batch-max-tokens", Value: d.MaxTokens, Usage: "simulator: 429 on create past this many enqueued tokens (0 = unlimited)", Destination: &o.MaxTokens},
		&cli.DurationFlag{Category: catSim, Name: "batch-create-delay", Value: d.CreateDelay, Usage: "simulator: a created batch job shows in the list only this long after create (a create finished late)", Destination: &o.CreateDelay},
	}
}

func (o simBatchOptions) config() (geminisim.BatchConfig, error) {
	fates, err := geminisim.ParseFates(o.Fates)
	if err != nil {
		return geminisim.BatchConfig{}, usagef("--batch-fates: %v", err)
	}
	return geminisim.BatchConfig{
		Pending: o.Pending, Running: o.Running, Expire: o.Expire, Fates: fates, Shuffle: o.Shuffle,
		RowErrors: o.RowErrors, MaxJobs: o.MaxJobs, MaxEnqueuedTokens: o.MaxTokens, CreateDelay: o.CreateDelay,
	}, nil
}

// printDemoBatch is the simulator's view of the batch jobs, when there
// were any.
func printDemoBatch(w io.Writer, sim *geminisim.Server) {
	bs := sim.BatchStats()
	if bs.Created == 0 && bs.Refused == 0 {
		return
	}
	twice := 0
	for _, n := range bs.ByDisplayName {
		if n > 1 {
			twice++
		}
	}
	fmt.Fprintf(w, "simulator: %d batch jobs created (%d created twice), %d creates refused (429), %d cancelled; %d batch requests answered (%d error rows), %d tokens billed at the batch price\n",
		bs.Created, twice, bs.Refused, bs.Cancels, bs.Rows, bs.RowErrors, bs.BilledTokens)
}
