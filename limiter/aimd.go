package limiter

import (
	"container/list"
	"context"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Defaults for the zero fields of Config.
const (
	DefaultStart           = 8               // calls in flight before any feedback
	DefaultFloor           = 1               // lowest limit, calls in flight
	DefaultCeiling         = 64              // highest limit, calls in flight
	DefaultIncrease        = 1               // calls added per streak of successes
	DefaultDecreaseFactor  = 0.5             // limit multiplier on a congestion event
	DefaultCooldown        = 4 * time.Second // no growth this long after a decrease
	DefaultEstimatedTokens = 500             // tokens per call before any is measured
)

// How the limiter reads the quota once it has measured round trips (see
// AIMD). They are tuned on a sliding-window quota whose window spans about
// eight round trips, the shape of a per-minute quota with second-long
// calls; limiter's quota simulation test exercises them end to end.
const (
	// slowStartShare: with no Start given, the limit doubles each round
	// trip up to Ceiling/slowStartShare. A quota counted over a window
	// shows nothing until the window is full, so slow start cannot find
	// the quota, only overshoot it; it stops well short of the ceiling.
	slowStartShare = 3
	// lagRoundTrips is how far back an edge 429 looks for the limit to
	// return to: a window-counted quota reports an overshoot only once
	// the window is full, several round trips after it began.
	lagRoundTrips = 5
	// edgeBackoff is the least an edge 429 takes off the limit.
	edgeBackoff = 0.97
	// cooldownRoundTrips caps Config.Cooldown once latency is measured.
	cooldownRoundTrips = 5
	// probeStreaks and probeSteps: from the level of the last edge 429
	// up, the limit grows by one per probeStreaks streaks instead of one,
	// for probeSteps steps; then, no 429 having come, the quota has grown
	// and the limit grows per streak again.
	probeStreaks = 3
	probeSteps   = 3
	// historyLen bounds the limit history kept for edge 429s.
	historyLen = 64
)

// ewmaWeight is the weight of each new sample in the smoothed token and
// latency averages: 1/8, the weight TCP gives each RTT sample (RFC 6298).
// Heavy enough to follow a change of prompt size within a few dozen calls,
// light enough that one huge answer does not swing the derived ceiling.
const ewmaWeight = 1.0 / 8

// Config configures an AIMD limiter. Every field is optional: a zero field
// takes the matching Default constant, so Config{} is a sound limiter.
type Config struct {
	// Start is the limit, in calls in flight, before any feedback arrives.
	// Zero means DefaultStart with slow start: the limit doubles each round
	// trip up to Ceiling/3 or the first 429 (see AIMD). It is clamped to
	// [Floor, Ceiling].
	Start int
	// Floor is the lowest the limit goes, in calls in flight. Values below 1
	// mean DefaultFloor (1): a limit of zero would stall the work for good.
	Floor int
	// Ceiling is the highest the limit goes, in calls in flight. Zero means
	// DefaultCeiling; a Ceiling below Floor is raised to Floor.
	Ceiling int
	// Increase is added to the limit after each streak of successes (see
	// AIMD). Values below 1 mean DefaultIncrease.
	Increase int
	// DecreaseFactor multiplies the limit on a congestion event: the new
	// limit is max(Floor, floor(limit*DecreaseFactor)). Values outside the
	// open interval (0, 1) mean DefaultDecreaseFactor.
	DecreaseFactor float64
	// Cooldown is how long after a decrease the limit does not grow:
	// successes completing within it do not count toward a streak. Once
	// round trips are measured it lasts at most five of them, counted from
	// when the retry-after gate opens. Zero means DefaultCooldown; a
	// negative value means no cooldown.
	Cooldown time.Duration
	// Fixed turns adaptation off: the limit stays at Start (or wherever
	// SetLimit puts it), 429s do not decrease it, successes do not grow it,
	// and the TPM-derived ceiling is not applied. The retry-after gate and
	// RPM/TPM pacing still hold.
	Fixed bool
	// TPM is the token budget per minute (input plus output tokens, as
	// billed). Zero means none. When positive, the limit never exceeds the
	// ceiling Little's law derives from it (see AIMD).
	TPM int64
	// PaceTPM, with TPM > 0, also paces call starts with a token bucket
	// filling at TPM/60 tokens per second, its burst one second's worth
	// (or one call's reservation, if larger). Each call reserves the
	// measured average tokens per call (EstimatedTokens until one is
	// measured): the billed count is only known afterwards.
	PaceTPM bool
	// RPM paces call starts to at most RPM per minute (a token bucket with a
	// burst of one second's worth). Zero means no request pacing.
	RPM int
	// EstimatedTokens is the assumed tokens per call before any success has
	// been measured, used only for TPM pacing. Values below 1 mean
	// DefaultEstimatedTokens.
	EstimatedTokens int64
	// Now is the limiter's clock. Nil means time.Now.
	Now func() time.Time
}

// withDefaults returns c with zero and out-of-range fields replaced.
func (c Config) withDefaults() Config {
	if c.Floor < 1 {
		c.Floor = DefaultFloor
	}
	if c.Ceiling == 0 {
		c.Ceiling = DefaultCeiling
	}
	c.Ceiling = max(c.Ceiling, c.Floor)
	if c.Start == 0 {
		c.Start = DefaultStart
	}
	c.Start = min(max(c.Start, c.Floor), c.Ceiling)
	if c.Increase < 1 {
		c.Increase = DefaultIncrease
	}
	if !(c.DecreaseFactor > 0 && c.DecreaseFactor < 1) {
		c.DecreaseFactor = DefaultDecreaseFactor
	}
	switch {
	case c.Cooldown == 0:
		c.Cooldown = DefaultCooldown
	case c.Cooldown < 0:
		c.Cooldown = 0
	}
	if c.EstimatedTokens < 1 {
		c.EstimatedTokens = DefaultEstimatedTokens
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

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

	mu        sync.Mutex
	limit     int
	inFlight  int
	streak    int       // successes counted toward the next increase
	decrease  time.Time // stamp of the last congestion event; zero before the first
	lastStart time.Time // latest start time handed out
	gate      time.Time // no call starts before this
	queue     list.List // of *waiter, oldest first

	minLimit, maxLimit   int
	increases, decreases int64

	slowStart bool      // no Start was given and no 429 has come yet
	lastEdge  bool      // the last decrease answered an edge 429
	edge      int       // limit less one at the last edge 429; 0: none (see probingLocked)
	probes    int       // slow increases from edge up since the last decrease
	cooldown  time.Time // the limit does not grow before this
	paceUntil time.Time // starts are paced until this, after a decrease
	paceNext  time.Time // the next paced start
	paceEvery time.Duration
	history   [historyLen]limitChange // ring of the latest limit changes
	changes   int                     // limit changes recorded, ever

	avgTokens  float64 // EWMA of billed tokens per success; valid if hasTokens
	hasTokens  bool
	avgLatency float64 // EWMA of success latency in nanoseconds; valid if hasLatency
	hasLatency bool
}

// limitChange is one entry of the limit history: at at, the limit changed
// from limit.
type limitChange struct {
	at    time.Time
	limit int
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
	slowStart := cfg.Start == 0 && !cfg.Fixed
	cfg = cfg.withDefaults()
	l := &AIMD{
		cfg:       cfg,
		newTimer:  realTimer,
		limit:     cfg.Start,
		minLimit:  cfg.Start,
		maxLimit:  cfg.Start,
		slowStart: slowStart,
	}
	if cfg.RPM > 0 {
		perSecond := float64(cfg.RPM) / 60
		l.rpm = rate.NewLimiter(rate.Limit(perSecond), max(1, int(perSecond)))
	}
	if cfg.TPM > 0 && cfg.PaceTPM {
		perSecond := float64(cfg.TPM) / 60
		burst := max(int64(perSecond), cfg.EstimatedTokens)
		l.tpm = rate.NewLimiter(rate.Limit(perSecond), int(min(burst, math.MaxInt32)))
	}
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
	if l.queue.Len() == 0 && l.canStartLocked(now) {
		l.inFlight++
		l.pacedLocked(now)
		started := l.stampLocked(now)
		l.mu.Unlock()
		return l.pace(ctx, started)
	}
	w := &waiter{ready: make(chan struct{}), wake: make(chan struct{}, 1)}
	w.elem = l.queue.PushBack(w)
	for {
		// Only the head of the line watches the gate's clock; the others
		// wait for their turn and are woken one at a time.
		timer, stop := (<-chan time.Time)(nil), noStop
		if hold := l.holdLocked(now); l.queue.Front() == w.elem && now.Before(hold) {
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

// pace holds a granted slot until RPM/TPM pacing and the gate allow the
// call to start. Without pacing the gate was checked when the slot was
// granted and the call starts at once.
func (l *AIMD) pace(ctx context.Context, started time.Time) (time.Time, error) {
	if l.rpm == nil && l.tpm == nil {
		return started, nil
	}
	now := l.cfg.Now()
	at := now // earliest start pacing allows
	var reserved []*rate.Reservation
	reserve := func(lim *rate.Limiter, n int) {
		if n > lim.Burst() {
			lim.SetBurstAt(now, n)
		}
		r := lim.ReserveN(now, n)
		reserved = append(reserved, r)
		if t := now.Add(r.DelayFrom(now)); t.After(at) {
			at = t
		}
	}
	if l.rpm != nil {
		reserve(l.rpm, 1)
	}
	if l.tpm != nil {
		reserve(l.tpm, l.tokensPerCall())
	}
	for {
		l.mu.Lock()
		until := at
		if l.gate.After(until) {
			until = l.gate
		}
		if !now.Before(until) {
			started := l.stampLocked(now)
			l.mu.Unlock()
			return started, nil
		}
		l.mu.Unlock()
		timer, stop := l.newTimer(until.Sub(now))
		select {
		case <-timer:
			now = l.cfg.Now()
		case <-ctx.Done():
			stop()
			now = l.cfg.Now()
			for _, r := range reserved {
				r.CancelAt(now)
			}
			l.mu.Lock()
			l.releaseLocked()
			l.dispatchLocked(now)
			l.mu.Unlock()
			return time.Time{}, ctx.Err()
		}
	}
}

// tokensPerCall is the TPM pacing reservation: the measured average tokens
// per call, or Config.EstimatedTokens before any has been measured.
func (l *AIMD) tokensPerCall() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.cfg.EstimatedTokens
	if l.hasTokens {
		n = int64(math.Ceil(l.avgTokens))
	}
	return int(min(max(n, 1), math.MaxInt32))
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
		if now.Before(l.holdLocked(now)) {
			l.wakeHeadLocked() // the new head must take over the gate's clock
		}
	}
}

// Succeeded reports that the call started at started returned a result
// billed tokens tokens (input plus output; 0 if unknown). It frees the
// call's slot and may grow the limit.
func (l *AIMD) Succeeded(started time.Time, tokens int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.cfg.Now()
	l.releaseLocked()
	l.observeLocked(now.Sub(started), tokens)
	if !l.cfg.Fixed {
		ceiling := l.ceilingLocked()
		if l.limit > ceiling {
			l.setLimitLocked(ceiling)
		}
		switch {
		case l.slowStart:
			top := min(ceiling, max(l.cfg.Start, l.cfg.Ceiling/slowStartShare))
			if l.limit < top {
				l.setLimitLocked(min(top, l.limit+l.cfg.Increase))
				l.increases++
			}
			l.slowStart = l.limit < top
		case started.After(l.decrease) && !l.coolingLocked(now):
			l.streak++
			need := l.limit
			probing := l.probingLocked()
			if probing {
				need *= probeStreaks
			}
			if l.streak >= need {
				l.streak = 0
				if l.limit < ceiling {
					if probing {
						l.probes++
					}
					l.setLimitLocked(min(ceiling, l.limit+l.cfg.Increase))
					l.increases++
				}
			}
		}
	}
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
	if retryAfter > 0 {
		if until := now.Add(retryAfter); until.After(l.gate) {
			l.gate = until
			l.wakeHeadLocked()
		}
	}
	if !l.cfg.Fixed && started.After(l.decrease) && (!l.sameRoundTripLocked(now) || l.escalatesLocked(retryAfter)) {
		l.decreaseLocked(now, retryAfter)
	}
	l.dispatchLocked(now)
}

// decreaseLocked answers a congestion event at now (see AIMD).
func (l *AIMD) decreaseLocked(now time.Time, retryAfter time.Duration) {
	// Stamp the event no earlier than any start handed out so far, so
	// every call already started compares as part of this event even when
	// the clock has not moved since.
	l.decrease = now
	if l.lastStart.After(now) {
		l.decrease = l.lastStart
	}
	l.decreases++
	l.streak = 0
	next := int(math.Floor(float64(l.limit) * l.cfg.DecreaseFactor))
	if l.edgeLocked(retryAfter) {
		// An edge 429: the quota frees a slot within a round trip, so the
		// limit only just overshot it. Go back to where the limit was
		// before the overshoot began.
		back := l.limitAtLocked(now.Add(-time.Duration(lagRoundTrips * l.avgLatency)))
		next = max(next, min(back, int(math.Floor(float64(l.limit)*edgeBackoff))))
		l.edge = l.limit - l.cfg.Increase
		l.lastEdge = true
	} else {
		l.edge = 0
		l.lastEdge = false
	}
	l.slowStart, l.probes = false, 0
	l.setLimitLocked(max(l.cfg.Floor, next))
	resume := l.gate
	if now.After(resume) {
		resume = now
	}
	cooldown := l.cfg.Cooldown
	if l.hasLatency {
		cooldown = min(cooldown, time.Duration(cooldownRoundTrips*l.avgLatency))
		// Spread the first calls after the decrease over a round trip
		// rather than letting them all through when the gate opens.
		l.paceEvery = time.Duration(l.avgLatency / float64(l.limit))
		l.paceNext = resume
		l.paceUntil = resume.Add(cooldown)
	}
	l.cooldown = resume.Add(cooldown)
}

// edgeLocked reports whether a 429 with retryAfter is an edge 429: the
// quota frees a slot within a measured round trip.
func (l *AIMD) edgeLocked(retryAfter time.Duration) bool {
	return l.hasLatency && retryAfter > 0 && float64(retryAfter) <= l.avgLatency
}

// escalatesLocked reports whether a 429 with retryAfter tells of more than
// the last decrease answered: that was an edge 429, this one is not (the
// quota fell just after the limit overshot it).
func (l *AIMD) escalatesLocked(retryAfter time.Duration) bool {
	return l.lastEdge && !l.edgeLocked(retryAfter)
}

// sameRoundTripLocked reports whether now is within one measured round
// trip of the last decrease: a 429 then belongs to the event that decrease
// answered, whatever its call's start, because a window-counted quota keeps
// refusing until the window has drained.
func (l *AIMD) sameRoundTripLocked(now time.Time) bool {
	return l.hasLatency && !l.decrease.IsZero() && float64(now.Sub(l.decrease)) < l.avgLatency
}

// probingLocked reports whether the limit is at or above the level of the
// last edge 429 and still within the probeSteps slow steps from there.
func (l *AIMD) probingLocked() bool {
	return l.edge > 0 && l.limit >= l.edge && l.probes < probeSteps
}

// limitAtLocked returns the limit in force at t, or the oldest limit the
// history remembers when t is older than that.
func (l *AIMD) limitAtLocked(t time.Time) int {
	v := l.limit
	for i := 1; i <= min(l.changes, historyLen); i++ {
		c := l.history[(l.changes-i)%historyLen]
		if !c.at.After(t) {
			return v // the limit c set, in force from c.at until the next change
		}
		v = c.limit // the limit before c
	}
	return v
}

// Failed reports any other outcome of the call started at started (5xx,
// timeout, permanent error, cancellation). It frees the slot; the limit and
// the streak are unchanged.
func (l *AIMD) Failed(started time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked()
	l.dispatchLocked(l.cfg.Now())
}

// SetLimit sets the limit to n clamped to [Floor, ceiling], the ceiling
// being the TPM-derived one when it applies. Use it to start from a limit
// learned by an earlier run. It resets the streak and is counted neither as
// an increase nor as a decrease.
func (l *AIMD) SetLimit(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ceiling := l.cfg.Ceiling
	if !l.cfg.Fixed {
		ceiling = l.ceilingLocked()
	}
	l.setLimitLocked(min(max(n, l.cfg.Floor), ceiling))
	l.streak = 0
	l.slowStart = false
	l.dispatchLocked(l.cfg.Now())
}

// Limit returns the current limit on calls in flight.
func (l *AIMD) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit
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
	return l.gate
}

// Stats is a point-in-time view of an AIMD limiter, for observability.
type Stats struct {
	Limit    int // current limit, calls in flight
	InFlight int // slots held
	Waiting  int // Acquire calls queued for a slot
	// Ceiling is the effective ceiling: Config.Ceiling, or the TPM-derived
	// one when lower.
	Ceiling            int
	MinLimit, MaxLimit int   // lowest and highest limit held so far
	Increases          int64 // additive increases applied
	// Decreases counts congestion events, each answered by one
	// multiplicative decrease (which leaves a limit at Floor unchanged).
	Decreases  int64
	GateUntil  time.Time     // see GateUntil
	AvgTokens  float64       // smoothed billed tokens per success; 0 before the first
	AvgLatency time.Duration // smoothed latency of successes; 0 before the first
}

// Snapshot returns the limiter's current Stats.
func (l *AIMD) Snapshot() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Stats{
		Limit:      l.limit,
		InFlight:   l.inFlight,
		Waiting:    l.queue.Len(),
		Ceiling:    l.cfg.Ceiling,
		MinLimit:   l.minLimit,
		MaxLimit:   l.maxLimit,
		Increases:  l.increases,
		Decreases:  l.decreases,
		GateUntil:  l.gate,
		AvgTokens:  l.avgTokens,
		AvgLatency: time.Duration(l.avgLatency),
	}
	if !l.cfg.Fixed {
		s.Ceiling = l.ceilingLocked()
	}
	return s
}

func (l *AIMD) canStartLocked(now time.Time) bool {
	return l.inFlight < l.limit && !now.Before(l.holdLocked(now))
}

// holdLocked is the time before which no call starts: the retry-after
// gate, or while pacing after a decrease, the next paced start.
func (l *AIMD) holdLocked(now time.Time) time.Time {
	if now.Before(l.paceUntil) && l.paceNext.After(l.gate) {
		return l.paceNext
	}
	return l.gate
}

// pacedLocked spaces the next paced start after one starting now.
func (l *AIMD) pacedLocked(now time.Time) {
	if now.Before(l.paceUntil) {
		if l.paceNext.Before(now) {
			l.paceNext = now
		}
		l.paceNext = l.paceNext.Add(l.paceEvery)
	}
}

// dispatchLocked grants slots to waiters in line order while slots are free
// and the gate has passed.
func (l *AIMD) dispatchLocked(now time.Time) {
	granted := false
	for l.canStartLocked(now) {
		e := l.queue.Front()
		if e == nil {
			return
		}
		w := l.queue.Remove(e).(*waiter)
		l.inFlight++
		l.pacedLocked(now)
		w.started = l.stampLocked(now)
		w.granted = true
		close(w.ready)
		granted = true
	}
	if granted && now.Before(l.holdLocked(now)) {
		l.wakeHeadLocked() // the new head must watch the pacing clock
	}
}

// stampLocked returns the start time for a call starting now: now, nudged
// a nanosecond past the last decrease if the clock has not moved beyond it
// (coarse or fake clocks), so that a call started after a decrease always
// compares after it.
func (l *AIMD) stampLocked(now time.Time) time.Time {
	if !now.After(l.decrease) {
		now = l.decrease.Add(time.Nanosecond)
	}
	if now.After(l.lastStart) {
		l.lastStart = now
	}
	return now
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

func (l *AIMD) setLimitLocked(n int) {
	if n != l.limit {
		l.history[l.changes%historyLen] = limitChange{l.cfg.Now(), l.limit}
		l.changes++
	}
	l.limit = n
	l.minLimit = min(l.minLimit, n)
	l.maxLimit = max(l.maxLimit, n)
}

func (l *AIMD) coolingLocked(now time.Time) bool {
	return now.Before(l.cooldown)
}

// observeLocked folds one success into the smoothed latency and tokens.
func (l *AIMD) observeLocked(latency time.Duration, tokens int64) {
	lat := float64(max(latency, 0))
	if l.hasLatency {
		l.avgLatency += ewmaWeight * (lat - l.avgLatency)
	} else {
		l.avgLatency, l.hasLatency = lat, true
	}
	if tokens <= 0 {
		return
	}
	if l.hasTokens {
		l.avgTokens += ewmaWeight * (float64(tokens) - l.avgTokens)
	} else {
		l.avgTokens, l.hasTokens = float64(tokens), true
	}
}

// ceilingLocked returns the effective ceiling: Config.Ceiling, lowered to
// the Little's-law bound TPM*W/(60s*T) once latency W and tokens T have been
// measured, and never below Floor.
func (l *AIMD) ceilingLocked() int {
	c := l.cfg.Ceiling
	if l.cfg.TPM <= 0 || !l.hasTokens || !l.hasLatency {
		return c
	}
	bound := float64(l.cfg.TPM) * l.avgLatency / (l.avgTokens * float64(time.Minute))
	// The epsilon keeps an exact quotient such as 2 from flooring to 1
	// through rounding in the averages.
	if bound = math.Floor(bound + 1e-9); bound < float64(c) {
		c = max(l.cfg.Floor, int(bound))
	}
	return c
}
