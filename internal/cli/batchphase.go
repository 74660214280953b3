// This file runs the batch phase of a run: each LLM stage whose mode is
// batch or auto through batch jobs of its own, in the job's order, the
// stages between them online.

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/batch"
	"github.com/sawtooth-dev/sawtooth/internal/monitor"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
)

// drainBatch runs the batch phase of a batch or auto run, stage by stage:
// for each batched stage, the stages before it online (an auto stage's
// among them, for what its jobs did not answer; never a batch stage's),
// then its queue through batch jobs. An item reaches a stage's jobs only
// once the stages before it committed it, and a run killed anywhere
// resumes the same way: each stage's driver picks up its own open jobs
// when its turn comes. It returns the stages the online runner drains
// next: every stage but those in batch mode (what their jobs did not
// answer stays queued for the next run). Online mode returns b.stages
// untouched.
func drainBatch(ctx context.Context, pdb pipeline.Database, b *jobStages, o *pipelineOptions, bo batchOptions, obs monitor.Options, stderr io.Writer) ([]pipeline.StageConfig, *batchPhase, error) {
	mode, err := bo.check()
	if err != nil || mode == batch.ModeOnline || len(b.batched) == 0 {
		return b.stages, nil, err
	}
	db, err := batchStore(pdb)
	if err != nil {
		return nil, nil, err
	}
	api, err := batch.NewClient(ctx, o.APIKey, o.BaseURL)
	if err != nil {
		return nil, nil, usage(err)
	}
	// `batch cancel` must find the jobs where they are created.
	if err := db.SetBatchEndpoint(api.ClientConfig().HTTPOptions.BaseURL); err != nil {
		return nil, nil, err
	}
	publishBatchJobs(db)
	if snapshotted(db.Path()) {
		defer os.Remove(batchSnapshotPath(db.Path()))
	}
	// Each stage's options are its own: a job's stage takes what its
	// batch block leaves out from the defaults, never from another
	// stage's block; a run from flags (one stage) from the flags.
	if !b.fromFlags {
		bo = defaultBatchOptions()
	}
	phase := &batchPhase{mode: mode, offline: map[string]bool{}}
	for _, s := range b.batched {
		if s.options(bo).Mode == string(batch.ModeBatch) {
			phase.offline[s.stage.Name()] = true
		}
	}
	for _, s := range b.batched {
		if phase.stop != nil {
			// The budget is spent: no later stage's jobs, nor its
			// online calls.
			phase.offline[s.stage.Name()] = true
			continue
		}
		if pre := phase.online(b.stages[:b.indexOf(s.stage.Name())]); len(pre) > 0 {
			// No run record of its own: its figures are the command's
			// run's (addTo), and its commits count towards that run's
			// record.
			r := &pipeline.Runner{Store: db, Stages: pre, Grace: o.Grace, Lease: o.Lease, Heartbeat: o.Heartbeat, NoCache: o.NoCache, Budget: phase.onlineBudget(o)}
			sum, err := r.Run(ctx)
			phase.addBefore(sum)
			if err != nil {
				return nil, phase, err
			}
		}
		if err := phase.drive(ctx, db, api, b, s, s.options(bo), o, obs, stderr); err != nil {
			return nil, phase, err
		}
	}
	return phase.online(b.stages), phase, nil
}

// indexOf is the index of the stage named name in b.stages.
func (b *jobStages) indexOf(name string) int {
	for i, sc := range b.stages {
		if sc.Stage.Name() == name {
			return i
		}
	}
	return len(b.stages)
}

