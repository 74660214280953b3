package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Defaults for StageConfig and Runner.
const (
	// DefaultWorkers is StageConfig.Workers' default.
	DefaultWorkers = 8
	// DefaultMaxAttempts is StageConfig.MaxAttempts' default.
	DefaultMaxAttempts = 5
	// DefaultMaxWait is StageConfig.MaxWait's default.
	DefaultMaxWait = 2 * time.Minute
	// DefaultBatchSize is Runner.BatchSize's default.
	DefaultBatchSize = 1000
	// DefaultGrace is Runner.Grace's default.
	DefaultGrace = 10 * time.Second
	// DefaultFetch is how many queue entries a dispatcher reads at once.
	DefaultFetch = 256
	// DefaultMaxRateLimited is StageConfig.MaxRateLimited's default.
	DefaultMaxRateLimited = 200
	// DefaultMaxOutage is StageConfig.MaxOutage's default.
	DefaultMaxOutage = 5 * time.Minute
	// DefaultMaxRefused is StageConfig.MaxRefused's default.
	DefaultMaxRefused = 5 * time.Minute
	// DefaultMaxBacklogAge is Runner.MaxBacklogAge's default: about one
	// commit interval of answers is what a kill may re-pay.
	DefaultMaxBacklogAge = 100 * time.Millisecond
	// DefaultCommitAttempts is Runner.CommitAttempts' default.
	DefaultCommitAttempts = 3
	// DefaultStoreRetry is Runner.StoreRetry's default: a connection
	// reset is over within a few seconds; past that the worker stops
	// claiming and is run again (the answers it holds are still
	// committed if the database is back before their leases end).
	DefaultStoreRetry = 5 * time.Second
)

// ErrStopped is returned (wrapped) by Runner.Run when the run stopped before
// every item reached done or a dead letter: a signal, or a quota exhausted
// for the day. Nothing is lost; running again resumes.
var ErrStopped = errors.New("run stopped early; run again to resume")

// StageConfig is one stage and how the runner drives it.
type StageConfig struct {
	// Stage does the work.
	Stage Stage
	// Workers is the pool size; with a Limiter it is the most calls that
	// can ever be in flight (the limiter's ceiling), and the pool starts
	// at a few dozen and grows with the limiter's limit up to it (see
	// pool.go). Default: the Limiter's MostInFlight when it is a
	// PoolSizer, else DefaultWorkers.
	Workers int
	// Limiter, when set, gates every call (the API stage). Nil: the pool
	// of Workers runs unthrottled.
	Limiter Limiter
	// MaxAttempts is the transient-error budget per item; then it is
	// dead-lettered. Rate-limited refusals are not attempts. Default 5.
	MaxAttempts int
	// NewBackOff returns one retry schedule; each item gets one per kind
	// of wait (transient retries, bare 429s, outages, overloads), and
	// the stage one for its overload hold. Default: exponential from 1s,
	// x2, jitter ±50%, capped at 30s; for overloads (503s) from 100ms,
	// x1.5, capped at 5s (see newOverloadBackOff).
	NewBackOff func() backoff.BackOff
	// MaxWait is the longest retryDelay the stage waits for; a longer one,
	// or a per-day quota, parks the stage. Default DefaultMaxWait.
	MaxWait time.Duration
	// MaxRateLimited is how many 429s in a row, with no success between
	// them, park the stage as "quota exhausted". Default 200, or the pool
	// plus 100 when that is more: every call of a pool in flight can meet
	// one window spent, and that says nothing of the next. Not applied
	// when MaxRefused is negative.
	MaxRateLimited int
	// MaxRefused is how long 429s may go on with no success between them
	// (and at least minRefusedToPark of them) before the stage parks as
	// "quota exhausted": a per-minute quota admits calls within a minute
	// or two at the limiter's lowest rate, so refusals for longer are a
	// quota for the day, or not a quota at all, and retrying them would
	// go on all night. Halfway, a warning is logged. Zero means
	// DefaultMaxRefused; negative means refusals never park the stage,
	// neither for how long nor for how many in a row (MaxRateLimited):
	// the run waits for the quota, warned of at half DefaultMaxRefused.
	MaxRefused time.Duration
	// Price is what the stage's calls cost (the API stage); the zero
	// Price means they are free. It prices StageStats.CostUSD and
	// SavedUSD and the calls Budget counts.
	Price Price
	// MaxOutage is how long the stage's endpoint may stay unreachable
	// (ClassUnavailable), or answer only that it is overloaded
	// (ClassOverloaded), before the stage parks; items wait meanwhile
	// without spending attempts. Default DefaultMaxOutage; before the
	// endpoint has answered once in the run, at most 30 s.
	MaxOutage time.Duration
}

