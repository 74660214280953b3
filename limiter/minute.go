package limiter

import (
	"math"
	"time"
)

// A budget a 429 names per minute (quotaValue of a ...PerMinute...
// quotaId) is counted by the real API over a minute: a sliding log or a
// fixed window of that length. Paced evenly at a sixtieth of it a
// second, a run loses what the perfect client gains by sending a
// window's budget as it frees: after slow start's burst has spent the
// first minute, each later minute's budget at once (a fixed window) or
// the burst again a minute after it (a sliding log), where an even pace
// sends the same budget over the whole minute. Once the quota shows
// that it counts over a minute (minuteReopened), the law admits a call
// while the calls started in the last minute (its tokens, for a token
// budget), less those refused, leave room for it under the named
// budget: a sliding log of that length admits exactly those, and so
// does a fixed window of any phase, as every fixed minute lies within
// some last minute. A fixed window frees its whole budget at its
// boundary, earlier than the last minute does: a 429 whose retry delay
// says the quota opens while the last minute still holds the whole
// budget shows the boundary, and the calls started before it stop
// counting (minute.from). A refusal while the last minute holds well
// under the budget says the quota does not count so (a boundary read
// wrong, a window shorter than a minute named at a minute's rate, a
// quota shared, a quota that fell): the law paces evenly again, for the
// rest of the run.
//
// Two things the name cannot say are learned on the way. A quota may
// have fallen since it was named: a freed minute sent at once would meet
// it with the whole budget, so it goes in steps on the refusal clock
// (minuteRamped), each bounded by what the run can afford to have
// refused (minuteMaxStep). A quota may have grown since: the paced law
// looks above a named rate, and sending by the minute it looks above the
// budget by the minute instead (minuteLookBegins), since a burst a
// minute apart never reads as a rate held.

// minuteWindow is a named per-minute budget the law sends by.
type minuteWindow struct {
	// on: the law sends by the minute; tokens: the budget counts input
	// tokens (a named TPM), not calls.
	on, tokens bool
	// from: calls started before it do not count (a fixed window's
	// boundary, see minuteRefused); zero for none.
	from time.Time
	// opens: where the last 429's retry delay said the quota opens,
	// zero for none: a boundary there once the count shows it (see
	// minuteBoundary).
	opens time.Time
	// offAt: when the law last stopped sending by the minute. The calls
	// it sent before then started faster than the paced rate carries,
	// which no cap on calls in progress explains (see minuteSent).
	offAt time.Time
	// spoiled: a refusal contradicted the count once; the law paces
	// evenly for the rest of the run (a quota that moves, or counts
	// otherwise, meets a freed minute with what it no longer admits).
	spoiled bool
	// step, sent, allowed, prev: a freed minute's resumption, as the
	// ramp's (see minuteRamped); prev is the last start by the minute.
	step, prev    time.Time
	sent, allowed int
	// admitted, refused: the calls the quota admitted and refused in the
	// run, which bound a freed minute's step (see minuteMaxStep).
	admitted, refused int
	// charged: the quota counts the calls it refuses (see
	// minuteCharged).
	charged bool
	// budget: the budget the law sends by, as named when it began or
	// as a 429 named it since (see minuteRefused); fell: the budget it
	// sent by before a 429 named a lower one, 0 for none.
	budget, fell float64
	// above: what the count may hold beyond the budget, as the quota
	// admitted it by the minute; look: while a look above is under way,
	// what it may hold beyond the budget (0 for none); looking: the
	// look's calls have begun, on a step of their own; next: when the
	// next look falls due; calm: looks refused in a row (see
	// minuteExtra, minuteLookBegins).
	above, look float64
	looking     bool
	next        time.Time
	calm        int
	// opensHeld caches what the minute before opens held (see
	// minuteOpensHeld), valid while opensCut equals cut and opensKept
	// (the ring's depth of its oldest call, at opensSent starts) is still
	// in the ring; cut counts the calls refused or failed, the only
	// outcomes that change it once opens has passed.
	opensHeld                      float64
	opensAt                        time.Time
	opensCut, opensSent, opensKept int
	cut                            int
	// cutAt: the latest start the quota refused or that failed; the
	// starts after it all count (see minuteNewestCounted).
	cutAt time.Time
}

// reset sets the window on or off, keeping what the run has shown.
func (m *minuteWindow) reset(on, tokens bool) {
	*m = minuteWindow{on: on, tokens: tokens, offAt: m.offAt, spoiled: m.spoiled,
		admitted: m.admitted, refused: m.refused, calm: m.calm, charged: m.charged,
		cut: m.cut, cutAt: m.cutAt}
}

