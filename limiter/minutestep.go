package limiter

import "time"

// A freed minute's steps and the looks above a budget sent by the minute
// (see minute.go): what the name cannot say, learned on the way. A quota
// may have fallen since it was named, and a freed minute sent at once
// would meet it with the whole budget; it may have grown, and bursts a
// minute apart never read as a paced rate held, so the law looks above
// the budget by the minute.

// minuteRampHold is the earliest instant a freed minute's resumption
// lets the next call start: zero when it does not hold it. A quota that
// fell since the budget was named admits less than the count frees, and
// a whole minute's budget sent in one instant meets it all at once;
// sent one call, then twice as many each refusal round trip that passes
// with none refused, it costs a step's refusals instead.
func (w *law) minuteRampHold() time.Time {
	if w.minute.allowed == 0 || w.minute.sent < w.minute.allowed {
		return time.Time{}
	}
	return w.minute.step.Add(w.rampSilence())
}

// minuteRamped records a start at s by the minute: after a refusal
// round trip with no start (the count held the starts), the resumption
// begins again from one call.
func (w *law) minuteRamped(s time.Time) {
	if !w.minute.on {
		return
	}
	if w.minute.allowed == 0 || s.Sub(w.minute.prev) > w.rampSilence() || w.minuteLookBegins(s) {
		w.minute.allowed, w.minute.sent = 1, 0
	}
	w.minute.prev = s
	if w.minute.sent >= w.minute.allowed {
		w.minute.allowed = min(w.minute.allowed*2, w.minuteMaxStep())
		w.minute.sent = 0
	}
	if w.minute.sent == 0 {
		w.minute.step = s
	}
	w.minute.sent++
}

// minuteMaxStep is the largest step of a freed minute's resumption, at
// least one call. A quota that fell since it was named refuses the step
// under way when it runs out, at once: a share of the budget's calls
// (minuteSteps) bounds that, and a larger one (minuteStepsAfforded) only
// while the 429s the run has earned (minuteAfford of the calls the quota
// admitted, less those it refused) cover it.
func (w *law) minuteMaxStep() int {
	budget, _ := w.minuteBudget()
	calls := budget / w.minuteUnit(w.minute.tokens)
	step := calls / minuteSteps
	if afford := minuteAfford*float64(w.minute.admitted) - float64(w.minute.refused); afford > step {
		step = min(afford, calls/minuteStepsAfforded)
	}
	return max(1, int(step))
}

// minuteLookBegins reports whether the call starting at s is the first
// of a look above the budget (see minuteLook), which then goes on a
// step of its own from one call: a quota that has not grown refuses the
// look's first call, not a step of them. It begins a look that is due.
func (w *law) minuteLookBegins(s time.Time) bool {
	m := &w.minute
	if m.next.IsZero() {
		return false
	}
	budget, _ := w.minuteBudget()
	if m.look == 0 && !s.Before(m.next) {
		m.look = w.minuteExtra(s)
	}
	if m.look == 0 || m.looking {
		return false
	}
	if w.minuteHeld(w.minuteFrom(s), s, s, m.tokens)+w.minuteCost(w.nextSize) <= w.minuteRoom(budget)+m.above {
		return false // the budget proven has room yet
	}
	m.looking = true
	return true
}

// minuteExtra is what the count may hold at t beyond the budget: what
// looks proved, or the look under way or due then (a stair above, or
// straight back to where the quota fell from: one that fell often comes
// back as it went).
func (w *law) minuteExtra(t time.Time) float64 {
	m := &w.minute
	if m.look > 0 || m.next.IsZero() || t.Before(m.next) {
		return max(m.above, m.look)
	}
	budget, _ := w.minuteBudget()
	extra := m.above + minuteLookStair*budget
	if m.fell > budget {
		extra = m.fell - budget
	}
	if !w.minuteCounts(budget+extra, m.tokens) {
		return m.above // no look past what the ring counts
	}
	return extra
}

// minuteLookAdmitted folds in a success of the call started at started
// while a look above the budget is under way: what the count holds of
// admitted calls beyond the budget proven is the quota's to give, and
// once it holds the look's whole stair the look has shown a quota that
// grew: the next one comes a minute later.
func (w *law) minuteLookAdmitted(started time.Time, budget float64) {
	m := &w.minute
	if m.look == 0 {
		return
	}
	// Admitted calls only, up to the last start: those in flight prove
	// nothing yet.
	last := w.lastStart
	over := w.minuteHeld(w.minuteFrom(last), last.Add(time.Nanosecond), time.Time{}, m.tokens) - w.minuteRoom(budget)
	m.above = max(m.above, min(over, m.look))
	if m.above >= m.look-w.minuteUnit(m.tokens) {
		m.look, m.looking, m.calm = 0, false, 0
		m.next = started.Add(minuteSpan)
	}
}

// minuteLookRefused folds in a 429 at t while the law sends by the
// minute with no contradiction. Under a look, it ends the look (what it
// proved stays); otherwise the quota no longer admits what a look proved
// above the budget, and the law goes back to the budget. The next look
// waits minuteLookAfter, twice as long for each look refused in a row.
func (w *law) minuteLookRefused(t time.Time) {
	m := &w.minute
	if m.next.IsZero() {
		return
	}
	if m.look > 0 && m.fell == 0 {
		m.calm = min(m.calm+1, maxCalm)
	} else if m.look == 0 {
		m.above = 0
	}
	m.look, m.looking = 0, false
	m.next = t.Add(minuteLookAfter << m.calm)
	if m.fell > 0 {
		m.next = t.Add(minuteSpan) // below where it fell from: look each minute
	}
}