func (sc *StageConfig) setDefaults() {
	if ps, ok := sc.Limiter.(PoolSizer); ok && sc.Workers <= 0 {
		sc.Workers = ps.MostInFlight()
	}
	if sc.Workers <= 0 {
		sc.Workers = DefaultWorkers
	}
	if sc.MaxAttempts <= 0 {
		sc.MaxAttempts = DefaultMaxAttempts
	}
	if sc.MaxWait <= 0 {
		sc.MaxWait = DefaultMaxWait
	}
	if sc.MaxRateLimited <= 0 {
		sc.MaxRateLimited = max(DefaultMaxRateLimited, sc.Workers+DefaultMaxRateLimited/2)
	}
	if sc.MaxOutage <= 0 {
		sc.MaxOutage = DefaultMaxOutage
	}
	if sc.MaxRefused == 0 {
		sc.MaxRefused = DefaultMaxRefused
	}
}

// Runner drains every stage's queue. Configure the exported fields, then
// call Run once.
type Runner struct {
	// Store holds the queues and takes the transitions. Required.
	Store Store
	// Stages is the pipeline, in order. Required.
	Stages []StageConfig
	// RunID names the run in the RunLog (when Store implements it).
	RunID string
	// Started is when the run began, if before Run (work done under the
	// same RunID first, such as a batch phase): the run record's start,
	// so that its duration is the whole run's. Zero: when Run is called.
	Started time.Time
	// BatchSize caps the transitions of one group commit. Default 1000.
	BatchSize int
	// MaxBacklog caps the paid results waiting for their commit: no call
	// starts while this many wait (results that billed nothing are not
	// counted: a kill re-does them for free). Default BatchSize.
	MaxBacklog int
	// MaxBacklogAge caps how long a paid result waits for its commit
	// before new calls stop starting: with a slow disk the workers wait for the
	// commit instead of piling up answers a kill would throw away. What a
	// kill re-pays is then the calls in flight plus about this much of
	// answers. Default DefaultMaxBacklogAge.
	MaxBacklogAge time.Duration
	// CommitAttempts is how many times a group commit is tried (with
	// backoff between) before the run stops as failed. Default 3.
	CommitAttempts int
	// Grace is how long in-flight calls may finish after Run's ctx is
	// canceled before they are canceled too (their items stay queued).
	Grace time.Duration
	// Log receives warnings and errors; default discards them.
	Log *slog.Logger
	// Clock is the one clock of every timestamp and wait; default
	// SystemClock.
	Clock Clock
	// OnTick, if set, is called every SampleEvery with the live figures.
	OnTick func(Progress)
	// SampleEvery is the series sampling period. Default 1s.
	SampleEvery time.Duration
	// NoCache turns the answer cache off: every item of a Cacheable
	// stage is called, and identical items in flight each call too.
	NoCache bool
	// Budget caps the spend of the priced stages; the zero Budget none.
	Budget Budget

	// Lease, MaxClaims and Poll apply when Store implements Claimer (a
	// fleet of processes sharing the queues): entries are claimed with a
	// lease of Lease (default DefaultLease), renewed every Lease/4 while
	// they are worked on; an entry claimed more than MaxClaims times
	// (default DefaultMaxClaims) is dead-lettered; an idle dispatcher
	// looks for work every Poll (default DefaultPoll). A store without
	// Claimer is walked with Queued: one process owns it.
	Lease     time.Duration
	MaxClaims int
	Poll      time.Duration
	// StoreRetry applies when Store implements Claimer: how long claims
	// (or commits) may fail in a row, retried every Poll (every second),
	// before the worker gives the store up and stops, resumable (see
	// StoreLostError). Default DefaultStoreRetry.
	StoreRetry time.Duration
	// Heartbeat applies when Store implements Claimer and Sessions: the
	// worker's session is beaten every Heartbeat/4, and once it has not
	// been for Heartbeat (a dead worker), its claims are claimable by
	// others whatever their lease (see Sessions). Default
	// DefaultHeartbeat.
	Heartbeat time.Duration

	counters    []*stageCounters
	commitCh    chan pending
	backlog     backlog
	fatalMu     sync.Mutex
	fatalErr    error
	parkMu      sync.Mutex
	parkWhy     error
	halted      bool               // parkWhy is a halt's
	abort       context.CancelFunc // cancels dispatch and work
	purse       purse
	budgetStage atomic.Int32       // the stage a budget stop parked, -1 none
	books       []*leaseBook       // per stage, when Store implements Claimer
	stopClaims  context.CancelFunc // stops dispatch, not the calls in flight
	storeMu     sync.Mutex
	storeLost   *StoreLostError // the store given up on (a fleet worker), nil if not
	storeGate   storeGate       // holds new calls while the store fails
}