const (
	// minuteSpan is the window a named per-minute budget counts over,
	// with room for calls that reach the server a little after they
	// started (a network's jitter, not catchup's windowMargin: a minute's
	// 1% is 600 ms, a hundredth of each minute's budget held back).
	minuteSpan = time.Minute + 200*time.Millisecond
	// minuteShare is the share of a named token budget the last minute
	// may hold: room for tokens estimated before they are billed.
	minuteShare = namedTokenShare
	// minuteFull: the quota reads as spent over a minute when the calls
	// admitted in the minute before its reopening hold this share of
	// the named budget; a refusal with less in the last minute
	// contradicts the window (see minuteRefused).
	minuteFull = 0.9
	// minuteSteps: a freed minute's step grows to no more than this
	// share of the budget's calls (minuteStepsAfforded when the run's
	// 429s leave room for a step that large), which bounds what a quota
	// fallen since it was named refuses at once.
	minuteSteps         = 64
	minuteStepsAfforded = 32
	// minuteAfford is the share of the calls the quota admitted that
	// may be refused: the 429 budget the run has earned.
	minuteAfford = 0.01
	// minuteLookAfter is how long the law sends a budget by the
	// minute with no 429 before it looks above it, doubled for each
	// look refused in a row; minuteLookStair is the share of the budget
	// a look adds.
	minuteLookAfter = 2 * time.Minute
	minuteLookStair = 1.0 / 8
	// minuteShut: the quota reads as counting over a minute only when
	// it admitted nothing for at least this long before it reopened
	// (longer than any window shorter than a minute, with a rounded
	// delay's two seconds).
	minuteShut = 12 * time.Second
)

// minuteBudget is the named per-minute budget the law may send by, and
// whether it counts tokens: a requests budget or a tokens budget named
// alone; 0 when none is, or both are.
func (w *law) minuteBudget() (budget float64, tokens bool) {
	switch {
	case w.namedRPM > 0 && w.namedTPM == 0:
		return float64(w.namedRPM), false
	case w.namedTPM > 0 && w.namedRPM == 0:
		return float64(w.namedTPM), true
	}
	return 0, false
}

// minuteCost is what the call of size counts against the budget: 1, or
// its estimated input tokens (the mean call's when its size is unknown).
func (w *law) minuteCost(size int64) float64 {
	if !w.minute.tokens {
		return 1
	}
	if t := w.estimatedTokens(size); t > 0 {
		return t
	}
	return max(w.callTokens(), 1)
}

// minuteHeld is what the calls started in (from, to) that the quota did
// not refuse count against a budget, tokens or calls: those admitted,
// and those still in flight that started before answered (a refusal
// comes back within its own round trip).
func (w *law) minuteHeld(from, to, answered time.Time, tokens bool) float64 {
	n := 0.0
	for i := 1; i <= min(w.nSent, sentRing); i++ {
		c := &w.sent[(w.nSent-i)%sentRing]
		if !c.at.After(from) {
			break
		}
		if !c.at.Before(to) || c.outcome != admitted && (c.outcome != pending || !c.at.Before(answered)) {
			continue
		}
		if tokens {
			if t := w.estimatedTokens(c.size); t > 0 {
				n += t
			} else {
				n += max(w.callTokens(), 1)
			}
		} else {
			n++
		}
	}
	return n
}

// minuteFrom is the start of the span the budget counts at t: a
// minute back, or the fixed window's boundary when later.
func (w *law) minuteFrom(t time.Time) time.Time {
	return later(t.Add(-minuteSpan), w.minuteBoundary(t))
}

// minuteBoundary is the fixed window's boundary in effect at t: the
// one read before, or where the last retry delay said the quota opens,
// once t is past it, if the calls started in the minute before that
// instant held the whole budget: a sliding minute would not admit a
// call then, a fixed window has begun anew.
func (w *law) minuteBoundary(t time.Time) time.Time {
	o := w.minute.opens
	budget, _ := w.minuteBudget()
	if o.IsZero() || w.minute.tokens || t.Before(o) || !o.After(w.minute.from) {
		return w.minute.from
	}
	if w.minuteOpensHeld(o) >= budget-0.5 {
		return o
	}
	return w.minute.from
}

