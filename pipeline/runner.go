package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Defaults for StageConfig and Runner.
const (
	DefaultWorkers        = 8
	DefaultMaxAttempts    = 5
	DefaultMaxWait        = 2 * time.Minute
	DefaultBatchSize      = 1000
	DefaultGrace          = 10 * time.Second
	DefaultFetch          = 256
	DefaultMaxRateLimited = 200
	DefaultMaxOutage      = 5 * time.Minute
	// firstContactOutage bounds the wait when a stage has not reached
	// its endpoint once in this run: most likely a wrong URL or no
	// network, not a blip.
	firstContactOutage = 30 * time.Second
)

// ErrStopped is returned (wrapped) by Runner.Run when the run stopped before
// every item reached done or a dead letter: a signal, or a quota exhausted
// for the day. Nothing is lost; running again resumes.
var ErrStopped = errors.New("run stopped early; run again to resume")

// StageConfig is one stage and how the runner drives it.
type StageConfig struct {
	Stage Stage
	// Workers is the pool size; with a Limiter it is the most calls that
	// can ever be in flight (the limiter's ceiling). Default DefaultWorkers.
	Workers int
	// Limiter, when set, gates every call (the API stage). Nil: the pool
	// of Workers runs unthrottled.
	Limiter Limiter
	// MaxAttempts is the transient-error budget per item; then it is
	// dead-lettered. Rate-limited refusals are not attempts. Default 5.
	MaxAttempts int
	// NewBackOff returns the retry schedule for one item. Default:
	// exponential from 1s, x2, jitter ±50%, capped at 30s.
	NewBackOff func() backoff.BackOff
	// MaxWait is the longest retryDelay the stage waits for; a longer one,
	// or a per-day quota, parks the stage. Default DefaultMaxWait.
	MaxWait time.Duration
	// MaxRateLimited is how many 429s in a row, with no success between
	// them, park the stage as "quota exhausted". Default 200.
	MaxRateLimited int
	// MaxOutage is how long the stage's endpoint may stay unreachable
	// (ClassUnavailable) before the stage parks; items wait meanwhile
	// without spending attempts. Default DefaultMaxOutage; before the
	// stage's first success in a run, at most 30 s.
	MaxOutage time.Duration
}

func (sc *StageConfig) setDefaults() {
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
		sc.MaxRateLimited = DefaultMaxRateLimited
	}
	if sc.MaxOutage <= 0 {
		sc.MaxOutage = DefaultMaxOutage
	}
}

// Runner drains every stage's queue. Configure the exported fields, then
// call Run once.
type Runner struct {
	Store  Store
	Stages []StageConfig
	// RunID names the run in the RunLog (when Store implements it).
	RunID string
	// BatchSize caps the transitions of one group commit. Default 1000.
	BatchSize int
	// Grace is how long in-flight calls may finish after Run's ctx is
	// canceled before they are canceled too (their items stay queued).
	Grace time.Duration
	Log   *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
	// OnTick, if set, is called about once a second with the live figures.
	OnTick func(Progress)
	// SampleEvery is the series sampling period. Default 1s.
	SampleEvery time.Duration

	counters []*stageCounters
	commitCh chan pending
	fatalMu  sync.Mutex
	fatalErr error
	parkMu   sync.Mutex
	parkMsg  string
	abort    context.CancelFunc // cancels dispatch and work
}

// Progress is the live state of a run, per stage in pipeline order.
type Progress struct {
	Elapsed time.Duration
	Stages  []StageProgress
}

// StageProgress is one stage's live figures for this run.
type StageProgress struct {
	Name        string
	Done, Dead  int64
	Calls       int64
	RateLimited int64
	Transient   int64
	Usage       Usage
	Limit       int
	InFlight    int
	// Outcomes counts this run's calls by class (ClassOK for successes).
	Outcomes map[Class]int64
}

