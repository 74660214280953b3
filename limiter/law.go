package limiter

import (
	"time"
)

// law is the control law on its own: the limit, the paced rate, the
// retry-after gate and everything they are derived from. It is pure in the
// manner of golang.org/x/time/rate: every event carries its time t, and a
// method only turns the state and the event into the new state. It holds
// no lock, starts no timer and never reads a clock, so a test or a
// simulation drives it through exact instants. AIMD wraps it with the
// waiter queue, the lock and the clock.
type law struct {
	cfg Config // with defaults applied; cfg.Now is not read

	limit     int  // calls in flight
	slowStart bool // no Start was given and no 429 has come yet
	// braked: successes that filled slow start's brake, the first at
	// brakeFrom (see slowGrow).
	braked    int
	brakeFrom time.Time
	rate      float64 // paced starts per second; 0: not pacing yet
	// safe is the highest rate held for an answer lag (see answerLag)
	// with no 429 since the quota last fell: the quota admits at least
	// that much. refused is the rate last refused, 0 if none is known;
	// the quota's rate lies between. The current rate is held since
	// probeFrom; held counts the rates found safe since the last 429.
	safe, refused float64
	probeFrom     time.Time
	held          int
	// calm: the stairs above a safe rate refused in a row at their
	// first step; the safe rate is held reprobeLags<<calm answer lags
	// before the next.
	calm int
	// bounded: a 429 other than slow start's first has come, at a paced
	// rate.
	bounded bool
	// slowTop: what slow start's last round trip before its first 429
	// was admitted at, 0 if none was read (see climbTowardTop).
	// slowTopSeen: that rate read at a bare or rounded 429 and not yet
	// trusted, until the quota's first reopening shows a window shorter
	// than slow start (see topReopened).
	slowTop, slowTopSeen float64
	// startRate: the rate an earlier run found the quota admits
	// (Config.StartRate), 0 if none: evidence this run need not find
	// again (see learnedRate).
	startRate float64
	stairs    int // stairs up since the last 429
	// peak: the safe rate before the quota last fell, 0 once the rate
	// is back at it. A quota that fell (a drift, a neighbour's burst)
	// often comes back: the stairs climb to it faster.
	peak float64
	// peakBound: the rate last refused above peak before the quota
	// fell, 0 if none was known (see fell).
	peakBound float64
	eventRate float64 // the rate when the current event began
	// namedRPM and namedTPM are the per-minute budgets the last 429
	// that named any named (see nameQuota); 0 if none.
	namedRPM, namedTPM int64
	// lastRPM and lastTPM are the budgets last named, kept when the cap
	// lapses; namedMoved: 429s of this run named different ones, so the
	// quota is live and a named budget only says where it was then.
	lastRPM, lastTPM int64
	namedMoved       bool
	// measured: the current event set the rate from what the quota
	// admitted, which the event's other refusals do not lower further.
	measured bool
	tat      time.Time // pacing: the theoretical start time of the next call
	// capLevel: the calls in flight beside the refused call at the last
	// event that met a cap on calls in progress, growing back while it
	// holds calls back (see onSuccess); 0 before any. It holds such a cap,
	// which a rate cannot.
	capLevel float64
	capEdge  float64 // capLevel as the last event set it
	// admittedSince: calls admitted since the last congestion event,
	// which pay for a look above the estimate (see mayLook).
	admittedSince int
	// lastOthers: the calls in flight beside the refused call of the last
	// two congestion events. A cap on calls in progress refuses at the
	// same level event after event; a rate at any.
	lastOthers [2]int
	// firstOthers: the calls in flight beside the call slow start's 429
	// refused; -1 before it.
	firstOthers int

	decrease  time.Time // stamp of the last congestion event; zero before the first
	lastStart time.Time // latest start stamp handed out
	gate      time.Time // no call starts before this
	gateExact bool      // the gate is an exact retry delay's
	// resets: where the exact retry delays of the last two congestion
	// events said the quota opens again, latest first (see resetAt).
	resets   [2]time.Time
	gateFrom time.Time // when the gate last closed anew
	// gated: the spans exact retry delays held the starts over, latest
	// first, kept as long as past overload holds (see gatedWithin).
	gated []heldSpan
	// reopenedAt: the start of the last probe that the quota admitted
	// after a backoff (see reopened).
	reopenedAt time.Time
	cooldown   time.Time // capLevel does not grow before this

	// After a 429 that does not say when to retry (none, or rounded to
	// whole seconds), the law waits a backoff, then lets one probe call
	// through and holds the rest until it succeeds.
	backoffs int // uncertain events since the last success
	// refusedSince: an uncertain 429 has come since the last success.
	refusedSince bool
	// lightGate: the last event only held the starts for two of its
	// refusal's round trips, with no probe (see gateAfter); a 429 of
	// a call sent before it asks for one.
	lightGate bool
	// bareEvent: the last event's 429 gave no exact retry delay, so a
	// look above the safe rate that the quota refuses costs only a light
	// gate (see grow).
	bareEvent bool
	needProbe bool      // the next start is a probe
	probe     time.Time // start stamp of the probe in flight; zero if none
	seed      uint64    // jitter state

	sent       []sentCall // ring of recent starts, sentRing long
	nSent      int
	firstStart time.Time // the first start's stamp
	// window is the quota's window as far as the law can tell: the
	// longest retry delay a 429 has given (a quota counted over a window
	// answers within one), or less when a reopening showed the delays
	// rounded up (see reopenedAfterSlowStart). A rate must be held that
	// long to be proven (see answerLag).
	window time.Duration
	// longestDelay is the longest retry delay a 429 has given, which
	// the window may outgrow (see resetAt).
	longestDelay time.Duration

	minLimit, maxLimit   int
	increases, decreases int64

	avgTokens  float64 // mean input tokens per success, then an EWMA (see observe); valid if hasTokens
	hasTokens  bool
	nTokens    int64   // successes that reported tokens
	varTokens  float64 // their variance, weighted as avgTokens
	avgLatency float64 // EWMA of success latency in nanoseconds; valid if hasLatency
	hasLatency bool
	// holds: when the runner's overload hold kept the calls back (see
	// onHeld).
	holds overloadHolds
	// slowLatency: avgLatency's slower twin (see limitLatency).
	slowLatency float64
	sizes       sizeReading // calls' sizes against their tokens (see tokens.go)
	replay      replay      // a spent window replayed (see replay.go)
	reqTat      time.Time   // the requests schedule while tokens are paced (see requestHold)
	nextSize    int64       // the size of the call first in line, 0 if unknown (see headStep)
	// knownWindow: the quota's window, read at slow start's 429 (see
	// readWindow, readWindowReopened); 0 if not: the law sends by it
	// (see catchup.go). windowRPM: the budget named when it was read.
	// refusedProbe: the start of the last probe refused.
	// firstFromSlowStart: the first congestion event ended slow start.
	knownWindow        time.Duration
	windowRPM          int64
	refusedProbe       time.Time
	firstFromSlowStart bool
	// evenPace: two congestion events in a row refused only calls
	// started together with one it did not refuse (see spacing): the
	// quota's burst is smaller than the pacing tolerance, and starts
	// keep to the schedule. spacedEvent: the last event did so.
	evenPace, spacedEvent bool
	// refusalRT: the longest a 429 took to come back; ramp: how the
	// starts resume after the last (see ramp.go).
	refusalRT time.Duration
	ramp      ramp
	// slowTat: slow start's schedule (see slowStartHold).
	slowTat time.Time
	// timeouts: the recent calls that ran out their own deadline (see
	// onTimedOut).
	timeouts TimeoutWaves
	// minute: a named per-minute budget the law sends by (see minute.go).
	minute minuteWindow
}