// cut records that the call started at started was refused or failed
// (outcome): it leaves the minute's count (see minuteNewestCounted).
func (w *law) cut(started time.Time, outcome outcome) {
	if c := w.find(started); c != nil {
		c.outcome = outcome
		w.minute.cut++
		w.minute.cutAt = later(w.minute.cutAt, started)
	}
}

// minuteOpensHeld is minuteHeld over the minute before o, which
// minuteBoundary asks at each hold once o has passed: no call starts in
// that minute any more, and the calls in it only leave the count when
// refused or failed (one in flight counts until then), so the count is
// kept until one is, or until the ring no longer holds its oldest call,
// rather than walked again at each hold (see minuteNewestCounted).
func (w *law) minuteOpensHeld(o time.Time) float64 {
	m := &w.minute
	if m.opensAt.Equal(o) && m.opensCut == m.cut && w.nSent-m.opensSent+m.opensKept <= sentRing {
		return m.opensHeld
	}
	from, n, depth := o.Add(-time.Minute), 0.0, 0
	for i := 1; i <= min(w.nSent, sentRing); i++ {
		c := &w.sent[(w.nSent-i)%sentRing]
		if !c.at.After(from) {
			break
		}
		depth = i
		if c.at.Before(o) && c.outcome != refusedCall && c.outcome != failedCall {
			n++
		}
	}
	m.opensAt, m.opensHeld, m.opensCut, m.opensSent, m.opensKept = o, n, m.cut, w.nSent, depth
	return n
}

// minuteHold is the earliest instant from t the next call may start by
// the minute: when the calls started in the last minute (less those
// refused, unless the quota counts them) leave room for it under the
// budget and what a look adds. Zero when the law does not send by the
// minute.
func (w *law) minuteHold(t time.Time) time.Time {
	budget, _ := w.minuteBudget()
	if !w.minute.on || budget <= 0 {
		return time.Time{}
	}
	room := w.minuteRoom(budget) + w.minuteExtra(t) - w.minuteCost(w.nextSize)
	from := w.minuteFrom(t)
	// The call waits for the start that leaves no room, counted back
	// from the newest, to leave the minute.
	c := w.minuteNewestCounted(room)
	if c == nil {
		c = w.minuteWalk(room, from)
	}
	if c == nil || !c.at.After(from) {
		return time.Time{}
	}
	h := c.at.Add(minuteSpan)
	// Where the last retry delay said the quota opens may be a fixed
	// window's boundary (see minuteBoundary), and a look above may fall
	// due: see again then.
	for _, o := range []time.Time{w.minute.opens, w.minute.next} {
		if o.After(t) && o.Before(h) {
			h = o
		}
	}
	return h
}

// minuteWalk walks back from the newest start after from until what
// the starts hold passes room, and returns the start that passed it; nil
// when they never do.
func (w *law) minuteWalk(room float64, from time.Time) *sentCall {
	n := 0.0
	for i := 1; i <= min(w.nSent, sentRing); i++ {
		c := &w.sent[(w.nSent-i)%sentRing]
		if !c.at.After(from) {
			return nil
		}
		if c.outcome == failedCall || c.outcome == refusedCall && !w.minute.charged {
			continue
		}
		n += w.minuteCost(c.size)
		if n > room {
			return c
		}
	}
	return nil
}

// minuteNewestCounted is minuteWalk's answer without the walk when no
// start among the newest that pass room was refused or failed, so each
// counts one call: the start that many back. Nil when it cannot tell (a
// token budget, a refusal among them, a ring too short); the hold walks
// then. A hold walks a minute's starts otherwise: a budget of a few
// thousand calls made a simulated run of it ten times as long.
func (w *law) minuteNewestCounted(room float64) *sentCall {
	k := max(int(math.Floor(room))+1, 1)
	if w.minute.tokens || k > min(w.nSent, sentRing) {
		return nil
	}
	c := &w.sent[(w.nSent-k)%sentRing]
	if !c.at.After(w.minute.cutAt) {
		return nil
	}
	return c
}

// minuteRoom is what the last minute may hold of budget: all but
// windowSlack calls (a call counts as the quota counts it, and the
// minute's margin leaves room for it reaching the server late), or
// minuteShare of its tokens (estimated before they are billed).
func (w *law) minuteRoom(budget float64) float64 {
	if w.minute.tokens {
		return budget * minuteShare
	}
	return budget - windowSlack
}

