package limiter

import (
	"container/list"
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// AIMD paces and limits the calls to a rate-limited API, adapting both to
// the quota the API actually grants. (The name is the original design's,
// additive increase and multiplicative decrease, kept for its callers; the
// law now learns a rate, see the package documentation.)
//
// Acquire blocks until a call may start and returns its start time: the
// caller is first in line, InFlight() < Limit(), the retry-after gate has
// passed, the learned rate's pacing allows it, and so does RPM/TPM pacing
// when configured. The caller then reports the call's outcome with exactly
// one of Succeeded, RateLimited or Failed, passing that start time back.
// Waiting callers are served in FIFO order.
//
// The control law (law.go) decides; AIMD only holds the lock, the waiter
// queue and the timers, and hands each event to the law with the clock's
// reading. In short:
//
//   - Slow start. With no Config.Start the limit grows by Increase per
//     success, doubling each round trip, until the first 429: up to 64,
//     held there until its calls have been admitted for two round trips
//     and 4 s, then on up to Ceiling while the calls fill it. With a Start (a limit learned by an earlier run) the law paces
//     from the first round trip the rate that limit carries; with
//     SlowStart as well it climbs from that limit as slow start does.
//   - Rate. From the first 429 on, starts are paced at a rate, no faster
//     than the quota admitted over its window (the longest retry delay
//     seen) before the 429: a rate held for eight round trips, or that
//     window when longer, with no 429 is safe; the rate last refused
//     bounds the quota from above; the rate goes halfway between until they
//     are within 3%, stays at the safe one a while (twice as long after
//     each stair that found nothing), then climbs in stairs (5%, then each
//     rise twice the last) to find a quota that grew. A 429 at or below the
//     safe rate, or one after the quota admitted less than it, means the
//     quota fell: the law forgets it, and climbs back towards it in 20%
//     stairs, the first after one answer lag while no look was refused.
//   - Named quota. A 429 reported through RateLimitedQuota with the
//     per-minute budget it enforces sets the rate at 97% of it (the
//     tighter of requests and input tokens), and no stair climbs past it
//     until it has held 32 answer lags with no 429.
//     The limit on calls in flight follows the rate by Little's law with
//     room for latency's spread: rate × latency × 1.5.
//   - Tokens. While a token budget binds, calls acquired with their size
//     (AcquireWeighted) are paced in tokens: the first in line waits for
//     room for its own estimated tokens, learned per unit of size from
//     what successes are billed, and its start moves the schedule on by
//     them.
//   - Cap. A 429 of a call that started beside the same number of calls in
//     flight as the last two, or well above what the rate carries, met a
//     server's cap on calls in progress: the limit holds just under that
//     level, grows back one per four round trips, and the rate is left
//     alone.
//   - One event per round trip. 429s within a round trip of a decrease
//     belong to the event it answered; each such refusal of a call started
//     before it takes one call per round trip off the rate (no more than
//     DecreaseFactor of it).
//   - Gate. A 429 with an exact retry delay d keeps every Acquire from
//     returning before now+d (the latest deadline wins). One with none, or
//     a whole number of seconds (a rounded delay, often far later than
//     needed), that no cap explains: starts wait a jittered backoff of a
//     round trip, growing by half while 429s go on (never longer than the
//     delay given), then one probe call goes and the rest wait for its
//     success.
//     At a rate already paced, the first such 429 of an event holds starts
//     only for two of its own round trips before the probe.
//
// Failed (5xx, timeouts, cancellations) frees the slot and changes nothing
// else: those faults belong to retry logic, not to the quota.
//
// With Config.TPM > 0 the limit also never exceeds the ceiling Little's law
// gives for the token budget. A call holds a slot for its latency W, so L
// calls in flight complete L/W calls per second and bill L/W*T tokens per
// second, T being the input tokens per call. Keeping that under TPM/60
// gives
//
//	L <= TPM * W / (60s * T)
//
// computed from the smoothed (EWMA, weight 1/8) latency from Acquire to
// Succeeded and input tokens of successful calls, floored, then clamped to
// [Floor, Ceiling]; the paced rate never exceeds TPM/60/T either.
//
// Construct an AIMD with New or NewFixed; the zero value is not usable.
// An AIMD is safe for concurrent use by multiple goroutines.
type AIMD struct {
	cfg      Config
	newTimer func(d time.Duration) (<-chan time.Time, func() bool)
	rpm, tpm *rate.Limiter // nil when that pacing is off

	mu       sync.Mutex
	law      law
	inFlight int
	queue    list.List // of *waiter, oldest first
}

// waiter is one Acquire call queued for a slot.
type waiter struct {
	elem    *list.Element
	ready   chan struct{} // closed when granted
	wake    chan struct{} // buffered: re-read the gate (became head, or the gate moved)
	granted bool          // set with ready closed, under mu
	started time.Time     // start stamp, set when granted
	size    int64         // the call's size (see AcquireWeighted), 0 if unknown
}

// New returns an AIMD limiter configured by cfg (see Config for defaults).
func New(cfg Config) *AIMD {
	slowStart := cfg.slowStarts()
	cfg = cfg.withDefaults()
	l := &AIMD{
		cfg:      cfg,
		newTimer: realTimer,
		law:      newLaw(cfg, slowStart),
	}
	l.rpm, l.tpm = newPacers(cfg)
	return l
}

// NewFixed returns a limiter with a fixed pool of n slots (n < 1 means 1):
// shorthand for New(Config{Fixed: true, Start: n, Floor: 1, Ceiling: n}).
// SetLimit can shrink the pool but not grow it past n.
func NewFixed(n int) *AIMD {
	n = max(n, 1)
	return New(Config{Fixed: true, Start: n, Floor: 1, Ceiling: n})
}

func realTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

func noStop() bool { return false }

// Acquire blocks until a call may start, then returns its start time: pass
// it back to Succeeded, RateLimited or Failed, exactly one of which must
// follow every Acquire that returns a nil error. A call may start when it
// is first in line, InFlight() < Limit(), the retry-after gate has passed,
// and RPM/TPM pacing (when configured) allows it.
//
// The start time is the clock's reading when the call was let through,
// moved a nanosecond past the last decrease if the clock has not advanced
// beyond it, so that calls let through after a decrease always compare
// after it.
//
// If ctx is done first, Acquire returns ctx.Err(), holds no slot and has
// left the queue; the caller must not report an outcome.
func (l *AIMD) Acquire(ctx context.Context) (started time.Time, err error) {
	return l.AcquireWeighted(ctx, 0)
}

// AcquireWeighted is Acquire for a call whose size is known before it
// starts, in any unit that grows with its input tokens (its prompt's
// runes, say; 0 if unknown). The limiter learns the tokens per unit from
// what successes are billed (Succeeded), and while a token budget binds
// (one a 429 named, or Config.TPM) it paces call starts in tokens: each
// start holds the next back by its own estimated tokens, so that the
// tokens a window holds stay even however prompts vary. It implements
// pipeline.WeightedLimiter.
func (l *AIMD) AcquireWeighted(ctx context.Context, size int64) (started time.Time, err error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	l.mu.Lock()
	now := l.cfg.Now()
	if l.queue.Len() == 0 {
		l.law.nextSize = size
	}
	if l.queue.Len() == 0 && l.law.mayStart(now, l.inFlight) {
		started := l.law.startSized(now, l.inFlight, size)
		l.inFlight++
		l.mu.Unlock()
		return l.pace(ctx, started, size)
	}
	w := &waiter{ready: make(chan struct{}), wake: make(chan struct{}, 1), size: size}
	w.elem = l.queue.PushBack(w)
	for {
		// Only the head of the line watches the gate's clock; the others
		// wait for their turn and are woken one at a time.
		timer, stop := (<-chan time.Time)(nil), noStop
		l.headLocked()
		if hold := l.law.hold(now); l.queue.Front() == w.elem && now.Before(hold) {
			timer, stop = l.newTimer(hold.Sub(now))
		}
		l.mu.Unlock()
		select {
		case <-w.ready:
			stop()
			return l.pace(ctx, w.started, size)
		case <-ctx.Done():
			stop()
			l.abandon(w)
			return time.Time{}, ctx.Err()
		case <-w.wake:
			stop()
		case <-timer:
		}
		l.mu.Lock()
		now = l.cfg.Now()
		l.dispatchLocked(now)
		if w.granted {
			l.mu.Unlock()
			return l.pace(ctx, w.started, size)
		}
	}
}

// abandon takes a canceled waiter out of line, giving back its slot if it
// was granted one while its Acquire was returning.
func (l *AIMD) abandon(w *waiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.cfg.Now()
	if w.granted {
		l.releaseLocked()
		l.dispatchLocked(now)
		return
	}
	wasHead := l.queue.Front() == w.elem
	l.queue.Remove(w.elem)
	if wasHead {
		l.dispatchLocked(now)
		l.headLocked()
		if now.Before(l.law.hold(now)) {
			l.wakeHeadLocked() // the new head must take over the gate's clock
		}
	}
}

// Succeeded reports that the call started at started returned a result
// billed tokens input tokens (what a TPM quota counts; 0 if unknown). It
// frees the call's slot and may grow the limit.
func (l *AIMD) Succeeded(started time.Time, tokens int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.cfg.Now()
	l.releaseLocked()
	l.law.onSuccess(now, started, tokens, l.inFlight+1)
	l.releasedLocked(now)
}

// RateLimited reports that the call started at started was refused with a
// 429; retryAfter is the server's retry delay, 0 if it gave none. It frees
// the call's slot, decreases the limit if this is a new congestion event
// (the call started after the last decrease), and with retryAfter > 0 keeps
// every Acquire from returning before now+retryAfter.
func (l *AIMD) RateLimited(started time.Time, retryAfter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.cfg.Now()
	l.releaseLocked()
	if l.law.onRateLimited(now, started, retryAfter, l.inFlight+1) {
		l.wakeHeadLocked()
	}
	l.releasedLocked(now)
}

// RateLimitedQuota is RateLimited for a 429 that named the per-minute
// budgets it enforces (requests and input tokens per minute, 0 for each it
// did not name): the limiter paces just under the tighter of them instead
// of probing for the quota (see Config.RPM and Config.TPM for budgets
// known before the run). It implements pipeline.QuotaLimiter.
func (l *AIMD) RateLimitedQuota(started time.Time, retryAfter time.Duration, requestsPerMinute, tokensPerMinute int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.cfg.Now()
	l.releaseLocked()
	l.law.nameQuotaAt(started, requestsPerMinute, tokensPerMinute)
	if l.law.onRateLimited(now, started, retryAfter, l.inFlight+1) {
		l.wakeHeadLocked()
	}
	l.releasedLocked(now)
}

// Failed reports any other outcome of the call started at started (5xx,
// timeout, permanent error, cancellation). It frees the slot; the limit and
// the streak are unchanged.
func (l *AIMD) Failed(started time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked()
	l.law.onFailed(started)
	l.releasedLocked(l.cfg.Now())
}

// TimedOut reports that the call started at started ran out its own
// deadline (the per-call timeout, not the run's end). It frees the slot; a
// wave of them caps the calls in flight (see onTimedOut). It implements
// pipeline.TimeoutListener.
func (l *AIMD) TimedOut(started time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.cfg.Now()
	l.releaseLocked()
	l.law.onTimedOut(now, started, l.inFlight+1)
	l.releasedLocked(now)
}

// SetLimit sets the limit to n clamped to [Floor, ceiling], the ceiling
// being the TPM-derived one when it applies. Use it to start from a limit
// learned by an earlier run. It resets the streak and is counted neither as
// an increase nor as a decrease.
func (l *AIMD) SetLimit(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.cfg.Now()
	l.law.setLimitTo(now, n)
	l.dispatchLocked(now)
}

// MostInFlight returns the most calls the limiter can ever let be in
// flight, Config.Ceiling: the worker pool a runner needs for no call the
// limit admits to wait for a worker. It implements pipeline.PoolSizer.
func (l *AIMD) MostInFlight() int { return l.cfg.Ceiling }

// Limit returns the current limit on calls in flight.
func (l *AIMD) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.law.limit
}

