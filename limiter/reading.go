package limiter

import (
	"math"
	"time"
)

// What the law reads from the quota's answers: the ring of recent starts
// and what came of each, the rate the quota admitted, the window its
// retry delays and reopenings show and how long a rate is held to be
// proven, the budgets a 429 names, whether a refusal met a cap on calls
// in progress, and the smoothed latency and tokens. Each is a pure
// function of the law's state and the times it is given, like the rest
// of the law.

// sentCall is one start: its stamp, the calls in flight beside it and
// what came of it.
type sentCall struct {
	at      time.Time
	others  int
	size    int64   // the call's size as its caller gave it, 0 if unknown (see tokens.go)
	weight  float64 // the mean calls it counts as in the rate (see law.weight)
	outcome outcome
}

// outcome is what came of a start, as far as the law knows.
type outcome uint8

const (
	pending outcome = iota
	admitted
	refusedCall
	failedCall
)

// find returns the ring's entry for the start stamped started, nil if it
// is no longer there.
func (w *law) find(started time.Time) *sentCall {
	for i := 1; i <= min(w.nSent, sentRing); i++ {
		c := &w.sent[(w.nSent-i)%sentRing]
		if c.at.Equal(started) {
			return c
		}
		if c.at.Before(started) {
			break
		}
	}
	return nil
}

// admittedFrom counts the starts since from that the quota admitted:
// those that succeeded, and those still in flight that started before
// answered (a refusal comes back within its own round trip). Each counts
// at its weight, in the rate's unit when starts are paced in tokens (see
// law.weight).
func (w *law) admittedFrom(from, answered time.Time) float64 {
	n := 0.0
	for i := 1; i <= min(w.nSent, sentRing); i++ {
		c := w.sent[(w.nSent-i)%sentRing]
		if c.at.Before(from) {
			break
		}
		if c.outcome == admitted || c.outcome == pending && c.at.Before(answered) {
			n += c.weight
		}
	}
	return n
}

// refusedBeside reports whether the call started at started, just
// refused, started within a quarter of the paced interval after a call
// the quota did not refuse (admitted, or still in flight: a refusal
// comes back within its own round trip): it refused a burst of two, not
// a rate. A token bucket of a one-call burst does so every time pacing
// lets two calls go together (see paceBurst).
func (w *law) refusedBeside(started time.Time) bool {
	from := started.Add(-w.interval() / 4)
	self := false
	for i := 1; i <= min(w.nSent, sentRing); i++ {
		c := &w.sent[(w.nSent-i)%sentRing]
		switch {
		case c.at.After(started):
			continue
		case c.at.Before(from):
			return false
		case !self && c.at.Equal(started) && c.outcome == refusedCall:
			self = true // the refused call itself
		case c.outcome != refusedCall && c.outcome != failedCall:
			return true
		}
	}
	return false
}

// othersAt returns the calls that were in flight beside the call started
// at started, or fallback if it is no longer in the ring.
func (w *law) othersAt(started time.Time, fallback int) int {
	if c := w.find(started); c != nil {
		return c.others
	}
	return fallback
}

// reopened folds in a probe, started at started after a backoff, that
// the quota admitted: it was spent and is open again. What it admitted
// from the last such reopening to this one is all it grants over that
// span (a fixed window's count per window, when the 429s did not say
// when it would reset): the rate goes just under it. With no budget
// named, not over a span shorter than half the longest retry delay
// given, which the window is about (at most two seconds over it, when
// delays are rounded up to whole seconds and sent a second late): two
// probes 7 s apart across a spent 60 s window (an unnamed TPM minute)
// read 1.9 calls a second where the quota grants 87, and the stairs
// took ten minutes to climb back (seed 2545208588: 0.248 -> 0.757). A
// span of one window is still read: a whole delay as the bound stopped
// a fixed 8.4 s window's reading (its delays 10 s) and it refused three
// times as often. Under a name the reading stays: it is what corrects a
// token budget paced too loosely (a named TPM minute fell .465 -> .381
// without it).
func (w *law) reopened(started time.Time) {
	prev := w.reopenedAt
	w.reopenedAt = started
	if prev.IsZero() {
		n := w.admittedFrom(w.firstStart, started)
		if c := w.find(started); c != nil && c.outcome == admitted {
			n -= c.weight // the probe itself: the quota's, not the burst's
		}
		w.readWindowReopened(started, n)
		w.reopenedAfterSlowStart(started, n)
		w.topReopened()
	}
	span := started.Sub(prev)
	if prev.IsZero() || w.rate == 0 || span > reopenLags*w.answerLag() || span < 2*w.latency() {
		return
	}
	if span <= 2*w.answerLag() {
		// The quota refilled within span: its window is at least that
		// long when the 429s did not say.
		w.window = max(w.window, min(span, maxWindow))
	}
	n := w.admittedFrom(prev, started)
	named := w.namedRPM > 0 || w.namedTPM > 0
	if n < cycleMinSuccesses || (!named && 2*span < w.longestDelay) {
		return
	}
	if budget := float64(n) / span.Seconds(); budget*eventBackoff < w.rate {
		w.refused = budget // paced at it, the quota is spent by a window's end
		w.rate = max(budget*eventBackoff, w.minRate())
		w.safe = min(w.safe, w.rate)
		w.fitLimit()
	}
}