// Progress is the live state of a run, per stage in pipeline order.
type Progress struct {
	// Elapsed is the time since the run started.
	Elapsed time.Duration
	// Stages holds one entry per stage, in pipeline order.
	Stages []StageProgress
}

// StageProgress is one stage's live figures for this run.
type StageProgress struct {
	// Name is the stage's name.
	Name string
	// Done and Dead count committed outcomes.
	Done, Dead int64
	// Calls counts every call; RateLimited, Transient, Unavailable and
	// BadAnswers the calls that failed so (see StageStats).
	Calls       int64
	RateLimited int64
	Transient   int64
	Unavailable int64
	BadAnswers  int64
	// Usage is the tokens billed so far, by Paid calls.
	Usage Usage
	Paid  int64
	// CostUSD is what the calls were billed, at the stage's Price.
	CostUSD float64
	// Cached is the committed answers reused without a call; SavedUSD
	// what they would have cost.
	Cached   int64
	SavedUSD float64
	// Tiers is the calls by service tier, as StageStats.Tiers.
	Tiers map[string]*TierStats
	// Limit is the limiter's concurrency limit (0 without one).
	Limit int
	// InFlight is the calls in flight.
	InFlight int
	// Outcomes counts this run's calls by class (ClassOK for successes).
	Outcomes map[Class]int64
}

// stageCounters is one stage's shared state in a run.
type stageCounters struct {
	done, dead, attempts, calls         atomic.Int64
	callTime                            atomic.Int64 // nanoseconds spent in calls, for their mean (claimSize)
	rateLimited, transient, unavailable atomic.Int64
	badAnswers                          atomic.Int64
	prompt, candidate, total            atomic.Int64
	inFlight                            atomic.Int64
	// away: workers holding an item outside the limiter, waiting out a
	// retry's backoff, an overload hold or an identical item's call (see
	// pool.wanted); workers: the stage's pool as it grows (see pool.go).
	away, workers atomic.Int64
	// grow adds the workers the pool wants (pool.grow), called by a
	// worker whose slot was granted.
	grow               func()
	leasesLost         atomic.Int64 // leases this process lost (calls canceled or commits fenced off)
	limitMin, limitMax atomic.Int64
	inFlightMax        atomic.Int64 // the most calls in flight at once
	health             endpointHealth
	overload           *overloadHold  // holds the calls while the server answers overloaded
	pending            sync.WaitGroup // results sent, not yet committed or dropped
	notify             chan struct{}  // the upstream stage committed new work
	outcomes           []atomic.Int64 // calls by classIndex
	deadMu             sync.Mutex     // guards deadReasons, samePerm*
	deadReasons        map[string]int
	samePermKey        string
	samePermN          int
	spent, saved       atomic.Int64 // nanodollars: billed, and saved by the cache
	cached             atomic.Int64 // committed answers reused without a call
	paid               atomic.Int64 // calls billed
	flights            flights
	sizes              sizer
	tiers              tierCounters // calls and money by service tier, cache savings
	cachedTokens       atomic.Int64
}

func (c *stageCounters) addUsage(u Usage) {
	c.prompt.Add(u.PromptTokens)
	c.candidate.Add(u.CandidateTokens)
	c.total.Add(u.TotalTokens)
	c.cachedTokens.Add(u.CachedTokens)
}

func (c *stageCounters) usage() Usage {
	return Usage{PromptTokens: c.prompt.Load(), CandidateTokens: c.candidate.Load(), TotalTokens: c.total.Load(), CachedTokens: c.cachedTokens.Load()}
}

func (r *Runner) clock() Clock {
	if r.Clock != nil {
		return r.Clock
	}
	return SystemClock{}
}

func (r *Runner) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.New(slog.DiscardHandler)
}