// minuteReopened folds in a success of the call started at started.
// Sending by the minute, a minute that admitted more than twice the
// budget (more than a fixed window's end and the next one's start)
// contradicts it: the law paces evenly again. Otherwise, the first call
// the quota admitted after a refusal may show it counting over a minute
// (see minuteShown); a minute that held the whole budget when the quota
// refused, and admitted this call, where a sliding minute would not, is
// a fixed window whose boundary has passed: only calls from this one on
// count.
func (w *law) minuteReopened(started time.Time) {
	w.minute.admitted++
	budget, _ := w.minuteBudget()
	if w.minute.on {
		if budget <= 0 || w.minuteContradicted(started, namedContradicted*(budget+w.minute.above)) {
			w.minuteOff(started)
			return
		}
		w.minuteLookAdmitted(started, budget)
		return
	}
	if w.decrease.IsZero() || !started.After(w.decrease) || !w.minuteShown(started, started) {
		return
	}
	// What the minute held when the quota refused: the calls let
	// through since the refusals may have taken slots freed since.
	refused := w.decrease.Add(time.Nanosecond)
	if !w.minute.tokens && w.minuteHeld(started.Add(-time.Minute), refused, refused, false) >= budget-0.5 {
		w.minute.from = started
	}
}

// minuteContradicted reports whether the calls started in the minute
// before started that the quota did not refuse hold more than most.
// Fewer starts than that in the minute cannot: a call budget's count
// is then not walked (see minuteNewestCounted).
func (w *law) minuteContradicted(started time.Time, most float64) bool {
	from := started.Add(-time.Minute)
	if k := int(math.Floor(most)) + 1; !w.minute.tokens && (k > min(w.nSent, sentRing) || !w.sent[(w.nSent-k)%sentRing].at.After(from)) {
		return false
	}
	return w.minuteHeld(from, started, started, w.minute.tokens) > most
}

// minuteShown reports whether the quota, named a budget per minute,
// showed that it counts over a minute, opening again at opens (a call
// admitted then, or a retry delay's end; calls in flight that started
// before answered count as admitted), and if so sends by the minute
// from then: it admitted nothing for minuteShut before opens, and the
// minute up to the last call it admitted held the named budget (its
// minuteFull share, and no more than twice it). A quota whose window is
// shorter opens sooner, and one named at a minute's rate over a shorter
// window holds less in a minute when it shuts.
func (w *law) minuteShown(opens, answered time.Time) bool {
	budget, tokens := w.minuteBudget()
	if w.minute.spoiled || w.namedMoved || budget <= 0 || tokens && !w.hasTokens || !w.minuteCounts(budget, tokens) {
		return false // none, or more starts a minute than the law keeps with room
	}
	var last time.Time
	for i := 1; i <= min(w.nSent, sentRing); i++ {
		c := &w.sent[(w.nSent-i)%sentRing]
		if c.at.Before(opens) && (c.outcome == admitted || c.outcome == pending && c.at.Before(answered)) {
			last = c.at
			break
		}
	}
	if last.IsZero() || opens.Sub(last) < minuteShut {
		return false
	}
	after := last.Add(time.Nanosecond)
	held := w.minuteHeld(last.Add(-time.Minute), after, after, tokens)
	if held < minuteFull*budget || held > namedContradicted*budget {
		return false
	}
	w.minute.reset(true, tokens)
	w.minute.budget = budget
	w.minute.next = opens.Add(minuteLookAfter << w.minute.calm)
	w.fitLimit()
	return true
}

// minuteCounts reports whether the ring of starts holds, with room, a
// minute's calls under budget (calls or tokens): the count walks no
// further back.
func (w *law) minuteCounts(budget float64, tokens bool) bool {
	return budget/w.minuteUnit(tokens) < sentRing/2
}

// minuteUnit is what a mean call counts against a budget of tokens or
// calls.
func (w *law) minuteUnit(tokens bool) float64 {
	if tokens {
		return max(w.callTokens(), 1)
	}
	return 1
}

