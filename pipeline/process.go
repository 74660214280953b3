package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v4"
)

// process runs one item at stage i to a committed outcome, or gives it back
// (it stays queued) when the run stops, the stage parks or a fatal error
// occurs. Each attempt is the same few steps: wait for the store and the
// backlog (ready), take a slot (the overload hold, the budget, the
// limiter), make the call and keep the books (call), then either commit
// the answer (succeed) or let decide say what the failure leads to and
// carry it out (failed, act).
func (r *Runner) process(stageCtx, workCtx context.Context, parkStage context.CancelFunc, i int, q Claim) {
	it := &itemRun{
		r: r, i: i, sc: &r.Stages[i], c: r.counters[i], clock: r.clock(), q: q.Queued, attempt: q.Attempt,
		stageCtx: stageCtx, workCtx: workCtx, parkStage: parkStage,
		size: -1, schedules: map[Class]backoff.BackOff{},
	}
	it.name = it.sc.Stage.Name()
	defer it.settle()
	if it.skip() || !it.takeKey() {
		return
	}
	for tries := 0; ; tries++ {
		if !it.ready(tries) {
			return // stopping, or the lease is lost: the item stays queued
		}
		s, ok, again := it.take()
		if again {
			continue // the hold closed while waiting for a slot: wait at it
		}
		if !ok {
			return // out of budget, or stopping: the item stays queued
		}
		o := it.call(s)
		if o.class == "" {
			it.succeed(s, o)
			return
		}
		if !it.act(decide(it.failed(s, o), it.sc, o.at), o) {
			return
		}
	}
}

// itemRun is one item's passage through one stage in this run: the books
// process keeps between its steps. Only the worker running the item
// touches it.
type itemRun struct {
	r                 *Runner
	i                 int
	sc                *StageConfig
	c                 *stageCounters
	clock             Clock
	name              string
	q                 Queued
	attempt           int64 // the claim's fencing token (a Store with Claimer)
	stageCtx, workCtx context.Context
	parkStage         context.CancelFunc

	attempts    int
	first, last time.Time
	paid        Usage // every call's usage for this item, carried by its transition
	spent       int64 // nanodollars billed for this item's calls
	size        int64 // the call's size for a WeightedLimiter; -1 until computed
	// One schedule per kind of wait, so a refusal does not stretch the
	// backoff of the next transient retry, nor an outage that of the next
	// refusal.
	schedules map[Class]backoff.BackOff

	key      string  // the answer cache key; "" when the stage caches nothing
	own      *flight // the flight the item owns for key, nil when none
	answer   Result  // the answer, for the items waiting on own
	answered bool
	// finished: a transition carrying what was paid was sent.
	finished bool
}

// slot is what one attempt holds while its call runs.
type slot struct {
	passed   time.Time       // when it passed the overload hold
	probe    bool            // it is the hold's probe
	open     context.Context // canceled when the hold next closes
	booked   bool            // it reserved money from the budget...
	reserved int64           // ...this many nanodollars
	estIn    int64           // the estimated input tokens, for calibration
	started  time.Time       // the limiter's start, for its feedback
}

// outcome is one call's result and what the stage's books made of it.
type outcome struct {
	res   Result
	err   error
	class Class
	at    time.Time
	// The overload hold's verdict on the call (see failure).
	overloadHeld    bool
	overloadedSince time.Time
}

// settle runs when the item leaves process, however it leaves: the flight
// it owns lands (the items waiting on it take the answer or try on their
// own), an item given back keeps what its calls were billed on the books,
// and the stage counts its attempts.
func (it *itemRun) settle() {
	if it.own != nil {
		it.c.flights.land(it.key, it.own, it.answer, it.answered)
		if it.own.fleet && !it.answered {
			it.r.landFleetFlight(it.i, it.key)
		}
	}
	if !it.finished && it.paid != (Usage{}) {
		it.r.sendBilled(it.i, Claim{Queued: it.q, Attempt: it.attempt}, it.paid, it.spent)
	}
	it.c.attempts.Add(int64(it.attempts))
}

// skip commits the item without a call when the stage says it needs none.
func (it *itemRun) skip() bool {
	sk, ok := it.sc.Stage.(Skipper)
	if !ok {
		return false
	}
	res, skip := sk.Skip(it.workCtx, it.q.Item)
	if skip {
		it.r.send(it.i, Transition{Stage: it.name, ID: it.q.Item.ID, Seq: it.q.Seq, Outcome: Succeeded, Result: res}, it.attempt)
	}
	return skip
}