// reopenedAfterSlowStart folds in the first reopening, at started, of a
// quota that only slow start's burst (n calls admitted) has spent, when its 429s rounded
// their retry delays to whole seconds: those read the window as long as
// the longest (up to a window late: 3 s for a 2 s window), and the rate
// slow start's 429 set as what was admitted over it, too low by as much.
// A sliding window lets the burst's first call go a window after it was
// sent, so once a probe has been refused (the window still spent) and
// the next admitted, the window is no longer than the time since the
// first start, and what the quota admitted since then (the probe left
// out) is no more than it grants over that time: the rate goes up to
// just under it, and the window down to that time. A token bucket admits
// the first probe, so it gives no reading. A fixed window opens at its
// boundary: when the first start came late in a window, the time since
// it is shorter than the window and the rate read too high, which the
// next 429, at that window's end, corrects (TestLaw_fixedWindowPhases
// measures the cost over the phases).
func (w *law) reopenedAfterSlowStart(started time.Time, n float64) {
	since := started.Sub(w.firstStart)
	if w.bounded || w.backoffs < 2 || w.rate == 0 || w.firstStart.IsZero() || since < 2*w.latency() || since >= w.window {
		return
	}
	w.window = since
	if n >= cycleMinSuccesses {
		w.rate = max(w.rate, min(n/since.Seconds()*eventBackoff, w.maxRate()))
		w.fitLimit()
	}
}

// topReopened folds in the first reopening of a quota that only slow
// start's burst has spent, when its 429 showed no window slow start
// outlasted (bare or rounded delays): the first probe, sent a backoff
// after the 429, was admitted, so the quota freed room within about a
// round trip of being spent. A window slow start spent within its own
// length frees nothing until that length has passed since the first
// start, and refuses the probes until then (a 200/s log of a second
// with 0.1 s calls); one that frees room at once is a bucket, or a log
// whose window slow start outlasted, and slow start's last round trip
// then did not spend a window's budget alone: the stairs climb toward
// it (see climbTowardTop).
func (w *law) topReopened() {
	if w.slowTop > 0 || w.slowTopSeen <= 0 || w.bounded || !w.firstFromSlowStart || !w.refusedProbe.IsZero() {
		return
	}
	w.slowTop = w.slowTopSeen
}

// capped reports whether a 429 of a call started at started beside
// others calls in flight met a cap on calls in progress rather than a
// rate: the cap binds and the call started at it, or others is well
// above what the rate carries on average, or the last two events refused
// at the same level, or slow start's refusal did (slow start fills
// whatever binds, and a paced rate seldom meets it again at the very
// same level; the rate may carry a tenth more by a smoothed latency,
// once it climbed toward slow start's top, and what counts is the rate
// the law sent when it sent less than it paced: see sentCarried). byWindow: the call was sent
// by the known window, which starts calls up to catchUpSpeed times as
// fast as the rate (see catchup.go). Never when a call started shortly before was admitted
// with as many calls beside it (see admittedBeside).
func (w *law) capped(started time.Time, others int, byWindow bool) bool {
	if w.minuteSent(started) {
		return false
	}
	carried := w.rate * w.latency().Seconds()
	if byWindow {
		carried *= catchUpSpeed // sending by the window, calls start up to that fast
	}
	capBinds := w.capLevel > 0 && w.limit <= int(w.capLevel)
	met := capBinds && others+1 >= w.limit ||
		float64(others) >= capShare*carried ||
		float64(others) >= capEqualShare*carried && others == w.lastOthers[0] && others == w.lastOthers[1] ||
		float64(others)*capEqualShare >= min(carried, w.sentCarried(started, others)) && others == w.firstOthers
	return met && !w.admittedBeside(started, others)
}