// newLaw returns the law's state before any event. cfg must have its
// defaults applied; slowStart says whether the law starts in slow start
// (Config.slowStarts, read before the defaults: no Start given, or one
// given to climb from).
func newLaw(cfg Config, slowStart bool) law {
	w := law{
		cfg:       cfg,
		limit:     cfg.Start,
		minLimit:  cfg.Start,
		maxLimit:  cfg.Start,
		slowStart: slowStart && !cfg.Fixed,
		seed:      0x9e3779b97f4a7c15,
		sent:      make([]sentCall, sentRing),

		firstOthers: -1,
	}
	if !w.slowStart && !cfg.Fixed && cfg.StartRate > 0 {
		// A rate learned by an earlier run: pace just under it from the
		// first start (the quota may have moved since, and today's 429s
		// prove it again).
		w.rate, w.bounded = cfg.StartRate*eventBackoff, true
		w.startRate = cfg.StartRate
	}
	return w
}

// mayStart reports whether a call may start at t with inFlight calls
// holding slots: a slot is free, neither the gate nor pacing holds it, and
// no probe is awaited.
func (w *law) mayStart(t time.Time, inFlight int) bool {
	return inFlight < w.limit && !t.Before(w.hold(t)) && !w.awaitingProbe()
}

// awaitingProbe reports whether starts wait for a probe's outcome.
func (w *law) awaitingProbe() bool { return w.needProbe && !w.probe.IsZero() }