type stageCounters struct {
	done, dead, attempts, calls, r429, transient atomic.Int64
	prompt, candidate, total                     atomic.Int64
	inFlight                                     atomic.Int64
	limitMin, limitMax                           atomic.Int64
	rateLimitedRun                               atomic.Int64
	outageSince                                  atomic.Int64 // unix nanos of the first unreachable call since the last success; 0 none
	succeededOnce                                atomic.Bool
	pending                                      sync.WaitGroup
	notify                                       chan struct{}
	outcomes                                     []atomic.Int64 // by classIndex
	deadMu                                       sync.Mutex     // guards deadReasons, samePerm*
	deadReasons                                  map[string]int
	samePermKey                                  string
	samePermN                                    int
}

type pending struct {
	stage int
	t     Transition
}

func (r *Runner) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
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
	if r.BatchSize <= 0 {
		r.BatchSize = DefaultBatchSize
	}
	if r.Grace <= 0 {
		r.Grace = DefaultGrace
	}
	sum := RunSummary{ID: r.RunID, Started: r.now(), Status: "running", Stages: map[string]*StageStats{}}
	if rl, ok := r.Store.(RunLog); ok && r.RunID != "" {
		if err := rl.SaveRun(sum); err != nil {
			return sum, Fatal(fmt.Errorf("save run record: %w", err))
		}
	}

	// dispatchCtx: stop taking new work. workCtx: cancel in-flight calls.
	dispatchCtx, stopDispatch := context.WithCancel(ctx)
	defer stopDispatch()
	workCtx, cancelWork := context.WithCancel(context.Background())
	defer cancelWork()
	r.abort = func() { stopDispatch(); cancelWork() }
	go func() {
		select {
		case <-dispatchCtx.Done():
		case <-workCtx.Done():
			return
		}
		t := time.NewTimer(r.Grace)
		defer t.Stop()
		select {
		case <-t.C:
			cancelWork()
		case <-workCtx.Done():
		}
	}()

	for i := range r.Stages {
		r.Stages[i].setDefaults()
	}
	r.counters = make([]*stageCounters, len(r.Stages))
	for i := range r.Stages {
		r.counters[i] = &stageCounters{notify: make(chan struct{}, 1), deadReasons: map[string]int{}, outcomes: make([]atomic.Int64, len(Classes))}
		r.counters[i].limitMin.Store(-1)
	}
	r.commitCh = make(chan pending, 4*r.BatchSize)
	committerDone := make(chan struct{})
	go func() { defer close(committerDone); r.committer() }()

	samplerStop := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() { defer close(samplerDone); r.sampler(sum.Started, samplerStop) }()

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

	sum.Ended = r.now()
	for i, sc := range r.Stages {
		sum.Stages[sc.Stage.Name()] = r.stageStats(i)
	}
	var err error
	switch {
	case r.fatal() != nil:
		sum.Status, sum.Message = "failed", r.fatal().Error()
		err = r.fatal()
	case r.parked() != "":
		sum.Status, sum.Message = "stopped", r.parked()
		err = fmt.Errorf("%s: %w", r.parked(), ErrStopped)
	case ctx.Err() != nil:
		sum.Status, sum.Message = "stopped", "interrupted"
		err = fmt.Errorf("interrupted: %w", ErrStopped)
	default:
		sum.Status = "complete"
	}
	if rl, ok := r.Store.(RunLog); ok && r.RunID != "" {
		if serr := rl.SaveRun(sum); serr != nil && err == nil {
			err = Fatal(fmt.Errorf("save run record: %w", serr))
		}
	}
	return sum, err
}

func (r *Runner) fail(err error) {
	r.fatalMu.Lock()
	if r.fatalErr == nil {
		var fe *FatalError
		if !errors.As(err, &fe) {
			err = Fatal(err)
		}
		r.fatalErr = err
		r.log().Error("fatal error: stopping the run", "err", err)
	}
	r.fatalMu.Unlock()
	r.abort()
}

func (r *Runner) fatal() error {
	r.fatalMu.Lock()
	defer r.fatalMu.Unlock()
	return r.fatalErr
}

func (r *Runner) park(msg string) {
	r.parkMu.Lock()
	defer r.parkMu.Unlock()
	if r.parkMsg == "" {
		r.parkMsg = msg
		r.log().Warn("stage parked", "reason", msg)
	}
}

func (r *Runner) parked() string {
	r.parkMu.Lock()
	defer r.parkMu.Unlock()
	return r.parkMsg
}