// sentCarried is the calls in flight that what the law actually sent
// carries, for a refusal of the call started at started beside others
// calls in flight: the calls started over the round trip before it
// (Little's law), refused ones included. The paced rate may run well
// above it: a cap on calls in progress refuses every call past its level
// and the law's ramp restarts at each 429, so the starts lag the
// schedule while the limit leaves room (a cap of 123 calls of 240 ms
// refused at 123 beside, event after event, while the paced rate carried
// 214 calls and the starts 121: read as a rate until 93% of the run, or
// never). MaxFloat64 when the law's own limit held the calls in flight:
// the level is then the law's, not the server's, and what it sent says
// nothing of the server.
func (w *law) sentCarried(started time.Time, others int) float64 {
	if others+1 >= w.limit {
		return math.MaxFloat64
	}
	from := started.Add(-w.latency())
	n := 0
	for i := 1; i <= min(w.nSent, sentRing); i++ {
		c := &w.sent[(w.nSent-i)%sentRing]
		if c.at.After(started) {
			continue
		}
		if !c.at.After(from) {
			break
		}
		n++
	}
	return float64(n)
}

// admittedBeside reports whether a call started within capLookback round
// trips before started was admitted with at least others calls in flight
// beside it. A cap on calls in progress refuses every call that finds it
// full, so a refusal beside fewer calls than one admitted just before
// met something else: a token bucket of a small burst refuses two calls
// started in the same instant whatever else is in flight, and read as a
// cap of two or three calls it held the law to a crawl.
func (w *law) admittedBeside(started time.Time, others int) bool {
	from := started.Add(-capLookback * w.latency())
	for i := 1; i <= min(w.nSent, sentRing); i++ {
		c := &w.sent[(w.nSent-i)%sentRing]
		if c.at.Before(from) {
			return false
		}
		if c.outcome == admitted && c.others >= others && !c.at.After(started) {
			return true
		}
	}
	return false
}

// answerLag is how long a rate is held before it counts as safe: a quota
// counted over a window answers an overshoot only once the window has
// filled with it, so a rate is proven only after a while. It is
// probeStairRoundTrips round trips, the window of a per-minute quota with
// calls of several seconds.
func (w *law) answerLag() time.Duration {
	return max(time.Duration(probeStairRoundTrips*w.avgLatency), w.window)
}

// admittedRate is the rate the quota admitted over the answer lag up to
// t (a refusal of a call started at refusedAt having just come), counted
// from no earlier than gate, when no call started before it: idle time
// says nothing about the quota, nor does time the runner's overload hold
// kept the calls back. ok is false when that leaves too little
// to read a rate from.
func (w *law) admittedRate(t, refusedAt, gate time.Time, retryAfter time.Duration) (r float64, ok bool) {
	if since := t.Sub(gate); w.gateExact && !uncertain(retryAfter) && since > 2*w.latency() && since <= max(2*w.window, w.answerLag()) {
		// The quota opened at gate, as a retry delay said; it is spent
		// again now, within about a window, and opens at t+retryAfter:
		// what it admitted since gate is all it grants over that span
		// (a fixed window's count per window, exactly).
		if n := w.admittedFrom(gate, refusedAt); n >= cycleMinSuccesses {
			return float64(n) / t.Add(retryAfter).Sub(gate).Seconds(), true
		}
	}
	lag := w.answerLag()
	from := t.Add(-lag)
	if gate.After(from) {
		from = gate
	}
	if w.firstStart.After(from) {
		from = w.firstStart
	}
	// Time the overload hold kept the calls back offered the quota none;
	// nor did time an exact retry delay held them: the quota was spent by
	// calls before it, and a rate read over it would read a per-minute
	// window's half-minute delay as a quota of a call a second.
	span := t.Sub(from) - w.heldWithin(from, t) - w.gatedWithin(from, t)
	n := w.admittedFrom(from, refusedAt)
	if span < lag/2 || n < cycleMinSuccesses {
		return 0, false
	}
	return float64(n) / span.Seconds(), true
}