// takeKey finds the item's answer in the cache, or in flight for an
// identical item, and commits it; otherwise the item owns its key until
// it leaves. It reports whether the item must be called for.
func (it *itemRun) takeKey() bool {
	it.key = it.r.cacheKey(it.i, it.q.Item)
	if it.key == "" {
		return true
	}
	res, hit, f := it.r.reuse(it.stageCtx, it.i, it.key)
	switch {
	case hit:
		it.r.send(it.i, Transition{Stage: it.name, ID: it.q.Item.ID, Seq: it.q.Seq, Outcome: Succeeded,
			Result: Result{Output: res.Output}, CacheKey: it.key, Cached: true, SavedUSD: it.sc.Price.Cost(res.Usage)}, it.attempt)
		return false
	case f == nil:
		return false // stopping: the item stays queued
	}
	it.own = f
	return true
}

// ready waits until an attempt may start: the store answers (a fleet
// worker's answer could not be committed otherwise) and the backlog of
// uncommitted answers has room. It reports false when the item must be
// given back.
func (it *itemRun) ready(tries int) bool {
	if !it.r.waitStore(it.stageCtx, it.workCtx) {
		return false
	}
	if it.stageCtx.Err() != nil || !it.r.backlog.admit(it.stageCtx, it.clock, it.r.MaxBacklog, it.r.MaxBacklogAge) {
		return false
	}
	if tries > 0 && it.own != nil && it.own.fleet {
		// Retries can outlast the flight's lease: renew it.
		it.r.renewFleetFlight(it.i, it.key)
	}
	return true
}

// take passes the overload hold, reserves the call's money and acquires
// the limiter. ok is false when the item must be given back; again when
// the hold closed while the call waited for its slot, which sends it back
// to wait at the hold rather than into the overload.
func (it *itemRun) take() (s slot, ok, again bool) {
	c := it.c
	// Waiting out an overload holds no limiter slot and books no money.
	c.away.Add(1)
	var passed bool
	s.passed, s.probe, s.open, passed = c.overload.pass(it.stageCtx, it.clock)
	c.away.Add(-1)
	if !passed {
		return s, false, false
	}
	s.booked, s.reserved, s.estIn, ok = it.r.book(it.stageCtx, it.i, it.q.Item, it.parkStage)
	if !ok {
		c.overload.answered(s.passed, s.probe, time.Time{}, ClassCanceled, it.clock.Now())
		return s, false, false
	}
	if it.sc.Limiter == nil {
		return s, true, false
	}
	acquireCtx, release := whileOpen(it.stageCtx, s.open)
	var err error
	if wl, ok := it.sc.Limiter.(WeightedLimiter); ok {
		if it.size < 0 {
			it.size = callSize(it.sc.Stage, it.q.Item)
		}
		s.started, err = wl.AcquireWeighted(acquireCtx, it.size)
	} else {
		s.started, err = it.sc.Limiter.Acquire(acquireCtx)
	}
	release()
	if err == nil {
		if c.grow != nil {
			c.grow() // the call is about to start: the pool may want more workers
		}
		return s, true, false
	}
	c.overload.answered(s.passed, s.probe, time.Time{}, ClassCanceled, it.clock.Now())
	if s.booked {
		it.r.purse.settle(s.reserved, 0)
	}
	return s, false, it.stageCtx.Err() == nil
}

// call makes the stage's call in slot s and keeps the books: billing
// happens at the call, since an unusable answer (blocked, cut off,
// off-schema) is paid for too, and so is a repair call.
func (it *itemRun) call(s slot) outcome {
	c, sc, clock := it.c, it.sc, it.clock
	c.overload.started(s.probe, clock.Now())
	callStart := clock.Now()
	raiseTo(&c.inFlightMax, c.inFlight.Add(1))
	if sc.Limiter != nil {
		// At each start, not only each second's sample: a slow start's
		// peak can come and go between two samples.
		it.r.observeLimit(it.i, sc.Limiter.Limit())
	}
	res, err := it.r.call(it.workCtx, sc.Stage, it.q.Item)
	took := clock.Now().Sub(callStart)
	c.callTime.Add(int64(took))
	c.inFlight.Add(-1)
	c.addUsage(res.Usage)
	calls, billedCalls := countCalls(res)
	c.calls.Add(calls)
	c.paid.Add(billedCalls)
	it.paid = it.paid.Add(res.Usage)
	var billed int64
	for k, u := range sc.Price.calls(res) {
		n := sc.Price.nanos(u)
		billed += n
		calls, timed := billedCalls, took
		if len(res.PerCall) > 0 {
			// Each call under the tier that served it; the item's time
			// once, with its first.
			calls = 0
			if u != (Usage{}) {
				calls = 1
			}
			if k > 0 {
				timed = -1
			}
		}
		c.tiers.billed(sc.Price, u, calls, n, timed)
	}
	it.spent += billed
	c.spent.Add(billed)
	c.sizes.observe(s.estIn, res.Usage)
	if s.booked {
		it.r.purse.settle(s.reserved, billed)
	} else {
		it.r.purse.bill(billed)
	}
	o := outcome{res: res, err: err, class: ClassOf(it.workCtx, err), at: clock.Now()}
	c.outcomes[classIndex(o.class)].Add(1)
	o.overloadHeld, o.overloadedSince = c.overload.answered(s.passed, s.probe, callStart, o.class, o.at)
	return o
}

