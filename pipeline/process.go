package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v4"
)

// process runs one item at stage i to a committed outcome, or gives it back
// (it stays queued) when the run stops, the stage parks or a fatal error
// occurs. What each failed call leads to is decide's answer; process only
// makes the call, keeps the books and carries the action out.
func (r *Runner) process(stageCtx, workCtx context.Context, parkStage context.CancelFunc, i int, q Queued) {
	sc := &r.Stages[i]
	c := r.counters[i]
	clock := r.clock()
	name := sc.Stage.Name()
	var (
		attempts    int
		first, last time.Time
		paid        Usage // every call's usage for this item, carried by its transition
		// One schedule per kind of wait, so a refusal does not stretch
		// the backoff of the next transient retry, nor an outage that of
		// the next refusal.
		schedules = map[Class]backoff.BackOff{}
	)
	defer func() { c.attempts.Add(int64(attempts)) }()
	if sk, ok := sc.Stage.(Skipper); ok {
		if res, skip := sk.Skip(workCtx, q.Item); skip {
			r.send(i, Transition{Stage: name, ID: q.Item.ID, Seq: q.Seq, Outcome: Succeeded, Result: res})
			return
		}
	}
	// An item whose answer is cached, or being bought by an identical
	// item, makes no call; otherwise it owns its key until it finishes.
	key := r.cacheKey(i, q.Item)
	var (
		own      *flight
		answer   Result
		answered bool
		spent    int64       // nanodollars billed for this item's calls
		size     = int64(-1) // the call's size for a WeightedLimiter; -1 until computed
	)
	// An item given back keeps what its calls were billed on the books.
	finished := false
	defer func() {
		if !finished && paid != (Usage{}) {
			r.sendBilled(i, q, paid, spent)
		}
	}()
	if key != "" {
		res, hit, f := r.reuse(stageCtx, i, key)
		switch {
		case hit:
			r.send(i, Transition{Stage: name, ID: q.Item.ID, Seq: q.Seq, Outcome: Succeeded,
				Result: Result{Output: res.Output}, CacheKey: key, Cached: true, SavedUSD: sc.Price.Cost(res.Usage)})
			return
		case f == nil:
			return // stopping: the item stays queued
		}
		own = f
		defer func() {
			c.flights.land(key, own, answer, answered)
			if own.fleet && !answered {
				r.landFleetFlight(i, key)
			}
		}()
	}
	for tries := 0; ; tries++ {
		// A fleet worker whose store fails starts no call: its answer
		// could not be committed until the store is back.
		if !r.waitStore(stageCtx, workCtx) {
			return // stopping, or the lease is lost: the item stays queued
		}
		if stageCtx.Err() != nil || !r.backlog.admit(stageCtx, clock, r.MaxBacklog, r.MaxBacklogAge) {
			return // stopping: the item stays queued
		}
		if tries > 0 && own != nil && own.fleet {
			// Retries can outlast the flight's lease: renew it.
			r.renewFleetFlight(i, key)
		}
		// Waiting out an overload holds no limiter slot and books no
		// money.
		c.away.Add(1)
		passed, probe, open, ok := c.overload.pass(stageCtx, clock)
		c.away.Add(-1)
		if !ok {
			return // stopping: the item stays queued
		}
		booked, reserved, estIn, ok := r.book(stageCtx, i, q.Item, parkStage)
		if !ok {
			c.overload.answered(passed, probe, time.Time{}, ClassCanceled, clock.Now())
			return // out of budget, or stopping: the item stays queued
		}
		var started time.Time
		if sc.Limiter != nil {
			// A call still waiting for its slot when the hold closes
			// goes back to the hold rather than into the overload.
			acquireCtx, release := whileOpen(stageCtx, open)
			var err error
			if wl, ok := sc.Limiter.(WeightedLimiter); ok {
				if size < 0 {
					size = callSize(sc.Stage, q.Item)
				}
				started, err = wl.AcquireWeighted(acquireCtx, size)
			} else {
				started, err = sc.Limiter.Acquire(acquireCtx)
			}
			release()
			if err != nil {
				c.overload.answered(passed, probe, time.Time{}, ClassCanceled, clock.Now())
				if booked {
					r.purse.settle(reserved, 0)
				}
				if stageCtx.Err() == nil {
					continue // the hold closed: wait at it
				}
				return
			}
		}
		c.overload.started(probe, clock.Now())
		callStart := clock.Now()
		raiseTo(&c.inFlightMax, c.inFlight.Add(1))
		if sc.Limiter != nil {
			// At each start, not only each second's sample: a slow
			// start's peak can come and go between two samples.
			r.observeLimit(i, sc.Limiter.Limit())
		}
		res, err := r.call(workCtx, sc.Stage, q.Item)
		took := clock.Now().Sub(callStart)
		c.callTime.Add(int64(took))
		c.inFlight.Add(-1)
		// Billing happens at the call: an unusable answer (blocked,
		// cut off, off-schema) is paid for too, and so is a repair call.
		c.addUsage(res.Usage)
		calls, billedCalls := countCalls(res)
		c.calls.Add(calls)
		c.paid.Add(billedCalls)
		paid = paid.Add(res.Usage)
		billed := sc.Price.nanos(res.Usage)
		spent += billed
		c.spent.Add(billed)
		c.tiers.billed(sc.Price, res.Usage, billedCalls, billed, took)
		c.sizes.observe(estIn, res.Usage)
		if booked {
			r.purse.settle(reserved, billed)
		} else {
			r.purse.bill(billed)
		}
		class := ClassOf(workCtx, err)
		c.outcomes[classIndex(class)].Add(1)
		now := clock.Now()
		overloadHeld, overloadedSince := c.overload.answered(passed, probe, callStart, class, now)
		if class == "" {
			c.health.succeeded()
			if sc.Limiter != nil {
				// TPM quotas count input tokens.
				sc.Limiter.Succeeded(started, res.Usage.PromptTokens)
			}
			attempts++
			finished = true
			t := Transition{Stage: name, ID: q.Item.ID, Seq: q.Seq, Outcome: Succeeded, Result: res, Usage: paid, CostUSD: toUSD(spent)}
			if own == nil {
				r.send(i, t)
				return
			}
			t.CacheKey = key
			answer, answered = res, true
			// Items arriving until the store holds the answer find it
			// in flights.
			// The commit of t ends the fleet flight too (AnswerFlights).
			r.sendThen(i, t, func() { c.flights.forget(key, own) })
			return
		}

		f := failure{class: class, err: err}
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
		if sc.Limiter != nil {
			if ql, ok := sc.Limiter.(QuotaLimiter); ok && rl != nil {
				ql.RateLimitedQuota(started, rl.RetryAfter, rl.RequestsPerMinute, rl.TokensPerMinute)
			} else if rl != nil {
				sc.Limiter.RateLimited(started, rl.RetryAfter)
			} else {
				sc.Limiter.Failed(started)
			}
		}
		if spendsAttempt(class) {
			attempts++
			if first.IsZero() {
				first = now
			}
			last = now
		}
		f.attempts = attempts
		f.refusedInARow, f.refusedSince, f.outageSince, f.contacted = c.health.failed(class, now)
		if class == ClassRateLimited && c.health.warnRefused(now, refusedWarnAfter(sc.MaxRefused)) {
			// Said once per run of refusals, before the park, so a run
			// that stops for it has said why in time to act.
			stops, hint := any(sc.MaxRefused), "the run stops as quota exhausted unless one does"
			if sc.MaxRefused < 0 {
				stops, hint = "never", "the run goes on waiting for the quota"
			}
			r.log().Warn("every call refused", "stage", name, "for", now.Sub(f.refusedSince).Round(time.Second), "in_a_row", f.refusedInARow,
				"stops_after", stops, "last", err.Error(),
				"hint", "no call has succeeded since "+f.refusedSince.Local().Format(time.TimeOnly)+"; "+hint)
		}
		f.overloadHeld, f.overloadedSince = overloadHeld, overloadedSince
		if class == ClassRateLimited || class == ClassTransient || class == ClassUnavailable || class == ClassOverloaded || class == ClassShed {
			b := schedules[class]
			if b == nil {
				if class == ClassOverloaded {
					b = newOverloadBackOff(sc)
				} else {
					b = newBackOff(sc)
				}
				schedules[class] = b
			}
			f.step = next(b)
		}

		a := decide(f, sc, now)
		switch a.kind {
		case requeue:
			return
		case stop:
			r.fail(fmt.Errorf("%s: %w", name, err))
			return
		case park:
			r.park(a.message)
			parkStage()
			return
		case halt:
			r.halt(a.message)
			return
		case retryAt:
			c.away.Add(1)
			slept := sleep(stageCtx, clock, a.at.Sub(now))
			c.away.Add(-1)
			if !slept {
				return
			}
			continue
		}
		finished = true
		dl := DeadLetter{Class: class, Message: a.message, Attempts: attempts, First: first, Last: last}
		r.send(i, Transition{Stage: name, ID: q.Item.ID, Seq: q.Seq, Outcome: DeadLettered, Dead: dl, Usage: paid, CostUSD: toUSD(spent)})
		if class == ClassPermanent && sc.Limiter != nil {
			// A verdict on the item's content, or any answer that was
			// billed, shows the request and the account work.
			if isVerdict(err) || res.Usage != (Usage{}) {
				c.health.succeeded()
			} else {
				r.checkSamePermanent(i, dl)
			}
		}
		return
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

// endpointHealth is what one stage's calls have shown about its endpoint in
// this run. One mutex makes each update and the figures read from it one
// step: a success resetting the outage can never fall between a failure
// starting the outage clock and reading it back.
type endpointHealth struct {
	mu sync.Mutex
	// refusedInARow counts 429s since the last success; refusedSince is
	// when the first of them came, zero when none; refusedWarned: the
	// warning that they last was logged.
	refusedInARow int64
	refusedSince  time.Time
	refusedWarned bool
	// outageSince is the first unreachable call since the endpoint last
	// answered; zero when it is answering.
	outageSince time.Time
	// contacted: the endpoint has answered at least once.
	contacted bool
	// worked: a call succeeded, or an answer showed the request works.
	worked bool
}

// succeeded records a call that the endpoint answered usefully.
func (h *endpointHealth) succeeded() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refusedInARow, h.outageSince, h.contacted, h.worked = 0, time.Time{}, true, true
	h.refusedSince, h.refusedWarned = time.Time{}, false
}

// failed records a failed call of class at now and returns the stage's
// figures for decide. Any answer (a 429, a 5xx, a rejection) ends an
// outage; only "no connection" starts or extends one; only a success ends
// a run of refusals.
func (h *endpointHealth) failed(class Class, now time.Time) (refusedInARow int64, refusedSince, outageSince time.Time, contacted bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch class {
	case ClassUnavailable:
		if h.outageSince.IsZero() {
			h.outageSince = now
		}
	case ClassCanceled, ClassFatal:
	default:
		h.outageSince, h.contacted = time.Time{}, true
		if class == ClassRateLimited {
			h.refusedInARow++
			if h.refusedSince.IsZero() {
				h.refusedSince = now
			}
		}
	}
	return h.refusedInARow, h.refusedSince, h.outageSince, h.contacted
}

// warnRefused reports, once per run of refusals, that it has lasted at
// least after at now (and counts minRefusedToPark).
func (h *endpointHealth) warnRefused(now time.Time, after time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refusedWarned || h.refusedSince.IsZero() || h.refusedInARow < minRefusedToPark || now.Sub(h.refusedSince) < after {
		return false
	}
	h.refusedWarned = true
	return true
}

func (h *endpointHealth) hasWorked() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.worked
}

