package limiter

import (
	"container/list"
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// AIMD limits the number of calls in flight with additive increase and
// multiplicative decrease, the way TCP congestion avoidance limits the
// packets in flight on a connection.
//
// Acquire blocks while InFlight() >= Limit() and returns the call's start
// time; the caller then reports the call's outcome with exactly one of
// Succeeded, RateLimited or Failed, passing that start time back. Waiting
// callers are served in FIFO order.
//
// The limit grows by Config.Increase after a streak of successes: Limit()
// consecutive successes of calls started after the last decrease, i.e.
// about one round trip's worth of calls at the current limit, as TCP adds
// one segment per window acknowledged. Successes completing within the
// cooldown after a decrease do not count. A 429 (RateLimited) of a call
// started after the last decrease is a new congestion event and multiplies
// the limit by Config.DecreaseFactor; a 429 of a call started before it
// belongs to the event already answered and does not decrease again, so a
// burst of simultaneous 429s halves the limit once. A decrease takes effect
// at once: no call starts until in-flight calls have drained below the new
// limit. Failed (5xx, timeouts, cancellations) frees the slot and leaves the
// limit and the streak alone: such failures say nothing about the quota.
//
// A 429 with a retry-after delay d closes a gate until now+d (the latest
// deadline wins): no Acquire returns before it, whatever the limit.
//
// API quotas are counted over a window (a minute for Gemini) several round
// trips long, and a window-counted quota answers late: an overshoot shows
// as a 429 only once the window has filled, several round trips after the
// limit crossed the quota, and 429s go on until the window has drained.
// Once it has measured round trips (the smoothed latency of successes), the
// limiter reads the quota accordingly:
//
//   - Slow start. With no Config.Start given, the limit grows by Increase
//     per success (doubling each round trip) up to a third of
//     Config.Ceiling, then by streaks. A positive Start, such as a limit
//     learned by an earlier run, starts with streaks.
//   - Edge 429s. A 429 whose retry delay is at most one round trip says the
//     quota frees a slot within a round trip: the limit just overshot it.
//     Rather than halving, the limit returns to where it was five round
//     trips earlier, before the overshoot (taking off at least 3%, and
//     never more than DecreaseFactor would). A 429 with a longer delay, or
//     none, means the quota fell, and the limit is multiplied by
//     DecreaseFactor.
//   - Probing. Just below the level of the last edge 429 the limit grows
//     by streaks; from that level up it grows one step per three streaks,
//     for three steps, so that the window's late answer finds it at most a
//     step or two over the quota. Three slow steps with no 429 mean the
//     quota has grown, and growth by streaks resumes.
//   - One decrease per round trip. 429s within a round trip of a decrease
//     belong to the event it answered, whatever their calls' start, unless
//     that was an edge 429 and this one is not: the quota fell just after
//     the limit overshot it.
//   - Cooldown and pacing. The cooldown lasts Config.Cooldown or five round
//     trips, whichever is shorter, counted from when the retry-after gate
//     opens; during it calls start at most one per round trip/limit, so
//     those waiting for the gate do not all start at once.
//
// With Config.TPM > 0 the limit also never exceeds the ceiling Little's law
// gives for the token budget. A call holds a slot for its latency W, so L
// calls in flight complete L/W calls per second and bill L/W*T tokens per
// second, T being the tokens per call. Keeping that under TPM/60 gives
//
//	L <= TPM * W / (60s * T)
//
// computed from the smoothed (EWMA, weight 1/8) latency from Acquire to
// Succeeded and billed tokens of successful calls, floored, then clamped to
// [Floor, Ceiling]. Until a success with tokens has been measured the
// ceiling is Config.Ceiling. When the derived ceiling falls below the limit,
// the limit is lowered to it; that is not counted as a decrease.
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
}

// New returns an AIMD limiter configured by cfg (see Config for defaults).
func New(cfg Config) *AIMD {
	slowStart := cfg.Start == 0
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
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	l.mu.Lock()
	now := l.cfg.Now()
	if l.queue.Len() == 0 && l.law.mayStart(now, l.inFlight) {
		started := l.law.start(now, l.inFlight)
		l.inFlight++
		l.mu.Unlock()
		return l.pace(ctx, started)
	}
	w := &waiter{ready: make(chan struct{}), wake: make(chan struct{}, 1)}
	w.elem = l.queue.PushBack(w)
	for {
		// Only the head of the line watches the gate's clock; the others
		// wait for their turn and are woken one at a time.
		timer, stop := (<-chan time.Time)(nil), noStop
		if hold := l.law.hold(now); l.queue.Front() == w.elem && now.Before(hold) {
			timer, stop = l.newTimer(hold.Sub(now))
		}
		l.mu.Unlock()
		select {
		case <-w.ready:
			stop()
			return l.pace(ctx, w.started)
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
			return l.pace(ctx, w.started)
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
	l.dispatchLocked(now)
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
	l.dispatchLocked(now)
}

// Failed reports any other outcome of the call started at started (5xx,
// timeout, permanent error, cancellation). It frees the slot; the limit and
// the streak are unchanged.
func (l *AIMD) Failed(started time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked()
	l.law.onFailed(started)
	l.dispatchLocked(l.cfg.Now())
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

// Limit returns the current limit on calls in flight.
func (l *AIMD) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.law.limit
}

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
	for l.law.mayStart(now, l.inFlight) {
		e := l.queue.Front()
		if e == nil {
			return
		}
		w := l.queue.Remove(e).(*waiter)
		w.started = l.law.start(now, l.inFlight)
		l.inFlight++
		w.granted = true
		close(w.ready)
		granted = true
	}
	if granted && now.Before(l.law.hold(now)) {
		l.wakeHeadLocked() // the new head must watch the pacing clock
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