// succeed commits the answer, and hands it to the items waiting on the
// flight the item owns.
func (it *itemRun) succeed(s slot, o outcome) {
	it.c.health.succeeded()
	if it.sc.Limiter != nil {
		// TPM quotas count input tokens.
		it.sc.Limiter.Succeeded(s.started, o.res.Usage.PromptTokens)
	}
	it.attempts++
	it.finished = true
	t := Transition{Stage: it.name, ID: it.q.Item.ID, Seq: it.q.Seq, Outcome: Succeeded, Result: o.res, Usage: it.paid, CostUSD: toUSD(it.spent)}
	if it.own == nil {
		it.r.send(it.i, t, it.attempt)
		return
	}
	t.CacheKey = it.key
	it.answer, it.answered = o.res, true
	// Items arriving until the store holds the answer find it in flights.
	// The commit of t ends the fleet flight too (AnswerFlights).
	own, key, c := it.own, it.key, it.c
	it.r.sendThen(it.i, t, it.attempt, func() { c.flights.forget(key, own) })
}

// failed counts a failed call, tells the limiter what it says about the
// quota, and gathers what decide needs.
func (it *itemRun) failed(s slot, o outcome) failure {
	c, class, err := it.c, o.class, o.err
	var rl *RateLimitedError
	switch class {
	case ClassRateLimited:
		c.rateLimited.Add(1)
		if !errors.As(err, &rl) {
			rl = &RateLimitedError{Err: err}
		}
	case ClassTransient, ClassOverloaded:
		if isAnswerFault(err) {
			c.badAnswers.Add(1)
		} else {
			c.transient.Add(1) // a 503 is a 5xx
		}
	case ClassUnavailable:
		c.unavailable.Add(1)
	case ClassShed:
		var se *ShedError
		if errors.As(err, &se) {
			c.tiers.shed(se.Tier)
		}
	}
	it.tellLimiter(s.started, rl, class == ClassTransient && errors.Is(err, context.DeadlineExceeded))
	if spendsAttempt(class) {
		it.attempts++
		if it.first.IsZero() {
			it.first = o.at
		}
		it.last = o.at
	}
	f := failure{class: class, err: err, attempts: it.attempts}
	f.refusedInARow, f.refusedSince, f.outageSince, f.contacted = c.health.failed(class, o.at)
	if class == ClassRateLimited && c.health.warnRefused(o.at, refusedWarnAfter(it.sc.MaxRefused)) {
		it.warnRefused(f, o)
	}
	f.overloadHeld, f.overloadedSince = o.overloadHeld, o.overloadedSince
	if b := it.schedule(class); b != nil {
		f.step = next(b)
	}
	return f
}

// tellLimiter gives the limiter a failed call's feedback: a 429 (with the
// budget it names, to a limiter that reads it), a call that ran out its
// own deadline (to a limiter that reads it), or a failure that says
// nothing about the quota.
func (it *itemRun) tellLimiter(started time.Time, rl *RateLimitedError, timedOut bool) {
	lim := it.sc.Limiter
	ql, quota := lim.(QuotaLimiter)
	tl, timeouts := lim.(TimeoutListener)
	switch {
	case lim == nil:
	case quota && rl != nil:
		ql.RateLimitedQuota(started, rl.RetryAfter, rl.RequestsPerMinute, rl.TokensPerMinute)
	case rl != nil:
		lim.RateLimited(started, rl.RetryAfter)
	case timeouts && timedOut:
		tl.TimedOut(started)
	default:
		lim.Failed(started)
	}
}