// drive runs stage s's queue through batch jobs in mode so.Mode.
func (p *batchPhase) drive(ctx context.Context, db batchDB, api *genai.Client, b *jobStages, s batchedStage, so batchOptions, o *pipelineOptions, obs monitor.Options, stderr io.Writer) error {
	mode, err := so.check()
	if err != nil {
		return err
	}
	name := s.stage.Name()
	// The stage's bar (or progress records) and the live status follow
	// the jobs; one log line per job event (reserved, created, state,
	// closed) goes above the bar.
	prog, err := batchMonitor(db, b, name, o, obs, stderr)
	if err != nil {
		return err
	}
	start := time.Now()
	tick := func(sum batch.Summary) {
		prog.Tick(pipeline.Progress{Elapsed: time.Since(start), Stages: []pipeline.StageProgress{{
			Name: name, Done: int64(sum.Answered), Dead: int64(sum.Dead), Usage: sum.Usage,
		}}})
		publishBatchJobs(db)
	}
	log := prog.Log()
	if o.Quiet {
		log = slog.New(slog.DiscardHandler)
	}
	d := batch.New(db, s.stage, api, batch.Config{Mode: mode, Size: so.Size, Deadline: so.Deadline, Poll: so.Poll,
		InlineBytes: so.InlineBytes, CreateSettle: so.Settle, MaxSends: so.MaxSends, NoCache: o.NoCache, Log: log, Progress: tick, Lease: o.Lease,
		Budget: p.onlineBudget(o), Price: b.prices[name]})
	sum, err := d.Run(ctx)
	tick(sum)
	prog.Close()
	p.stages = append(p.stages, phaseStage{name: name, mode: mode, sum: sum})
	prefix := "batch"
	if len(b.batched) > 1 {
		prefix = "batch " + name
	}
	fmt.Fprintf(stderr, "%s: %d jobs created, %d re-attached; %d succeeded, %d failed, %d past the deadline; %d answered (%d without a request: the answer cache, or the same question asked by another item), %d dead, %d back in the queue, %d late results ignored; cost $%.4f (online: $%.4f, saved $%.4f)\n",
		prefix, sum.Created, sum.Reattached, sum.Succeeded, sum.Failed, sum.Deadline, sum.Answered, sum.Cached, sum.Dead, sum.Returned, sum.Ignored,
		sum.CostUSD, sum.OnlineCostUSD, sum.OnlineCostUSD-sum.CostUSD)
	var be *batch.BudgetError
	if errors.As(err, &be) {
		// The stages after the batched one still run; the stop is the run's
		// error once they did (see leftover).
		p.stop, err = budgetStop(be, o), nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("batch jobs stay at the API and are picked up by the next run: %w", pipeline.ErrStopped)
		}
		return err
	}
	if mode != batch.ModeAuto {
		return nil
	}
	if p.stop != nil && o.Budget > 0 && o.Budget <= p.spent() {
		p.offline[name] = true // nothing is left for its online calls
		return nil
	}
	// What the batch did not answer goes online, within what is left of
	// the budget (the runner's own reservations, at the online price).
	if p.stop != nil {
		fmt.Fprintf(stderr, "%s: the next job did not fit the budget\n", prefix)
		p.stop = nil
	}
	if o.Budget > 0 {
		fmt.Fprintf(stderr, "%s: %s of --budget %s spent by batch jobs; online calls may spend the %s left\n",
			prefix, usd(p.cost()), usd(o.Budget), usd(p.onlineBudget(o).RunUSD))
	}
	return nil
}

// batchPhase is what a batch or auto run did before the online runner:
// the stages before each batched one, and each one's batch jobs.
type batchPhase struct {
	// mode is the first batched stage's: not online.
	mode   batch.Mode
	before *pipeline.RunSummary
	stages []phaseStage
	// offline are the stages the online runner leaves alone: those in
	// batch mode (what their jobs did not answer stays queued), and those
	// the budget stopped.
	offline map[string]bool
	// stop is the budget's stop of the batch jobs, when it ends the run.
	stop error
}

// phaseStage is one stage's batch jobs in the phase.
type phaseStage struct {
	name string
	mode batch.Mode
	sum  batch.Summary
}

// online is stages less those the online runner leaves alone.
func (p *batchPhase) online(stages []pipeline.StageConfig) []pipeline.StageConfig {
	var out []pipeline.StageConfig
	for _, sc := range stages {
		if !p.offline[sc.Stage.Name()] {
			out = append(out, sc)
		}
	}
	return out
}

// addBefore folds the figures of a run of the stages before a batched
// one into the phase's.
func (p *batchPhase) addBefore(sum pipeline.RunSummary) {
	if p.before == nil {
		p.before = &pipeline.RunSummary{Stages: map[string]*pipeline.StageStats{}}
	}
	addStats(p.before, sum.Stages)
}

// addStats adds the figures of stats to sum's stages.
func addStats(sum *pipeline.RunSummary, stats map[string]*pipeline.StageStats) {
	for name, s := range stats {
		if s != nil {
			summaryStage(sum, name).Add(*s)
		}
	}
}

func summaryStage(sum *pipeline.RunSummary, name string) *pipeline.StageStats {
	if sum.Stages == nil {
		sum.Stages = map[string]*pipeline.StageStats{}
	}
	if sum.Stages[name] == nil {
		sum.Stages[name] = &pipeline.StageStats{}
	}
	return sum.Stages[name]
}