// hold is the time before which no call starts: the retry-after gate, a
// replay of slow start's burst, the known window (see windowHold), the
// ramp after a refusal showed the quota spent (see ramp.go), or the
// paced schedule, whichever is latest.
func (w *law) hold(t time.Time) time.Time {
	h := w.gate
	if w.minute.on {
		// Sending by the minute: its count, not the paced rate, a
		// replay or a window read at slow start's 429, holds the starts.
		return later(later(h, w.minuteRampHold()), later(w.rampHold(), w.minuteHold(t)))
	}
	if p := w.replayHold(); p.After(h) {
		h = p
	}
	if p := w.windowHold(t); p.After(h) {
		h = p
	}
	if p := w.rampHold(); p.After(h) {
		h = p
	}
	if p := w.slowStartHold(); p.After(h) {
		h = p
	}
	if w.rate > 0 {
		burst := float64(paceBurst)
		if w.evenPace {
			burst = 0
		}
		if p := w.tat.Add(w.headStep() - time.Duration(float64(w.interval())*burst)); p.After(h) {
			h = p
		}
		if p := w.requestHold(); p.After(h) {
			h = p
		}
	}
	return h
}

// interval is the paced time between starts.
func (w *law) interval() time.Duration {
	return time.Duration(float64(time.Second) / w.rate)
}

// start records a call let through at t, with inFlight others holding
// slots, and returns its start stamp.
func (w *law) start(t time.Time, inFlight int) time.Time { return w.startSized(t, inFlight, 0) }

// startSized is start for a call of the given size (0: unknown): a
// paced start moves the schedule on by its tokens when they bind (see
// tokens.go).
func (w *law) startSized(t time.Time, inFlight int, size int64) time.Time {
	s := w.stamp(t)
	weight := w.startWeight(size)
	w.replayed()
	w.ramped(s)
	w.minuteRamped(s)
	w.slowStarted(t)
	if w.rate > 0 {
		if floor := w.paceFloor(t); w.tat.Before(floor) {
			w.tat = floor
		}
		w.tat = w.tat.Add(w.paceStep(weight))
		w.advanceRequests(t)
	}
	if w.needProbe && w.probe.IsZero() {
		w.probe = s
	}
	if w.nSent == 0 {
		w.firstStart, w.probeFrom = s, s
	}
	w.sent[w.nSent%sentRing] = sentCall{at: s, others: inFlight, size: size, weight: weight}
	w.nSent++
	return s
}

// stamp returns the start time for a call starting at t: t, nudged a
// nanosecond past the last decrease if the clock has not moved beyond it
// (coarse or fake clocks), so that a call started after a decrease always
// compares after it.
func (w *law) stamp(t time.Time) time.Time {
	if !t.After(w.decrease) {
		t = w.decrease.Add(time.Nanosecond)
	}
	if t.Before(w.lastStart) {
		// Sent by the minute, starts ran ahead of the clock (below):
		// stamps stay in order once it stops, as find and the walks
		// back through the ring rely on.
		t = w.lastStart
	}
	if w.minute.on && !t.After(w.lastStart) {
		// Sent by the minute, a window's budget may start in one
		// instant: each start keeps a stamp of its own, which its
		// outcome and its size are found by (see find).
		t = w.lastStart.Add(time.Nanosecond)
	}
	if t.After(w.lastStart) {
		w.lastStart = t
	}
	return t
}

// onSuccess folds in a success at t of the call started at started, billed
// tokens, inFlight calls (this one included) holding slots, and grows the
// limit or the rate (see AIMD).
func (w *law) onSuccess(t, started time.Time, tokens int64, inFlight int) {
	w.observe(t.Sub(started), tokens)
	w.admittedSince++
	if c := w.find(started); c != nil {
		c.outcome = admitted
		w.learnSize(c.size, tokens)
	}
	if w.cfg.Fixed {
		return
	}
	w.minuteReopened(started)
	if started.Equal(w.probe) {
		w.needProbe, w.probe = false, time.Time{}
		if w.backoffs > 0 {
			w.reopened(started)
		}
	}
	if started.After(w.decrease) {
		w.backoffs, w.refusedSince, w.lightGate = 0, false, false
	}
	switch {
	case w.slowStart:
		w.slowGrow(t, inFlight)
		return
	case w.rate == 0:
		// A start given (a limit learned by an earlier run, with no
		// rate) and the first round trip measured: pace the rate that
		// limit carries.
		w.rate = float64(w.limit) / w.latency().Seconds() / rateHeadroom
		w.probeFrom, w.tat = t, t
	default:
		w.grow(t)
		if inFlight >= w.limit && w.capLevel > 0 && !t.Before(w.cooldown) && (w.capLevel < w.capEdge || w.mayLook()) {
			// The limit on calls in flight holds the calls back: grow it
			// by one per round trip, one per capGrowRoundTrips from the
			// level of the last event it answered, once a look there is
			// paid for.
			step := 1 / w.capLevel
			if w.capLevel >= w.capEdge {
				step /= capGrowRoundTrips
			}
			w.capLevel += step
		}
	}
	w.fitLimit()
}