// Run drains the queues until every item is done or dead-lettered (nil), the
// run is stopped (ErrStopped, wrapped with the reason), or a fatal error
// occurs (a *FatalError). Canceling ctx stops taking new work; in-flight
// calls get Grace to finish and their results are committed.
func (r *Runner) Run(ctx context.Context) (RunSummary, error) {
	if len(r.Stages) == 0 {
		return RunSummary{}, errors.New("runner: no stages")
	}
	r.setDefaults()
	if err := r.startPurse(); err != nil {
		return RunSummary{}, Fatal(err)
	}
	clock := r.clock()
	began := clock.Now()
	sum, err := r.openRun(began)
	if err != nil {
		return sum, err
	}

	// dispatchCtx: stop taking new work. workCtx: cancel in-flight calls.
	dispatchCtx, stopDispatch := context.WithCancel(ctx)
	defer stopDispatch()
	workCtx, cancelWork := context.WithCancel(context.Background())
	defer cancelWork()
	r.abort = func() { stopDispatch(); cancelWork() }
	r.stopClaims = stopDispatch
	// Only the caller's cancel starts the grace period: a store given up
	// stops dispatch alone, and its calls in flight end with their leases.
	go func() {
		select {
		case <-ctx.Done():
		case <-workCtx.Done():
			return
		}
		if sleep(workCtx, clock, r.Grace) {
			cancelWork()
		}
	}()

	r.initCounters()
	endSession := r.beginSession()
	defer endSession()
	r.drainStages(dispatchCtx, workCtx, began)

	sum.Ended = clock.Now()
	for i, sc := range r.Stages {
		sum.Stages[sc.Stage.Name()] = r.stageStats(i)
	}
	sum.Status, sum.Message, err = r.outcome(ctx)
	if rl, ok := r.Store.(RunLog); ok && r.RunID != "" {
		if serr := rl.SaveRun(sum); serr != nil && err == nil {
			err = Fatal(fmt.Errorf("save run record: %w", serr))
		}
	}
	return sum, err
}

// openRun starts the run's summary at began (or at Started, when the
// command began earlier) and records it as running.
func (r *Runner) openRun(began time.Time) (RunSummary, error) {
	sum := RunSummary{ID: r.RunID, Started: began, Status: "running", Stages: map[string]*StageStats{}}
	if !r.Started.IsZero() && r.Started.Before(began) {
		sum.Started = r.Started
	}
	if rl, ok := r.Store.(RunLog); ok && r.RunID != "" {
		if err := rl.SaveRun(sum); err != nil {
			return sum, Fatal(fmt.Errorf("save run record: %w", err))
		}
	}
	return sum, nil
}

// initCounters readies each stage's books, and a fleet worker's lease
// books.
func (r *Runner) initCounters() {
	r.counters = make([]*stageCounters, len(r.Stages))
	for i := range r.Stages {
		sc := &r.Stages[i]
		r.counters[i] = &stageCounters{notify: make(chan struct{}, 1), deadReasons: map[string]int{}, outcomes: make([]atomic.Int64, len(Classes)),
			overload: newOverloadHold(func() backoff.BackOff { return newOverloadBackOff(sc) }, sc.Limiter)}
		r.counters[i].limitMin.Store(-1)
	}
	r.books = make([]*leaseBook, len(r.Stages))
	if cl, ok := r.Store.(Claimer); ok {
		for i := range r.Stages {
			r.books[i] = newLeaseBook(r, i, cl)
		}
	}
}

// drainStages runs every stage, each fed by the one before it, with the
// committer and the sampler, and returns once all of them are done and
// every answer sent is committed.
func (r *Runner) drainStages(dispatchCtx, workCtx context.Context, began time.Time) {
	r.commitCh = make(chan pending, r.MaxBacklog)
	r.backlog.init()
	committerDone := make(chan struct{})
	go func() { defer close(committerDone); r.committer() }()

	samplerStop := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() { defer close(samplerDone); r.sampler(began, samplerStop) }()

	var workers sync.WaitGroup
	upstream := make(chan struct{})
	close(upstream)
	var finished []chan struct{}
	for i := range r.Stages {
		done := make(chan struct{})
		finished = append(finished, done)
		r.startStage(i, dispatchCtx, workCtx, upstream, done, &workers)
		upstream = done
	}
	workers.Wait()
	close(r.commitCh)
	<-committerDone
	for _, f := range finished {
		<-f
	}
	close(samplerStop)
	<-samplerDone
}