// startStage launches stage i's dispatcher, workers and finisher. The
// stage is finished (done closed) when its dispatcher has run dry after
// upstream finished, every worker has returned and every transition it
// produced is committed.
func (r *Runner) startStage(i int, dispatchCtx, workCtx context.Context, upstream <-chan struct{}, done chan<- struct{}, all *sync.WaitGroup) {
	sc := &r.Stages[i]
	// A parked stage stops taking work but lets its in-flight calls finish.
	stageCtx, parkStage := context.WithCancel(dispatchCtx)
	work := make(chan Queued)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(work)
		r.dispatch(stageCtx, i, upstream, work)
	}()
	for w := 0; w < sc.Workers; w++ {
		wg.Add(1)
		all.Add(1)
		go func() {
			defer all.Done()
			defer wg.Done()
			for q := range work {
				r.process(stageCtx, workCtx, parkStage, i, q)
			}
		}()
	}
	go func() {
		wg.Wait()
		parkStage()
		r.counters[i].pending.Wait()
		close(done)
	}()
}

func (r *Runner) dispatch(ctx context.Context, i int, upstream <-chan struct{}, work chan<- Queued) {
	name := r.Stages[i].Stage.Name()
	c := r.counters[i]
	var cursor uint64
	upstreamDone := false
	for {
		if ctx.Err() != nil {
			return
		}
		batch, err := r.Store.Queued(name, cursor, DefaultFetch)
		if err != nil {
			r.fail(fmt.Errorf("read queue %s: %w", name, err))
			return
		}
		for _, q := range batch {
			select {
			case work <- q:
				cursor = q.Seq
			case <-ctx.Done():
				return
			}
		}
		if len(batch) > 0 {
			continue
		}
		if upstreamDone {
			return
		}
		select {
		case <-c.notify:
		case <-upstream:
			upstreamDone = true
		case <-ctx.Done():
			return
		}
	}
}