// minuteRefused folds in a 429 at t of the call started at started,
// with retry delay retryAfter, the budget it named recorded. Sending by
// the minute, a budget named lower, or higher when a look above
// was under way, is the one the law sends by from then on; any other
// budget named anew (a live quota, see law.namedMoved) stops it. A
// refusal while the last minute held under
// minuteFull of the budget contradicts the count: the law paces evenly
// for the rest of the run. A refusal of a minute full by the count says,
// with its delay, where the quota opens: a fixed window's boundary, if
// the last minute still holds the whole budget then (see
// minuteBoundary).
func (w *law) minuteRefused(t, started time.Time, retryAfter time.Duration) {
	w.minute.refused++
	if !w.minute.on {
		// An exact delay says when the quota opens; a rounded one or
		// none waits for the probe it admits (see minuteReopened).
		if uncertain(retryAfter) || !w.minuteShown(t.Add(retryAfter), t.Add(-w.rampSilence())) {
			return
		}
	}
	if !started.Before(w.minute.step) && w.minute.allowed > 0 {
		w.minute.allowed, w.minute.sent = 1, 0
		w.minute.step, w.minute.prev = t, t
	}
	budget, tokens := w.minuteBudget()
	if budget > 0 && tokens == w.minute.tokens && (budget < w.minute.budget || w.minute.look > 0 && budget > w.minute.budget) {
		// A 429 that names less than the law sends by (the quota
		// fell), or more when a look above was refused (it grew): the
		// quota says what it is now, still over a minute.
		if budget < w.minute.budget {
			w.minute.fell = max(w.minute.fell, w.minute.budget)
		} else if budget >= w.minute.fell {
			w.minute.fell = 0
		}
		w.minute.budget, w.minute.above, w.minute.look, w.minute.looking = budget, 0, 0, false
		w.fitLimit()
	}
	if w.namedMoved && budget != w.minute.budget || budget <= 0 || tokens != w.minute.tokens {
		w.minuteOff(started)
		return
	}
	if !w.minuteCounts(budget+max(w.minute.above, w.minute.look), tokens) {
		// Grown past what the ring holds of a minute's starts (a
		// look, a budget named higher): the count would hold nothing.
		w.minuteOff(started)
		return
	}
	if !w.minute.from.IsZero() && !started.After(w.minute.from) {
		return // refused by a fixed window that has ended since
	}
	if w.minuteHeld(w.minuteFrom(started), started, t.Add(-w.rampSilence()), tokens) < minuteFull*budget {
		w.minuteOff(started)
		w.minute.spoiled = true
		return
	}
	w.minuteCharged(started)
	w.minuteLookRefused(t)
	w.minute.from = w.minuteBoundary(t)
	w.minute.opens = time.Time{}
	if !tokens && retryAfter > 0 {
		w.minute.opens = t.Add(retryAfter)
	}
}

// minuteCharged folds in a refusal of the call started at started that
// the count let through with room for more: if the calls refused in the
// minute fill that room, the quota counts its refusals (a sliding log
// that logs them), and the count holds them from then on. A quota that
// does not would lose a refusal's room for a minute each time.
func (w *law) minuteCharged(started time.Time) {
	budget, _ := w.minuteBudget()
	if w.minute.charged {
		return
	}
	from := w.minuteFrom(started)
	refused := 0.0
	for i := 1; i <= min(w.nSent, sentRing); i++ {
		c := &w.sent[(w.nSent-i)%sentRing]
		if !c.at.After(from) {
			break
		}
		if c.at.Before(started) && c.outcome == refusedCall {
			refused += w.minuteCost(c.size)
		}
	}
	held := w.minuteHeld(from, started, started, w.minute.tokens)
	room := w.minuteRoom(budget) + max(w.minute.above, w.minute.look)
	cost := w.minuteCost(0)
	if c := w.find(started); c != nil {
		cost = w.minuteCost(c.size)
	}
	w.minute.charged = held+cost < room && held+refused+cost >= room
}

// minuteOff stops sending by the minute, for a call started at started.
func (w *law) minuteOff(started time.Time) {
	w.minute.reset(false, false)
	w.minute.offAt = later(w.lastStart, started)
	w.fitLimit()
}

// minuteSent reports whether the call started at started was sent by
// the minute: its starts ran ahead of any paced rate, so the calls in
// flight beside it say nothing of a cap on calls in progress.
func (w *law) minuteSent(started time.Time) bool {
	return w.minute.on || !started.After(w.minute.offAt) && !w.minute.offAt.IsZero()
}

// minuteLimit is the limit on calls in flight while the law sends by
// the minute: the calls the budget holds, as the perfect client may
// have a whole minute's budget in flight at once (a fixed window
// opening); ok is false when it does not send by the minute.
func (w *law) minuteLimit() (n int, ok bool) {
	budget, _ := w.minuteBudget()
	if !w.minute.on || budget <= 0 {
		return 0, false
	}
	unit := w.minuteUnit(w.minute.tokens)
	if w.minute.tokens {
		unit /= 2 // short prompts: more calls than the mean's
	}
	return int((w.minuteRoom(budget)+max(w.minute.above, w.minute.look))/unit) + 1, true
}