// samePermanentLimit is how many permanent failures with one and the same
// cause, before any success, make an API stage's run fatal.
const samePermanentLimit = 25

// sameFailureStop is the fatal error of the "first calls all failed the
// same way" stop. deadLettered starts as the dead letters sent; Run sets
// it to those committed, once every worker and the committer are done.
type sameFailureStop struct {
	stage        int
	name, key    string
	message      string
	deadLettered int
}

func (e *sameFailureStop) Error() string {
	items := fmt.Sprintf("%d items were", e.deadLettered)
	if e.deadLettered == 1 {
		items = "1 item was"
	}
	return fmt.Sprintf("%s: the first %d calls all failed the same way and none succeeded (%s): that is the request or the account, not the items; %s dead-lettered for it: fix the cause, then `sawtooth retry --stage %s` re-queues them",
		e.name, samePermanentLimit, e.message, items, e.name)
}

// checkSamePermanent stops the run when an API stage's calls have all
// failed permanently for the same reason and none has succeeded: that is
// a request or account problem (a 400 on our own request, say), and
// going on would dead-letter the whole night's input one item at a time.
// Verdicts on items (safety blocks, billed answers) never get here.
func (r *Runner) checkSamePermanent(i int, dl DeadLetter) {
	c := r.counters[i]
	if c.health.hasWorked() {
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
		r.fail(&FatalError{Err: &sameFailureStop{stage: i, name: name, key: key, message: dl.Message, deadLettered: n}, DeadLettered: n})
	}
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