// process runs one item at stage i to a committed outcome, or gives it back
// (it stays queued) when the run stops, the stage parks or a fatal error
// occurs.
func (r *Runner) process(stageCtx, workCtx context.Context, parkStage context.CancelFunc, i int, q Queued) {
	sc := &r.Stages[i]
	c := r.counters[i]
	name := sc.Stage.Name()
	var (
		attempts    int
		first, last time.Time
		bo, bo429   backoff.BackOff // transient retries; waits not spending attempts (429s without a limiter, outages)
	)
	for {
		if stageCtx.Err() != nil {
			return // stopping: the item stays queued
		}
		var started time.Time
		if sc.Limiter != nil {
			var err error
			started, err = sc.Limiter.Acquire(stageCtx)
			if err != nil {
				return
			}
		}
		c.inFlight.Add(1)
		res, err := r.call(workCtx, sc.Stage, q.Item)
		c.inFlight.Add(-1)
		c.calls.Add(1)
		// Billing happens at the call: an unusable answer (blocked,
		// cut off, off-schema) is paid for too.
		c.prompt.Add(res.Usage.PromptTokens)
		c.candidate.Add(res.Usage.CandidateTokens)
		c.total.Add(res.Usage.TotalTokens)
		class := Classify(workCtx, err)
		c.outcomes[classIndex(class)].Add(1)
		if class == "" {
			c.rateLimitedRun.Store(0)
			c.outageSince.Store(0)
			c.succeededOnce.Store(true)
			if sc.Limiter != nil {
				// TPM quotas count input tokens.
				sc.Limiter.Succeeded(started, res.Usage.PromptTokens)
			}
			c.attempts.Add(int64(attempts + 1))
			r.send(i, Transition{Stage: name, ID: q.Item.ID, Seq: q.Seq, Outcome: Succeeded, Result: res})
			return
		}
		if class == ClassRateLimited {
			var rl *RateLimitedError
			errors.As(err, &rl)
			c.r429.Add(1)
			if ql, ok := sc.Limiter.(QuotaLimiter); ok {
				ql.RateLimitedQuota(started, rl.RetryAfter, rl.RequestsPerMinute, rl.TokensPerMinute)
			} else if sc.Limiter != nil {
				sc.Limiter.RateLimited(started, rl.RetryAfter)
			}
			run := c.rateLimitedRun.Add(1)
			switch {
			case rl.Daily:
				// A per-day quota resets at midnight Pacific whatever
				// retryDelay says.
				r.park(fmt.Sprintf("daily quota exhausted for %s; resume after %s (%v)", name, nextPacificMidnight(r.now()).Local().Format(time.RFC3339), err))
				parkStage()
				return
			case rl.RetryAfter > sc.MaxWait:
				r.park(fmt.Sprintf("quota exhausted for %s (the server asks to wait %s, more than --max-wait %s); resume after %s",
					name, rl.RetryAfter.Round(time.Second), sc.MaxWait, resumeTime(r.now(), rl.RetryAfter)))
				parkStage()
				return
			case run >= int64(sc.MaxRateLimited):
				r.park(fmt.Sprintf("quota exhausted for %s: %d refusals in a row with no success (last: %v); check the project's quota and usage, or lower --ceiling, then run again", name, run, err))
				parkStage()
				return
			}
			if sc.Limiter == nil {
				// Without a limiter to gate the next call, wait here: the
				// server's delay when it gave one, else a backoff step.
				if bo429 == nil {
					bo429 = newBackOff(sc)
				}
				if !sleepCtx(stageCtx, max(rl.RetryAfter, next(bo429))) {
					return
				}
			}
			continue // no attempt spent
		}
		if sc.Limiter != nil {
			sc.Limiter.Failed(started)
		}
		switch class {
		case ClassCanceled:
			return
		case ClassUnavailable:
			c.transient.Add(1)
			now := r.now()
			c.outageSince.CompareAndSwap(0, now.UnixNano())
			since := time.Unix(0, c.outageSince.Load())
			limit := sc.MaxOutage
			if !c.succeededOnce.Load() {
				limit = min(limit, firstContactOutage)
			}
			if now.Sub(since) >= limit {
				r.park(fmt.Sprintf("%s cannot reach its endpoint since %s (last: %v): check the network and --base-url, then run again to resume",
					name, since.Local().Format(time.TimeOnly), err))
				parkStage()
				return
			}
			if bo429 == nil {
				bo429 = newBackOff(sc)
			}
			if !sleepCtx(stageCtx, next(bo429)) {
				return
			}
			continue // not the item's fault: no attempt spent
		case ClassFatal:
			r.fail(fmt.Errorf("%s: %w", name, err))
			return
		}
		attempts++
		now := r.now()
		if first.IsZero() {
			first = now
		}
		last = now
		if class == ClassTransient {
			c.transient.Add(1)
			if attempts < sc.MaxAttempts {
				if bo == nil {
					bo = newBackOff(sc)
				}
				if !sleepCtx(stageCtx, next(bo)) {
					c.attempts.Add(int64(attempts))
					return
				}
				continue
			}
		}
		c.attempts.Add(int64(attempts))
		msg := err.Error()
		if class == ClassTransient {
			msg = fmt.Sprintf("gave up after %d attempts: %s", attempts, msg)
		}
		dl := DeadLetter{Class: class, Message: msg, Attempts: attempts, First: first, Last: last}
		r.send(i, Transition{Stage: name, ID: q.Item.ID, Seq: q.Seq, Outcome: DeadLettered, Dead: dl})
		if class == ClassPermanent && sc.Limiter != nil {
			r.checkSamePermanent(i, dl)
		}
		return
	}
}

// samePermanentLimit is how many permanent failures with one and the same
// cause, before any success, make an API stage's run fatal.
const samePermanentLimit = 25

// checkSamePermanent stops the run when an API stage's calls have all
// failed permanently for the same reason and none has succeeded: that is
// a request or account problem (a 400 on our own request, say), and
// going on would dead-letter the whole night's input one item at a time.
func (r *Runner) checkSamePermanent(i int, dl DeadLetter) {
	c := r.counters[i]
	if c.succeededOnce.Load() {
		return
	}
	key := ReasonKey(dl)
	c.deadMu.Lock()
	if key == c.samePermKey {
		c.samePermN++
	} else {
		c.samePermKey, c.samePermN = key, 1
	}
	n := c.samePermN
	c.deadMu.Unlock()
	if n == samePermanentLimit {
		name := r.Stages[i].Stage.Name()
		r.fail(fmt.Errorf("%s: the first %d calls all failed the same way and none succeeded (%s): that is the request or the account, not the items; fix it, then `sawtooth retry --stage %s` re-queues those %d",
			name, n, dl.Message, name, n))
	}
}