func (r *Runner) setDefaults() {
	if r.BatchSize <= 0 {
		r.BatchSize = DefaultBatchSize
	}
	if r.MaxBacklog <= 0 {
		r.MaxBacklog = r.BatchSize
	}
	if r.MaxBacklogAge <= 0 {
		r.MaxBacklogAge = DefaultMaxBacklogAge
	}
	if r.CommitAttempts <= 0 {
		r.CommitAttempts = DefaultCommitAttempts
	}
	if r.Grace <= 0 {
		r.Grace = DefaultGrace
	}
	if r.Lease <= 0 {
		r.Lease = DefaultLease
	}
	if r.MaxClaims <= 0 {
		r.MaxClaims = DefaultMaxClaims
	}
	if r.Poll <= 0 {
		r.Poll = DefaultPoll
	}
	if r.StoreRetry <= 0 {
		r.StoreRetry = DefaultStoreRetry
	}
	if r.Heartbeat <= 0 {
		r.Heartbeat = DefaultHeartbeat
	}
	for i := range r.Stages {
		r.Stages[i].setDefaults()
	}
}

// startStage launches stage i's dispatcher, workers and finisher. The
// stage is finished (done closed) when its dispatcher has run dry after
// upstream finished, every worker has returned and every transition it
// produced is committed.
func (r *Runner) startStage(i int, dispatchCtx, workCtx context.Context, upstream <-chan struct{}, done chan<- struct{}, all *sync.WaitGroup) {
	sc := &r.Stages[i]
	// A parked stage stops taking work but lets its in-flight calls finish.
	stageCtx, parkStage := context.WithCancel(dispatchCtx)
	work := make(chan Claim)
	book := r.books[i]
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(work)
		if book != nil {
			r.dispatchClaims(stageCtx, i, upstream, work, book)
			return
		}
		r.dispatch(stageCtx, i, upstream, work)
	}()
	stopLeases := make(chan struct{})
	var leaseWatch sync.WaitGroup
	if book != nil {
		leaseWatch.Add(2)
		go func() { defer leaseWatch.Done(); book.heartbeat(stopLeases) }()
		go func() { defer leaseWatch.Done(); book.expiry(stopLeases) }()
	}
	pool := newPool(sc, r.counters[i])
	var worker func()
	// The pool grows from a worker, which holds wg and all, so that an
	// Add never meets a zero count.
	spawn := func(k int) {
		for range k {
			wg.Add(1)
			all.Add(1)
			go worker()
		}
	}
	r.counters[i].grow = func() { spawn(pool.grow()) }
	worker = func() {
		defer all.Done()
		defer wg.Done()
		for q := range work {
			spawn(pool.grow())
			if book == nil {
				r.process(stageCtx, workCtx, parkStage, i, q)
				continue
			}
			// The call is canceled if the lease is lost.
			if ctx, ok := book.start(q.Seq, q.Attempt, workCtx); ok {
				r.process(stageCtx, ctx, parkStage, i, q)
			}
			book.finished(q.Seq, q.Attempt)
		}
	}
	for range pool.started() {
		wg.Add(1)
		all.Add(1)
		go worker()
	}
	go func() {
		wg.Wait()
		parkStage()
		r.counters[i].pending.Wait()
		close(stopLeases)
		leaseWatch.Wait()
		if book != nil {
			book.releaseAll()
		}
		close(done)
	}()
}

func (r *Runner) stageStats(i int) *StageStats {
	c := r.counters[i]
	st := &StageStats{
		Done: c.done.Load(), Dead: c.dead.Load(), Attempts: c.attempts.Load(), Calls: c.calls.Load(),
		RateLimited: c.rateLimited.Load(), Transient: c.transient.Load(), Unavailable: c.unavailable.Load(), BadAnswers: c.badAnswers.Load(),
		Usage: c.usage(), LeasesLost: c.leasesLost.Load(), Paid: c.paid.Load(), Cached: c.cached.Load(), SavedUSD: toUSD(c.saved.Load()),
	}
	if !r.Stages[i].Price.IsZero() {
		st.CostUSD = toUSD(c.spent.Load())
	}
	st.Tiers, st.CacheSavedUSD = c.tiers.stats()
	c.deadMu.Lock()
	if len(c.deadReasons) > 0 {
		st.DeadReasons = map[string]int{}
		for k, v := range c.deadReasons {
			st.DeadReasons[k] = v
		}
	}
	c.deadMu.Unlock()
	if l := r.Stages[i].Limiter; l != nil {
		r.observeLimit(i, l.Limit())
		st.LimitMin, st.LimitMax, st.LimitEnd = int(c.limitMin.Load()), int(c.limitMax.Load()), l.Limit()
	}
	st.InFlightMax = int(c.inFlightMax.Load())
	return st
}