// resetAt folds in the instant an exact retry delay said the quota
// opens again, one per congestion event. A fixed window opens at its
// boundaries: when three such instants fall on one lattice (each span a
// whole number of the shortest), its spacing is the window. Not when that
// is over four times the longest delay seen (not the window, which a
// lattice read before may have lengthened: each would allow the next
// four times longer): a fixed
// window's delays run up to its length, while a sliding log's instants
// fall on some long lattice now and then by chance, and a window read
// far too long holds every rate for it (see answerLag).
func (w *law) resetAt(at time.Time) {
	d1, d2 := at.Sub(w.resets[0]), w.resets[0].Sub(w.resets[1])
	three := !w.resets[1].IsZero()
	w.resets = [2]time.Time{at, w.resets[0]}
	if !three || d1 <= 0 || d2 <= 0 {
		return
	}
	short, long := min(d1, d2), max(d1, d2)
	k := math.Round(float64(long) / float64(short))
	if math.Abs(float64(long)-k*float64(short)) <= latticeShare*float64(long) && short <= latticeDelays*w.longestDelay {
		w.window = max(w.window, min(short, maxWindow))
	}
}

// uncertain reports whether a 429's retry delay leaves the wait unknown:
// none was given, or it is a whole number of seconds, rounded (Gemini's
// per-minute quotas send 26-59 s where a second or two would do).
func uncertain(retryAfter time.Duration) bool {
	return retryAfter%time.Second == 0
}

// sentRate is the rate of starts over the last round trip, each
// counted at its weight (see law.weight), the time the runner's overload
// hold kept the calls back left out (see heldWithin): a call the hold
// kept back was not the law's to send. It is at least Floor calls a
// round trip (see sentCalls).
func (w *law) sentRate(t time.Time) float64 {
	return max(w.sentCalls(t), w.minRate())
}

// sentCalls is sentRate with no floor: below a call per round trip, a
// paced rate is proven by the calls it sends, and a floor of one would
// prove it with none.
func (w *law) sentCalls(t time.Time) float64 {
	span := w.sentSpan()
	free := max(span-w.heldWithin(t.Add(-span), t), span/4)
	n := 0.0
	for i := 1; i <= min(w.nSent, sentRing); i++ {
		c := w.sent[(w.nSent-i)%sentRing]
		if c.at.Before(t.Add(-span)) {
			break
		}
		n += c.weight // paced in tokens, a call counts its weight
	}
	r := n / free.Seconds()
	if w.rate > 0 && w.tokensBind() && !w.tat.Before(t.Add(-2*paceBurst*w.interval())) {
		// Weights vary call to call: their sum over a round trip swings
		// by a sixth while the schedule sends at the rate. A schedule
		// not behind now holds the starts back: it sends at the rate.
		r = max(r, w.rate)
	}
	return r
}

// sentSpan is the span the sent rate is read over: a round trip, or
// the time the paced rate takes to send sentSpanCalls when longer. At a
// call or two per round trip, the starts within one swing between one
// and two, and a law paced at 0.9 calls a round trip was read as sending
// below it half the time: its rate was never proven and never grew.
func (w *law) sentSpan() time.Duration {
	span := w.latency()
	if w.rate > 0 {
		span = max(span, time.Duration(sentSpanCalls/w.rate*float64(time.Second)))
	}
	return span
}

// latency is the smoothed round trip, at least a microsecond.
func (w *law) latency() time.Duration {
	return max(time.Duration(w.avgLatency), time.Microsecond)
}

// limitLatency is the round trip the limit on calls in flight carries
// the paced rate with (see fitLimit): the smoothed one, or the slower
// average when higher. Under a heavy tail (thinking models), a run of
// quick answers drags the eighth-weight average far below the mean while
// the slow calls are still out: a limit fitted to it would hold calls
// back that the rate admits. The slow average moves a few percent where
// the other swings by a quarter, and a latency that grows with load still
// raises the limit at once through the quick one.
func (w *law) limitLatency() time.Duration {
	return max(w.latency(), time.Duration(w.slowLatency))
}