// call runs the stage, turning a panic into a permanent error for this item
// so one bad item cannot take the run down.
func (r *Runner) call(ctx context.Context, s Stage, it Item) (res Result, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = Permanentf("stage %s panicked on item %q: %v", s.Name(), it.ID, p)
		}
	}()
	return s.Process(ctx, it)
}

func newBackOff(sc *StageConfig) backoff.BackOff {
	if sc.NewBackOff != nil {
		return sc.NewBackOff()
	}
	b := backoff.NewExponentialBackOff()
	// From 1 s, doubling: the default 5 attempts span about 15 s
	// (7.5 to 22.5 s with jitter), so a short outage of the endpoint
	// costs time, not dead letters.
	b.InitialInterval = time.Second
	b.RandomizationFactor = 0.5
	b.Multiplier = 2
	b.MaxInterval = 30 * time.Second
	b.MaxElapsedTime = 0
	b.Reset()
	return b
}

// next is b's next delay; a schedule that has stopped (a custom one with
// MaxElapsedTime) keeps waiting its longest step rather than spinning.
func next(b backoff.BackOff) time.Duration {
	d := b.NextBackOff()
	if d == backoff.Stop {
		return 30 * time.Second
	}
	return d
}

// nextPacificMidnight is when Gemini's per-day quotas reset.
func nextPacificMidnight(now time.Time) time.Time {
	loc, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		loc = time.FixedZone("PST", -8*3600)
	}
	t := now.In(loc)
	return time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, loc)
}

func resumeTime(now time.Time, wait time.Duration) string {
	if wait <= 0 {
		return "the quota resets (midnight Pacific for a daily quota)"
	}
	return now.Add(wait).Local().Format(time.RFC3339)
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *Runner) send(i int, t Transition) {
	r.counters[i].pending.Add(1)
	r.commitCh <- pending{stage: i, t: t}
}

// committer is the single writer: it groups whatever transitions are
// waiting into one transaction, so throughput pays one fsync per batch,
// and counts an outcome only once it is durable.
func (r *Runner) committer() {
	batch := make([]Transition, 0, r.BatchSize)
	stages := make([]int, 0, r.BatchSize)
	for p := range r.commitCh {
		batch, stages = append(batch[:0], p.t), append(stages[:0], p.stage)
	fill:
		for len(batch) < r.BatchSize {
			select {
			case p, ok := <-r.commitCh:
				if !ok {
					break fill
				}
				batch, stages = append(batch, p.t), append(stages, p.stage)
			default:
				break fill
			}
		}
		// Results are committed even after a fatal error elsewhere: they
		// were paid for. A failing store fails every later batch too.
		err := r.Store.Commit(batch)
		if err != nil {
			r.fail(fmt.Errorf("commit %d results: %w", len(batch), err))
		}
		notified := map[int]bool{}
		for j, t := range batch {
			c := r.counters[stages[j]]
			if err == nil {
				r.countCommitted(c, t)
				if next := stages[j] + 1; next < len(r.counters) && !notified[next] && t.Outcome == Succeeded {
					notified[next] = true
					select {
					case r.counters[next].notify <- struct{}{}:
					default:
					}
				}
			}
			c.pending.Done()
		}
	}
}

func (r *Runner) countCommitted(c *stageCounters, t Transition) {
	switch t.Outcome {
	case Succeeded:
		c.done.Add(1)
	case DeadLettered:
		c.dead.Add(1)
		c.deadMu.Lock()
		c.deadReasons[ReasonKey(t.Dead)]++
		c.deadMu.Unlock()
	}
}

