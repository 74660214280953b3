package pipeline

import (
	"context"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// overloadedToHold is how many overloaded answers (503s), with no success
// of a call sent after the first of them, close a stage's overload hold,
// if they also outnumber half the calls sent since that first one. A
// server shedding a share of its calls at random sends a few among many
// calls that pass, and each item then waits its own short backoff; a
// burst in which it refuses everything sends them a refusal's round trip
// apart, one for each call sent.
const overloadedToHold = 3

// probeGrace is how many times the slowest refusal's round trip of the
// current overload a probe may be in flight before the hold takes it as
// served and opens; minProbeGrace is the least wait.
const (
	probeGrace    = 3
	minProbeGrace = 20 * time.Millisecond
)

// overloadedToHoldKnown replaces overloadedToHold once an overload of
// this stage has closed the hold and ended: the server is known to
// refuse everything in bursts, and each call sent into one before the
// hold closes is a call wasted.
const overloadedToHoldKnown = 1

// maxLearnedWait bounds the first wait of an overload that the lengths
// of the earlier ones set (see overloadHold.lo): past it, an outage
// rather than a burst, the backoff schedule probes instead.
const maxLearnedWait = 2 * time.Second

// OverloadListener is a Limiter told when the stage's overload hold
// (503s: the server refuses every call for a moment) keeps the calls
// back and when it lets them go again, as limiter.AIMD is: a limiter
// that paces a rate must not read the time held as its own slowness.
// The runner calls OverloadHeld when the hold closes and OverloadOpened
// when it opens for every call again, each once per hold, with the
// hold's lock held (the limiter must not call back into the runner).
type OverloadListener interface {
	Limiter
	// OverloadHeld reports that no call of the stage starts until
	// OverloadOpened.
	OverloadHeld()
	// OverloadOpened reports that the calls go again.
	OverloadOpened()
}

// overloadHold is what one stage does about an overloaded server (503s).
// An overload is neither a quota (the limiter hears no 429: a burst of
// them says nothing about the rate the quota admits; an
// OverloadListener only hears that the calls are held) nor an item's
// fault (no attempt is spent), and it ends on the server's side, at a
// moment no answer names. So when answers show the server refusing
// everything, every call of the stage waits at the hold for a short and
// growing backoff, then one probe goes alone, and the hold opens for all
// once a call sent after it closed is served. Each retry is a
// call: the hold is what keeps a burst from costing a call per waiting
// item per backoff step, and waiting at it holds no limiter slot (the
// calls pass it before they acquire one).
//
// The calls are told apart by when they passed the hold (not by the
// limiter's start stamp, which can come much later): an answer to a call
// that passed before the hold closed belongs to the burst already seen.
//
// An overload's length is read when it ends: a probe started lo after its
// first refusal was refused, one started hi after it was served. A server
// overloaded now and then is often so for about as long each time, so the
// next overload's first probe goes halfway between the lo and hi known
// (and at hi, when that one is refused, then a grace later): the hold then
// opens about when the server serves again, a bisection over overloads,
// instead of after a schedule's step past it. Once an overload has closed the hold, the next
// closes it at its first refusal (overloadedToHoldKnown), until a call
// sent after a refused one and before the hold closed is served: that
// server sheds a call here and there, and three refusals close it again.
//
// A refusal comes back at once, an answer only after the model's work,
// which can take seconds (a heavy tail): so the hold does not wait for
// the probe's answer, only for its refusal. A probe in flight for
// probeGrace times the slowest refusal of the overload is being served,
// and the hold opens; if it is refused after all, the hold closes again.
type overloadHold struct {
	mu sync.Mutex
	// newSchedule returns the hold's backoff schedule (a fresh one per
	// overload).
	newSchedule func() backoff.BackOff
	schedule    backoff.BackOff
	// since is when the current run of overloaded answers began (the
	// first with no success, of a call sent after it, since); zero when
	// none. refused counts its answers; sent counts the calls that
	// passed since it began.
	since         time.Time
	refused, sent int
	// until: no call passes before it. closedAt: when the hold last
	// closed or moved on a refused probe.
	until, closedAt time.Time
	// needProbe: the hold has closed and no call sent after it has
	// succeeded; the next call to pass is the probe, and the others wait
	// for its answer. probing: the probe has passed; probeStarted: when
	// it started (after its limiter slot), zero before.
	needProbe, probing bool
	probeStarted       time.Time
	// slowest is the longest round trip of a refusal in this overload;
	// graceOpened: the hold opened on a probe's grace, not a success.
	slowest     time.Duration
	graceOpened bool
	// probePassed: when the probe in flight passed. lastRefused: the
	// latest a refused probe of this overload passed after since. lo and
	// hi bound the length of the overloads ended so far (see above);
	// hi is 0 before any.
	probePassed         time.Time
	lastRefused, lo, hi time.Duration
	// firstRefused: when the first refused call of this overload passed.
	firstRefused time.Time
	// listener, if not nil, is told when the hold closes and opens.
	listener OverloadListener
	// changed is closed, and replaced, whenever the hold moves, to wake
	// the calls waiting at it.
	changed chan struct{}
	// open is canceled, and replaced, whenever the hold closes: the calls
	// that passed before and still wait for a limiter slot go back to it
	// instead of starting into the overload.
	open       context.Context
	cancelOpen context.CancelFunc
}

// newOverloadHold returns an open hold whose backoff schedules come from
// newSchedule; lim, if it is an OverloadListener, is told when it closes
// and opens.
func newOverloadHold(newSchedule func() backoff.BackOff, lim Limiter) *overloadHold {
	h := &overloadHold{newSchedule: newSchedule, changed: make(chan struct{})}
	h.listener, _ = lim.(OverloadListener)
	h.open, h.cancelOpen = context.WithCancel(context.Background())
	return h
}

// whileOpen returns ctx, also canceled when the hold closes after pass
// returned open (see pass), and the function that releases it.
func whileOpen(ctx, open context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(open, cancel)
	return ctx, func() { stop(); cancel() }
}

// pass waits until a call may go: the hold is open, or it has expired and
// this call is the probe. It returns when the call passed, whether it is
// the probe (whose answer the caller must report with answered, as for
// every call that passed), and a context canceled when the hold next
// closes, for the wait between passing and starting; ok is false when ctx
// is done first.
func (h *overloadHold) pass(ctx context.Context, clock Clock) (passed time.Time, probe bool, open context.Context, ok bool) {
	for {
		if ctx.Err() != nil {
			return time.Time{}, false, nil, false
		}
		h.mu.Lock()
		now := clock.Now()
		changed := h.changed
		var wait time.Duration
		switch {
		case now.Before(h.until):
			wait = h.until.Sub(now)
		case h.needProbe && h.probing && h.probeStarted.IsZero():
			wait = -1 // until the probe starts
		case h.needProbe && h.probing && now.Before(h.probeStarted.Add(h.grace())):
			wait = h.probeStarted.Add(h.grace()).Sub(now) // for its refusal, if it comes
		case h.needProbe && h.probing:
			// Not refused in the time a refusal takes: served.
			h.served(h.probePassed)
			h.needProbe, h.until, h.graceOpened = false, time.Time{}, true
			h.opened()
			h.wake()
			h.mu.Unlock()
			continue
		case h.needProbe:
			h.probing, h.probePassed = true, now
			open := h.open
			h.mu.Unlock()
			return now, true, open, true
		default:
			if !h.since.IsZero() {
				h.sent++
			}
			open := h.open
			h.mu.Unlock()
			return now, false, open, true
		}
		h.mu.Unlock()
		if !h.await(ctx, clock, wait, changed) {
			return time.Time{}, false, nil, false
		}
	}
}

// grace is how long a probe may be in flight before it counts as served.
func (h *overloadHold) grace() time.Duration {
	return max(probeGrace*h.slowest, minProbeGrace)
}

// started reports that a call that passed as the probe has its limiter
// slot and starts at at.
func (h *overloadHold) started(probe bool, at time.Time) {
	if !probe {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.probing {
		h.probeStarted = at
		h.wake()
	}
}

// await waits d (forever when d < 0), until changed is closed, or until
// ctx is done; it reports whether ctx is still live.
func (h *overloadHold) await(ctx context.Context, clock Clock, d time.Duration, changed <-chan struct{}) bool {
	var fired <-chan time.Time
	if d >= 0 {
		t := clock.NewTimer(d)
		defer t.Stop()
		fired = t.C()
	}
	select {
	case <-fired:
	case <-changed:
	case <-ctx.Done():
		return false
	}
	return true
}

// answered reports the outcome of a call that passed at passed (probe:
// it went as the probe), started at started (zero if it never did) and
// answered at now with class ("" for a success). For an overloaded
// answer it returns whether the hold covers the retry (the item passes
// it again and needs no wait of its own) and since when the server has
// been overloaded with no success.
func (h *overloadHold) answered(passed time.Time, probe bool, started time.Time, class Class, now time.Time) (held bool, since time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	wasUntil, wasProbe := h.until, h.needProbe
	if probe && passed.Equal(h.probePassed) {
		// The probe in flight answered (not one the hold closed over
		// since: see close).
		h.probing, h.probeStarted = false, time.Time{}
	}
	switch class {
	case "":
		if h.hi > 0 && !h.since.IsZero() && passed.After(h.firstRefused) && passed.Before(h.closedAt) {
			// Served though sent after a refused call, before the hold
			// closed: not an overload of every call.
			h.lo, h.hi = 0, 0
		}
		if (h.needProbe || h.graceOpened) && !passed.Before(h.closedAt) {
			if h.needProbe {
				h.served(passed)
				h.opened()
			}
			h.needProbe, h.until, h.schedule, h.graceOpened = false, time.Time{}, nil, false
		}
		// Only a call sent after the overload was seen shows that it
		// is over: older calls were admitted before it began.
		if !h.since.IsZero() && passed.After(h.since) {
			h.since, h.refused, h.sent, h.slowest = time.Time{}, 0, 0, 0
		}
	case ClassOverloaded:
		if h.since.IsZero() {
			h.since, h.lastRefused, h.firstRefused = now, 0, passed
		}
		if passed.Before(h.firstRefused) {
			h.firstRefused = passed
		}
		h.refused++
		if !started.IsZero() {
			h.slowest = max(h.slowest, now.Sub(started))
		}
		switch {
		case (h.needProbe || h.graceOpened) && !passed.Before(h.closedAt):
			// The probe, or a call let through since, was refused:
			// the overload lasts longer than that.
			h.lastRefused = max(h.lastRefused, passed.Sub(h.since))
			h.close(now)
		case !h.needProbe && h.refused >= h.refusalsToHold() && 2*h.refused > h.sent:
			h.close(now)
		}
		held, since = h.needProbe, h.since
	}
	if probe || h.needProbe != wasProbe || !h.until.Equal(wasUntil) {
		h.wake()
	}
	return held, since
}

// refusalsToHold is how many overloaded answers in a row close the hold.
func (h *overloadHold) refusalsToHold() int {
	if h.hi > 0 {
		return overloadedToHoldKnown
	}
	return overloadedToHold
}

// close holds every call until the schedule's next step from now, or
// until the earlier overloads' length says this one may end (see lo).
func (h *overloadHold) close(now time.Time) {
	first := h.schedule == nil
	if first {
		h.schedule = h.newSchedule()
	}
	wait := next(h.schedule)
	if at, ok := h.learnedEnd(first); ok && at.After(now) {
		wait = at.Sub(now)
	}
	wasHeld := h.needProbe
	h.until, h.closedAt, h.needProbe, h.graceOpened = now.Add(wait), now, true, false
	// A probe still in flight (the hold opened on its grace, and a call
	// let through since was refused) says nothing of this closing: the
	// next call to pass is a new probe, and the old one's answer, passed
	// before closedAt, counts as any call's.
	h.probing, h.probeStarted = false, time.Time{}
	if !wasHeld && h.listener != nil {
		h.listener.OverloadHeld()
	}
	h.cancelOpen()
	h.open, h.cancelOpen = context.WithCancel(context.Background())
}

// learnedEnd is when the earlier overloads' length says the current one
// may have ended, for the first probe (first) or one after a refused
// probe: halfway between lo and hi (until they are within a grace), then
// hi, then a grace past the latest refused probe, while that is within
// two graces of hi. ok is false when none is known, when hi is past
// maxLearnedWait, or when probes past hi were refused already: the
// schedule's steps take over.
func (h *overloadHold) learnedEnd(first bool) (at time.Time, ok bool) {
	if h.hi <= 0 || h.hi > maxLearnedWait || h.since.IsZero() {
		return time.Time{}, false
	}
	target := h.hi
	if first && h.hi-h.lo > minProbeGrace {
		target = (h.lo + h.hi) / 2
	}
	if !first && target <= h.lastRefused {
		// Refused at or past hi: the overload runs a little longer
		// than the last (the answers' timing jitters), or much longer.
		// Look a grace on, twice, then by the schedule.
		if h.lastRefused >= h.hi+2*minProbeGrace {
			return time.Time{}, false
		}
		target = h.lastRefused + minProbeGrace
	}
	return h.since.Add(target), true
}

// served folds in a call that passed at passed, after the hold closed,
// being served: the overload lasted at most that long after its first
// refusal, and at least as long as the latest refused probe.
func (h *overloadHold) served(passed time.Time) {
	if h.since.IsZero() || passed.Before(h.since) {
		return
	}
	hi := passed.Sub(h.since)
	if lo := max(h.lo, h.lastRefused); h.hi > 0 && hi <= h.hi && lo < hi {
		h.lo, h.hi = lo, hi // the same length as before, bounded closer
	} else {
		h.lo, h.hi = h.lastRefused, hi // another length: start over
	}
}

// opened tells the listener that the calls go again.
func (h *overloadHold) opened() {
	if h.listener != nil {
		h.listener.OverloadOpened()
	}
}

// wake tells the calls waiting at the hold that it moved.
func (h *overloadHold) wake() {
	close(h.changed)
	h.changed = make(chan struct{})
}