// onlineBudget is the budget of a runner or driver after what the phase
// spent so far: the run's cap less what the batch jobs and the online
// calls before them spent (the lifetime cap reads the ledger, which
// holds it already).
func (p *batchPhase) onlineBudget(o *pipelineOptions) pipeline.Budget {
	b := pipeline.Budget{RunUSD: o.Budget, TotalUSD: o.BudgetTotal}
	if spent := p.spent(); b.RunUSD > 0 && spent > 0 {
		// Never 0, which is no cap: a spent budget admits no call.
		b.RunUSD = max(b.RunUSD-spent, 1e-9)
	}
	return b
}

// spent is what the phase paid: its batch jobs and the online calls of
// the stages it ran before them.
func (p *batchPhase) spent() float64 {
	if p == nil {
		return 0
	}
	c := p.cost()
	if p.before != nil {
		for _, s := range p.before.Stages {
			c += s.CostUSD
		}
	}
	return c
}

// leftover is the error of a run that left items queued at a stage in
// batch mode (their jobs failed, expired or passed the deadline every
// round): the run stopped early and a later one resumes.
func (p *batchPhase) leftover(db pipeline.Database) error {
	if p != nil && p.stop != nil {
		return p.stop
	}
	if p == nil {
		return nil
	}
	counts, err := db.Counts()
	if err != nil {
		return err
	}
	for _, ps := range p.stages {
		if ps.mode != batch.ModeBatch {
			continue
		}
		for _, s := range counts.Stages {
			if s.Stage == ps.name && s.Queued > 0 {
				return fmt.Errorf("%s still queued at %s: their batch jobs did not answer them (see `sawtooth batch list --db %s`); run again to send them in new jobs, or with mode auto to finish them online: %w",
					plural(s.Queued, "item"), ps.name, shellQuote(db.Path()), pipeline.ErrStopped)
			}
		}
	}
	return nil
}

// cost is the batch answers' cost at the batch price (zero for a nil
// phase: an online run).
func (p *batchPhase) cost() float64 {
	if p == nil {
		return 0
	}
	c := 0.0
	for _, s := range p.stages {
		c += s.sum.CostUSD
	}
	return c
}

// batchMonitor watches the batch jobs of stage as a run of that stage
// alone, its tokens priced at the batch rate.
func batchMonitor(db pipeline.Database, b *jobStages, stage string, o *pipelineOptions, obs monitor.Options, stderr io.Writer) (*monitor.Progress, error) {
	counts, err := db.Counts()
	if err != nil {
		return nil, err
	}
	rc := monitor.RunConfig{DBPath: db.Path(), RunID: store.NewRunID(time.Now()), Quiet: o.Quiet, Stages: []string{stage},
		Cost: func(u pipeline.Usage) float64 { return b.prices[stage].Cost(u) * stages.BatchPriceFactor }}
	for _, s := range counts.Stages {
		if s.Stage == stage {
			rc.Queued, rc.Before = []int64{int64(s.Queued)}, []int64{int64(s.Output + s.Dead)}
		}
	}
	rc.Limiters = []pipeline.Limiter{nil}
	prog, err := monitor.Start(stderr, monitor.Options{LogFormat: obs.LogFormat, LogLevel: obs.LogLevel, Words: obs.Words}, rc)
	if err != nil {
		return nil, usage(err)
	}
	return prog, nil
}

// addTo folds the phase into the run's summary: the earlier stages'
// figures, and the items each stage's batch jobs answered or
// dead-lettered with what they cost at the batch rate (the runner priced
// its own calls). The runs before the batch jobs came first: sum's
// figures are added to theirs (StageStats.Add keeps the later LimitEnd).
func (p *batchPhase) addTo(sum *pipeline.RunSummary) {
	if p == nil {
		return
	}
	if p.before != nil {
		all := &pipeline.RunSummary{}
		addStats(all, p.before.Stages)
		addStats(all, sum.Stages)
		sum.Stages = all.Stages
	}
	for _, ps := range p.stages {
		t := summaryStage(sum, ps.name)
		t.Done += int64(ps.sum.Answered)
		t.Dead += int64(ps.sum.Dead)
		t.Cached += int64(ps.sum.Cached)
		t.SavedUSD += ps.sum.CacheSavedUSD
		t.Usage = t.Usage.Add(ps.sum.Usage)
		t.CostUSD += ps.sum.CostUSD
	}
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