// ReasonKey groups dead letters by cause: their class and message with the
// item-specific parts (quoted ids, numbers) masked.
func ReasonKey(d DeadLetter) string {
	msg := d.Message
	// Stages prefix messages with the item they are about; the group is
	// about the cause.
	if strings.HasPrefix(msg, "item ") {
		if i := strings.Index(msg, ": "); i > 0 && i < 200 {
			msg = msg[i+2:]
		}
	}
	var b strings.Builder
	inQuote := false
	for _, r := range msg {
		switch {
		case r == '"':
			if !inQuote {
				b.WriteString(`"…"`)
			}
			inQuote = !inQuote
		case inQuote:
		case r >= '0' && r <= '9':
			if s := b.String(); len(s) == 0 || s[len(s)-1] != '#' {
				b.WriteByte('#')
			}
		default:
			b.WriteRune(r)
		}
	}
	out := b.String()
	if len(out) > 200 {
		out = out[:200] + "…"
	}
	return string(d.Class) + ": " + out
}

// classIndex places a class in stageCounters.outcomes, in Classes order.
func classIndex(c Class) int {
	if c == "" {
		c = ClassOK
	}
	for i, k := range Classes {
		if k == c {
			return i
		}
	}
	return classIndex(ClassTransient) // an unknown class is treated as transient
}

func (r *Runner) progress(start time.Time) Progress {
	p := Progress{Elapsed: r.now().Sub(start)}
	for i, sc := range r.Stages {
		c := r.counters[i]
		sp := StageProgress{
			Name: sc.Stage.Name(), Done: c.done.Load(), Dead: c.dead.Load(),
			Calls: c.calls.Load(), RateLimited: c.r429.Load(), Transient: c.transient.Load(),
			Usage:    Usage{PromptTokens: c.prompt.Load(), CandidateTokens: c.candidate.Load(), TotalTokens: c.total.Load()},
			InFlight: int(c.inFlight.Load()),
			Outcomes: make(map[Class]int64, len(Classes)),
		}
		for j, k := range Classes {
			sp.Outcomes[k] = c.outcomes[j].Load()
		}
		if sc.Limiter != nil {
			sp.Limit = sc.Limiter.Limit()
		}
		p.Stages = append(p.Stages, sp)
	}
	return p
}

// sampler records one Sample per stage per period and feeds OnTick.
func (r *Runner) sampler(start time.Time, stop <-chan struct{}) {
	every := r.SampleEvery
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	rl, _ := r.Store.(RunLog)
	prev := r.progress(start)
	var buf []Sample
	flush := func() {
		if rl != nil && r.RunID != "" && len(buf) > 0 {
			if err := rl.AppendSamples(r.RunID, buf); err != nil {
				r.log().Warn("could not record samples", "err", err)
			}
		}
		buf = buf[:0]
	}
	tick := func() {
		p := r.progress(start)
		for i, s := range p.Stages {
			sc := r.Stages[i]
			if sc.Limiter != nil {
				r.observeLimit(i, s.Limit)
			}
			buf = append(buf, Sample{
				At: r.now(), Stage: s.Name, Limit: s.Limit, InFlight: s.InFlight,
				Successes: s.Done - prev.Stages[i].Done, RateLimited: s.RateLimited - prev.Stages[i].RateLimited,
				ServerError: s.Transient - prev.Stages[i].Transient, Tokens: s.Usage.TotalTokens - prev.Stages[i].Usage.TotalTokens,
			})
		}
		prev = p
		if r.OnTick != nil {
			r.OnTick(p)
		}
		if len(buf) >= 10*len(p.Stages) {
			flush()
		}
	}
	for {
		select {
		case <-t.C:
			tick()
		case <-stop:
			tick()
			flush()
			return
		}
	}
}

func (r *Runner) observeLimit(i, limit int) {
	c := r.counters[i]
	if m := c.limitMin.Load(); m < 0 || int64(limit) < m {
		c.limitMin.Store(int64(limit))
	}
	if int64(limit) > c.limitMax.Load() {
		c.limitMax.Store(int64(limit))
	}
}

func (r *Runner) stageStats(i int) *StageStats {
	c := r.counters[i]
	st := &StageStats{
		Done: c.done.Load(), Dead: c.dead.Load(), Attempts: c.attempts.Load(), Calls: c.calls.Load(),
		RateLimited: c.r429.Load(), Transient: c.transient.Load(),
		Usage: Usage{PromptTokens: c.prompt.Load(), CandidateTokens: c.candidate.Load(), TotalTokens: c.total.Load()},
	}
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
	return st
}