// onRateLimited folds in a 429 at t of the call started at started, with
// the server's retry delay retryAfter (0 if none), inFlight calls (this
// one included) holding slots. It reports whether the
// gate moved later. Every refusal marks its call, restarts the ramp and
// may move the gate; the first of a congestion event decides what the
// event says of the quota (onEvent), and the rest of it only trim the
// rate, as they meet a quota the first one already showed spent
// (refusedInEvent).
func (w *law) onRateLimited(t, started time.Time, retryAfter time.Duration, inFlight int) (gateMoved bool) {
	newEvent := started.After(w.decrease) && !w.sameRoundTrip(t)
	gatePrev := w.idledSince()
	if !w.cfg.Fixed {
		w.minuteRefused(t, started, retryAfter)
	}
	w.cut(started, refusedCall)
	if !w.cfg.Fixed {
		w.restartRamp(t, started)
	}
	w.window = max(w.window, min(retryAfter, maxWindow))
	w.longestDelay = max(w.longestDelay, min(retryAfter, maxWindow))
	if w.cfg.Fixed {
		return w.closeGate(t.Add(retryAfter))
	}
	probeRefused := started.Equal(w.probe)
	if probeRefused {
		w.probe = time.Time{} // refused: probe again after the next backoff
		w.refusedProbe = started
		newEvent = true
	}
	others := w.othersAt(started, inFlight-1)
	w.spacing(started, others, newEvent)
	gateMoved = w.gateAfter(t, started, retryAfter, newEvent, others)
	w.gateExact = !uncertain(retryAfter) && !w.gate.After(t.Add(retryAfter))
	if newEvent {
		w.onEvent(t, started, retryAfter, others, gatePrev, probeRefused)
	} else {
		w.refusedInEvent(started)
	}
	return gateMoved
}

// refusedInEvent folds in a 429 of the call started at started that
// belongs to the congestion event under way. Each call refused of those
// already started when the event began was one call per round trip too
// many, down to DecreaseFactor of the rate the event began at. (Calls
// started since meet a quota still spent, which says nothing more; a rate
// the event read from what the quota admitted is already its answer.)
func (w *law) refusedInEvent(started time.Time) {
	if w.rate > 0 && !started.After(w.decrease) && !w.measured {
		w.rate = max(w.rate-1/w.latency().Seconds(), w.eventRate*w.cfg.DecreaseFactor, w.safe*eventBackoff, w.rateFloor())
		w.fitLimit()
	}
}

// onEvent folds in the 429 at t that begins a congestion event: of the
// call started at started beside others calls in flight, with retry delay
// retryAfter, the gate having last opened at gatePrev (zero if it idled
// no calls; see idledSince), probeRefused if that call was the probe. It
// ends slow start, and either holds the calls in flight under a server's
// cap on calls in progress or lowers the rate (lowerRate), then sets when
// the rate is next held from (resumeAfter).
func (w *law) onEvent(t, started time.Time, retryAfter time.Duration, others int, gatePrev time.Time, probeRefused bool) {
	if !uncertain(retryAfter) {
		w.resetAt(t.Add(retryAfter))
	}
	w.decreases++
	w.decrease = t
	w.admittedSince = 0
	byWindow := w.windowBinds() // the refused call was sent by the window
	w.windowRefused()
	w.bareEvent = uncertain(retryAfter)
	if w.lastStart.After(t) {
		w.decrease = w.lastStart
	}
	if probeRefused && w.eventRate > 0 {
		// The quota is still spent after the backoff: that says when,
		// not how fast. Back off longer; the rate stays.
		return
	}
	wasSlowStart := w.slowStart
	w.slowStart = false
	w.measured = false
	if !w.hasLatency {
		// Nothing measured to pace with: decrease the limit.
		w.setLimit(max(w.cfg.Floor, int(float64(w.limit)*w.cfg.DecreaseFactor)))
		return
	}
	if w.rate == 0 {
		w.rate = w.sentRate(t)
	}
	// A server's cap on calls in progress refuses at a level of calls in
	// flight, whatever the rate; a quota at a rate, whatever the calls in
	// flight (see capped). At the cap, hold the calls in flight just
	// under it and leave the rate alone; else the rate is what to lower.
	first := w.eventRate == 0
	atCap := !first && w.capped(started, others, byWindow)
	w.lastOthers = [2]int{others, w.lastOthers[0]}
	if first {
		w.firstFromSlowStart = wasSlowStart
		w.firstOthers = others
	}
	if atCap {
		w.capLevel = float64(max(w.cfg.Floor, others))
		w.capEdge = w.capLevel
	} else {
		w.lowerRate(t, started, retryAfter, gatePrev, first, wasSlowStart)
	}
	w.rate = max(w.rate, w.rateFloor())
	w.eventRate = w.rate
	w.resumeAfter(t)
	w.fitLimit()
}