// Rate returns the rate the limiter learned of the quota, in call starts
// per second: the highest rate it found the quota admits, or the rate it
// paces once the quota has bounded it (a 429, a budget one named, a
// window read from one) in this run, or Config.StartRate's (or more, if
// it proved more) in a run that met no 429. 0 when it never paced, or
// when the quota never bounded it (the rate then measured the run's own
// demand, not the quota), or when Fixed. Persist it with Limit and pass
// both back as Config.StartRate and Config.Start to start the next run
// from them; when it is 0, pass Limit as Config.Start with
// Config.SlowStart.
func (l *AIMD) Rate() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cfg.Fixed {
		return 0
	}
	return l.law.learnedRate()
}

// HoldsRefusals reports whether the limiter holds the calls after a 429
// with no retry delay: an adaptive one backs off and probes (see AIMD); a
// fixed pool lets them through at once. It implements
// pipeline.RefusalHolder.
func (l *AIMD) HoldsRefusals() bool { return !l.cfg.Fixed }

// InFlight returns the number of slots held: calls acquired and not yet
// reported, including any still waiting out RPM/TPM pacing.
func (l *AIMD) InFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inFlight
}

// GateUntil returns the time before which no call starts, set by the
// latest-ending retry-after delay; the zero Time if none was ever given.
func (l *AIMD) GateUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.law.gate
}