// observe folds one success into the smoothed latency and tokens.
func (w *law) observe(latency time.Duration, tokens int64) {
	lat := float64(max(latency, 0))
	if w.hasLatency {
		w.avgLatency += ewmaWeight * (lat - w.avgLatency)
		w.slowLatency += slowLatencyWeight * (lat - w.slowLatency)
	} else {
		w.avgLatency, w.slowLatency, w.hasLatency = lat, lat, true
	}
	if tokens <= 0 {
		return
	}
	// Tokens per call vary from item to item far more than latency moves:
	// a TPM budget paced with the latency's eighth-weight average swung
	// the rate by a tenth call to call and overran the quota. The mean
	// of all calls so far, then a slow average, holds still.
	w.nTokens++
	a := max(1/float64(w.nTokens), tokenWeight)
	d := float64(tokens) - w.avgTokens
	w.avgTokens += a * d
	w.varTokens = (1 - a) * (w.varTokens + a*d*d)
	w.hasTokens = true
}

// ceiling returns the effective ceiling: Config.Ceiling, lowered to the
// Little's-law bound TPM*W/(60s*T) once latency W and tokens T have been
// measured, and never below Floor.
func (w *law) ceiling() int {
	c := w.cfg.Ceiling
	if w.cfg.TPM <= 0 || !w.hasTokens || !w.hasLatency {
		return c
	}
	bound := float64(w.cfg.TPM) * w.avgLatency / (w.avgTokens * float64(time.Minute))
	// The epsilon keeps an exact quotient such as 2 from flooring to 1
	// through rounding in the averages.
	if bound = math.Floor(bound + 1e-9); bound < float64(c) {
		c = max(w.cfg.Floor, int(bound))
	}
	return c
}

// tokensPerCall is the TPM pacing reservation: the measured average tokens
// per call, or Config.EstimatedTokens before any has been measured.
func (w *law) tokensPerCall() int {
	n := w.cfg.EstimatedTokens
	if w.hasTokens {
		n = int64(math.Ceil(w.avgTokens))
	}
	return int(min(max(n, 1), math.MaxInt32))
}

// readFirstEvent reads the first congestion event's 429 at t, of the
// call started at started with retry delay retryAfter (wasSlowStart: it
// ended slow start). Slow start sends in bursts, which a small burst
// allowance refuses below the quota's rate: no bound learned, so the rate
// refused is forgotten. But what the quota admitted over its window (or
// since the first start, if that is longer) is about its rate, and caps
// the rate lowerRate set. An exact delay longer than slow start lasted
// says when the quota opens again: a window's quota, spent since the
// first start, opens a window after it.
func (w *law) readFirstEvent(t, started time.Time, retryAfter time.Duration, wasSlowStart bool) {
	if wasSlowStart {
		w.readWindow(started, retryAfter)
	}
	if !uncertain(retryAfter) && t.Sub(w.firstStart) < retryAfter {
		w.window = max(w.window, min(t.Add(retryAfter).Sub(w.firstStart), maxWindow))
		w.startReplay(t.Add(retryAfter))
	}
	span := max(t.Sub(w.firstStart), w.window)
	if n := w.admittedFrom(t.Add(-span), started); n >= cycleMinSuccesses && span >= 2*w.latency() {
		w.rate = min(w.rate, float64(n)/span.Seconds())
		w.measured = true
	}
	if wasSlowStart && w.window > 0 && t.Sub(w.firstStart) >= 2*w.window {
		// Slow start outlasted twice the window a retry delay
		// showed: its last round trips did not spend a window's
		// budget alone. (Read after a shorter one, a 200/s log
		// of a second with 0.1 s calls, it overshot: 1.06-1.14%
		// 429s in TestLaw_nights_demandIsNoQuota.)
		w.slowTop = w.topAdmitted(started)
	} else if wasSlowStart && uncertain(retryAfter) {
		// Bare or rounded: the first reopening may show the
		// window slow start outlasted (see topReopened).
		w.slowTopSeen = w.topAdmitted(started)
	}
	w.refused = 0
}

// topAdmitted is the rate the quota admitted the calls started over the
// round trip before started at (a call still in flight that started
// before a refused one was admitted: refusals come back first), 0 when
// that round trip holds too few calls to read.
func (w *law) topAdmitted(started time.Time) float64 {
	lat := w.latency()
	n := w.admittedFrom(started.Add(-lat), started)
	if n < cycleMinSuccesses || lat <= 0 {
		return 0
	}
	return n / lat.Seconds()
}