// lowerRate sets the rate after a congestion event's 429 at a rate, not a
// cap (see onEvent): what the refusal says of the safe rate (reviseSafe),
// then the bisection between the safe rate and the one refused, or, with
// none safe, a step down to no more than what the quota admitted. The
// first event reads more than that, as slow start's burst bounds nothing
// (readFirstEvent), and a budget the server named overrides the law's own
// reading (paceNamed).
func (w *law) lowerRate(t, started time.Time, retryAfter time.Duration, gatePrev time.Time, first, wasSlowStart bool) {
	// What the quota admitted over its window, while calls were let
	// through, is about its rate.
	admittedRate, measured := w.admittedRate(t, started, gatePrev, retryAfter)
	safeBefore := w.safe
	measured = measured && !first
	w.reviseSafe(admittedRate, measured)
	w.refused, w.held, w.stairs = w.rate, 0, 0
	w.bounded = w.bounded || !first
	switch {
	case w.safe > 0 && w.refused-w.safe > bisectShare*w.refused:
		w.rate = (w.safe + w.refused) / 2
	case w.safe > 0:
		w.rate = w.safe
	default:
		w.rate = w.refused * eventBackoff
		if measured {
			w.rate = min(w.rate, admittedRate)
			w.measured = true
		}
	}
	if first {
		w.readFirstEvent(t, started, retryAfter, wasSlowStart)
	}
	w.paceNamed(first, safeBefore)
}

// mayLook reports whether the calls admitted since the last congestion
// event pay for a look above the current estimate: a look the quota
// refuses costs about one 429, so looks wait for 1/lookShare admitted
// calls each and cost no more than lookShare of the calls, whatever the
// quota's rate or the calls' latency.
func (w *law) mayLook() bool { return float64(w.admittedSince)*lookShare >= 1 }

// onFailed folds in any other outcome of the call started at started: it
// only matters if that call was the probe.
func (w *law) onFailed(started time.Time) {
	w.cut(started, failedCall)
	if started.Equal(w.probe) {
		w.probe = time.Time{}
	}
}

// spacing folds in a 429 of the call started at started beside others
// calls in flight, newEvent if it begins a congestion event. A token
// bucket of a one-call burst refuses the second of two calls started
// together and admits the next a moment later, whatever the rate: a
// law that lets its starts run paceBurst ahead of the schedule meets
// such 429s event after event, and, read as a rate, they took it down
// to a crawl. When two events in a row refused only such calls (not a
// cap on calls in progress, which refuses calls started together too),
// the law paces with no burst from then on.
func (w *law) spacing(started time.Time, others int, newEvent bool) {
	beside := w.rate > 0 && w.refusedBeside(started) && !w.capped(started, others, w.windowBinds())
	switch {
	case newEvent:
		w.evenPace = w.evenPace || w.spacedEvent && beside
		w.spacedEvent = beside
	case !beside:
		w.spacedEvent = false
	}
}

// sameRoundTrip reports whether t is within one measured round trip of the
// last decrease: a 429 then belongs to the event that decrease answered,
// whatever its call's start, because a window-counted quota keeps refusing
// until the window has drained.
func (w *law) sameRoundTrip(t time.Time) bool {
	return w.hasLatency && !w.decrease.IsZero() && float64(t.Sub(w.decrease)) < w.avgLatency
}