// dispatchLocked grants slots to waiters in line order while slots are free
// and the gate has passed.
func (l *AIMD) dispatchLocked(now time.Time) {
	granted := false
	for l.headLocked(); l.law.mayStart(now, l.inFlight); l.headLocked() {
		e := l.queue.Front()
		if e == nil {
			return
		}
		w := l.queue.Remove(e).(*waiter)
		w.started = l.law.startSized(now, l.inFlight, w.size)
		l.inFlight++
		w.granted = true
		close(w.ready)
		granted = true
	}
	if granted && now.Before(l.law.hold(now)) {
		l.wakeHeadLocked() // the new head must watch the pacing clock
	}
}

// releasedLocked lets waiters through after an outcome freed a slot. A
// head of the line that fell asleep while every slot was taken set no
// timer; if the gate or the pacing still holds starts (hold is ahead),
// dispatching lets nobody through and, with the last call in flight just
// ended, nothing else would ever wake it: so it is woken to watch the
// gate's clock itself. (It cannot go in dispatchLocked, which the waiter
// runs: it would wake itself in a loop.)
func (l *AIMD) releasedLocked(now time.Time) {
	l.dispatchLocked(now)
	if l.queue.Len() > 0 && now.Before(l.law.hold(now)) {
		l.wakeHeadLocked()
	}
}

// headLocked tells the law the size of the call first in line: it waits
// for room for its own tokens (see law.headStep).
func (l *AIMD) headLocked() {
	l.law.nextSize = 0
	if e := l.queue.Front(); e != nil {
		l.law.nextSize = e.Value.(*waiter).size
	}
}

func (l *AIMD) wakeHeadLocked() {
	if e := l.queue.Front(); e != nil {
		select {
		case e.Value.(*waiter).wake <- struct{}{}:
		default:
		}
	}
}

func (l *AIMD) releaseLocked() {
	if l.inFlight <= 0 {
		panic("limiter: outcome reported more often than Acquire succeeded")
	}
	l.inFlight--
}