// warnRefused says, once per run of refusals and before the park, that
// every call has been refused for a while, so a run that stops for it has
// said why in time to act.
func (it *itemRun) warnRefused(f failure, o outcome) {
	stops, hint := any(it.sc.MaxRefused), "the run stops as quota exhausted unless one does"
	if it.sc.MaxRefused < 0 {
		stops, hint = "never", "the run goes on waiting for the quota"
	}
	it.r.log().Warn("every call refused", "stage", it.name, "for", o.at.Sub(f.refusedSince).Round(time.Second), "in_a_row", f.refusedInARow,
		"stops_after", stops, "last", o.err.Error(),
		"hint", "no call has succeeded since "+f.refusedSince.Local().Format(time.TimeOnly)+"; "+hint)
}

// schedule is the item's backoff schedule for waits after failures of
// class, nil for a class that is never waited out.
func (it *itemRun) schedule(class Class) backoff.BackOff {
	switch class {
	case ClassRateLimited, ClassTransient, ClassUnavailable, ClassOverloaded, ClassShed:
	default:
		return nil
	}
	b := it.schedules[class]
	if b == nil {
		if class == ClassOverloaded {
			b = newOverloadBackOff(it.sc)
		} else {
			b = newBackOff(it.sc)
		}
		it.schedules[class] = b
	}
	return b
}

// act carries out decide's answer to failed call o. It reports whether
// the item tries again.
func (it *itemRun) act(a action, o outcome) bool {
	switch a.kind {
	case requeue:
	case stop:
		it.r.fail(fmt.Errorf("%s: %w", it.name, o.err))
	case park:
		it.r.park(a.reason)
		it.parkStage()
	case halt:
		it.r.halt(a.reason)
	case retryAt:
		it.c.away.Add(1)
		slept := sleep(it.stageCtx, it.clock, a.at.Sub(o.at))
		it.c.away.Add(-1)
		return slept
	default: // deadLetter
		it.toDeadLetters(a, o)
	}
	return false
}

// toDeadLetters commits the item to the stage's dead letters. A verdict on
// the item's content, or any answer that was billed, shows the request
// and the account work; a permanent failure that shows neither may be the
// request's fault rather than the item's (checkSamePermanent).
func (it *itemRun) toDeadLetters(a action, o outcome) {
	it.finished = true
	dl := DeadLetter{Class: o.class, Message: a.message, Cause: CauseOf(o.err), Attempts: it.attempts, First: it.first, Last: it.last}
	it.r.send(it.i, Transition{Stage: it.name, ID: it.q.Item.ID, Seq: it.q.Seq, Outcome: DeadLettered, Dead: dl, Usage: it.paid, CostUSD: toUSD(it.spent)}, it.attempt)
	if o.class != ClassPermanent || it.sc.Limiter == nil {
		return
	}
	if isVerdict(o.err) || o.res.Usage != (Usage{}) {
		it.c.health.succeeded()
	} else {
		it.r.checkSamePermanent(it.i, dl)
	}
}

// countCalls is the requests a stage's Process sent for res, and how
// many of them were billed (see Result.Calls).
func countCalls(res Result) (calls, billed int64) {
	if res.Calls <= 0 {
		if res.Usage != (Usage{}) {
			return 1, 1
		}
		return 1, 0
	}
	return int64(res.Calls), int64(min(max(res.BilledCalls, 0), res.Calls))
}

// callSize is the size of a call of stage s for it, known before the call
// (see WeightedLimiter): the stage's input estimate when it is an
// Estimator (its prompt, system instruction included), else the runes of
// the item's text.
func callSize(s Stage, it Item) int64 {
	if e, ok := s.(Estimator); ok {
		return max(e.EstimateInput(it), 0)
	}
	return int64(utf8.RuneCountInString(it.Text))
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

// newOverloadBackOff is the schedule of waits after overloaded answers
// (503s), an item's own and the stage's hold: the server is short of
// capacity for a moment nobody announces, often a fraction of a second,
// so the first wait is short and they grow by half each time it still
// refuses, to a few seconds. Each retry is a call, but one that the quota does not count
// and the stage's hold keeps to one probe per step while the server
// refuses everything.
func newOverloadBackOff(sc *StageConfig) backoff.BackOff {
	if sc.NewBackOff != nil {
		return sc.NewBackOff()
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 100 * time.Millisecond
	b.RandomizationFactor = 0.2
	b.Multiplier = 1.5
	// An overload of minutes is probed every few seconds: one call each.
	b.MaxInterval = 5 * time.Second
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

// refusedWarnAfter is how long refusals go on before the warning: half
// the bound, or of the default bound when refusals never stop the stage,
// so that a run riding them out does not do so silently.
func refusedWarnAfter(maxRefused time.Duration) time.Duration {
	if maxRefused < 0 {
		return DefaultMaxRefused / 2
	}
	return maxRefused / 2
}
