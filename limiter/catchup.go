package limiter

import "time"

// Sending by a sliding log's window, once slow start's 429 has shown it.
// A client that paces a quota's rate evenly sends at most that rate in
// any stretch of time, and loses what it cannot send: while the runner
// holds the calls back (503 "overloaded", see hold.go), or while slow
// start's burst still fills the window. A sliding log admits a call
// whenever it holds fewer than its budget, so a client that knows its
// window can send as it does: each call as soon as its own starts over
// the window leave room, the calls a hold kept back at once when it
// opens, slow start's burst again a window after it, as the perfect
// client does. The law does so, at the paced rate's share of the budget
// and at most catchUpSpeed times the rate, once it knows the window.
// That needs the window itself, to within a percent: in virtual time
// (bench/RESULTS.md) a window read 0.5% short refused 2% of calls, and
// an evenly paced log never shows it. Slow start's first 429 does, when
// the server names its budget: see readWindow and readWindowReopened. A
// 429 at the named pace then says the quota counts otherwise, and the
// law paces evenly again (windowRefused).

// The calls slow start had admitted when its first 429 came match the
// budget a window of the read length holds within windowSlack calls, or
// windowSlackShare of the budget when more; or, read long, up to
// windowLongShare of it more: the first call often reaches the server
// late (a connection opened: 3-24 ms of a 1 s window in five runs on a
// local simulator, and likely more in the two of another five whose
// reading a 3% bound refused), and the count, not the length, then gives
// the window.
const (
	windowSlack      = 2
	windowSlackShare = 0.03
	windowLongShare  = 0.1
)

// windowMargin lengthens the window read (see readWindow).
const windowMargin = 0.01

// minDelayShare: the retry delay must be at least this share of the
// window read, or the reading would rest on the count alone (a delay
// within the slack of a span the calls were sent evenly over agrees with
// any count).
const minDelayShare = 0.1

// catchUpSpeed: sending by the window, the law starts calls at most this
// many times as fast as the paced rate. All at once, the calls a hold
// kept back crowd the server (each reaches it later than it started, so
// a window later the law's stamps and the quota's log part by as much),
// and more of them meet the next overload; at three times the rate the
// calls a hold kept back still go within half a hold's length.
const catchUpSpeed = 3

// readWindow folds in slow start's 429 of the call started at started,
// whose exact retry delay says the quota admits a call again at
// started+retryAfter. A sliding log of B calls over a window W refuses a
// call while it holds B, and frees its oldest a window after it came. If
// slow start spent the quota within a window of its first start, that
// oldest is the first start, so W is started+retryAfter-firstStart, and
// the calls admitted since the first start are B: W times the named
// requests per minute's rate. When the count and the length agree the
// window is known. Slow start sends in doubling bursts, so they seldom
// agree by chance: a token bucket frees a call's worth in a moment, a
// log spent over more than a window holds fewer calls than were sent, a
// budget in tokens counts calls of many sizes, a rounded delay is late.
// A fixed window whose first call came in its first few percent does
// read as a sliding log (its boundary is then about a window after the
// first start); the law then sends by a sliding window of its length,
// which a fixed window admits (fixed-exact in TestLaw_matrixShapes).
func (w *law) readWindow(started time.Time, retryAfter time.Duration) {
	if w.namedRPM <= 0 || w.namedTPM > 0 || uncertain(retryAfter) || w.firstStart.IsZero() {
		return
	}
	win := started.Add(retryAfter).Sub(w.firstStart)
	if win <= 0 || win > maxWindow || retryAfter < time.Duration(minDelayShare*float64(win)) {
		return
	}
	rate := float64(w.namedRPM) / 60
	budget := rate * win.Seconds()
	if budget*(1+windowSlackShare) >= sentRing/2 {
		return // more starts than the law keeps with room: it cannot count a window's
	}
	n := w.admittedFrom(w.firstStart, started)
	if n-budget > max(windowSlack, windowSlackShare*budget) || budget-n > max(windowSlack, windowLongShare*budget) {
		return
	}
	// The count is exact to a call or two where the length is not: the
	// first call often reaches the server milliseconds after it started
	// (a connection opened), which reads the window that much long (see
	// windowLongShare), and a refused call
	// slowed so reads it short. A window read short refuses calls when a
	// burst leaves it, one read long sends less than the quota admits. So
	// the length is taken within the count's reach: no shorter than the
	// count's window, no longer than that of windowSlack calls more; and
	// a margin added.
	perCall := float64(time.Second) / rate
	win = max(time.Duration(n*perCall), min(win, time.Duration((n+windowSlack)*perCall)))
	w.knowWindow(win)
}

// readWindowReopened folds in the first probe the quota admitted after
// slow start's 429, started at started, when its 429s rounded their
// delays (see reopenedAfterSlowStart): n calls of slow start's burst
// were admitted. A sliding log spent within a window of the first start
// refused every probe until that start left it, and admits the next:
// its window is longer than the last refused probe came after the first
// start, and no longer than this one did. When the window the count
// gives at the named rate falls between the two, it is the window. (A
// token bucket admits the first probe: no reading. A fixed window reads
// its own length when the probe came after a window, and the law then
// holds starts by a sliding window of that length, which a fixed window
// admits.)
func (w *law) readWindowReopened(started time.Time, n float64) {
	if w.knownWindow > 0 || !w.firstFromSlowStart || w.bounded || w.backoffs < 2 || w.namedRPM <= 0 || w.namedTPM > 0 || w.refusedProbe.IsZero() || w.firstStart.IsZero() {
		return
	}
	rate := float64(w.namedRPM) / 60
	if n*(1+windowSlackShare) >= sentRing/2 {
		return
	}
	perCall := float64(time.Second) / rate
	lo, hi := w.refusedProbe.Sub(w.firstStart), started.Sub(w.firstStart)
	counted := time.Duration(n * perCall)
	slack := time.Duration(max(windowSlack, windowSlackShare*n) * perCall)
	if counted+slack <= lo || counted-slack > hi || hi > maxWindow {
		return
	}
	w.knowWindow(max(lo, min(hi, time.Duration((n+windowSlack)*perCall))))
}

// knowWindow records the quota's window as win, with the margin, for the
// budget named now, and sends by it from now on: the calls after slow
// start's burst start as fast as it lets them (see paceFloor), and the
// limit on calls in flight fits the fastest they may start (see
// law.fitLimit). When slow start's 429 also started a replay of its
// burst (replay.go: a delay longer than slow start lasted), the replay
// holds the calls until it ends, and the window binds from then on; the
// replay, which follows the burst call by call, did better on a real
// per-minute window (minute-ample: 0.939 against 0.915 in virtual time).
func (w *law) knowWindow(win time.Duration) {
	w.knownWindow = time.Duration(float64(win) * (1 + windowMargin))
	w.windowRPM = w.namedRPM
	// The paced schedule no longer holds back what the window lets
	// through: slow start's burst goes again as the window frees it.
	w.tat = time.Time{}
	w.fitLimit()
}

// windowBinds reports whether the law sends by the known window: one is
// known, no replay of slow start's burst holds the calls instead (see
// replay.go), the law paces a rate, and requests bind, not tokens.
func (w *law) windowBinds() bool {
	return w.knownWindow > 0 && w.replay.next >= w.replay.end && w.rate > 0 && !w.tokensBind()
}

// paceFloor is the earliest the paced schedule may stand when a call
// starts at t: t itself (a schedule behind it is not made up), or, while
// the law sends by the window, a window before t: the calls a hold (or
// slow start's burst, or idle time) kept back, and those a window later
// when the log drops them, start as fast as windowHold lets them.
func (w *law) paceFloor(t time.Time) time.Time {
	if !w.windowBinds() {
		return t
	}
	return t.Add(-w.knownWindow)
}

// windowHold is the earliest instant after t the next call may start by
// the known window: no more starts over any window than the paced rate
// fills it with, every start counted but the refused (a failed call too,
// which errs on the side of the quota), and no faster than catchUpSpeed
// times the rate. Zero when the window does not bind (see windowBinds).
func (w *law) windowHold(t time.Time) time.Time {
	if !w.windowBinds() {
		return time.Time{}
	}
	h := w.lastStart.Add(time.Duration(float64(w.interval()) / catchUpSpeed))
	// The starts a window may hold: the k-th latest the quota counted
	// (a refused call takes no slot) holds the next until it leaves.
	k := int(w.rate * w.knownWindow.Seconds())
	if k < 1 {
		return h
	}
	kept := min(w.nSent, sentRing)
	if k <= kept && !w.sent[(w.nSent-k)%sentRing].at.Add(w.knownWindow).After(t) {
		return h // fewer than k starts of any outcome in the window: no scan
	}
	n := 0
	for i := 1; i <= kept; i++ {
		c := &w.sent[(w.nSent-i)%sentRing]
		leaves := c.at.Add(w.knownWindow)
		if !leaves.After(t) {
			return h // out of the window, and every start before it
		}
		if c.outcome == refusedCall {
			continue
		}
		if n++; n == k {
			return later(h, leaves)
		}
	}
	if kept == sentRing {
		// Every start the law keeps is in the window, and fewer than k
		// of them counted: the next waits for the oldest kept to leave,
		// as the law cannot count further back.
		return later(h, w.sent[w.nSent%sentRing].at.Add(w.knownWindow))
	}
	return h
}

// windowStarts counts the starts the quota counted (refused ones left
// out) within the known window up to t.
func (w *law) windowStarts(t time.Time) float64 {
	n := 0.0
	for i := 1; i <= min(w.nSent, sentRing); i++ {
		c := &w.sent[(w.nSent-i)%sentRing]
		if !c.at.Add(w.knownWindow).After(t) {
			break
		}
		if c.outcome != refusedCall {
			n++
		}
	}
	return n
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// windowRefused folds in a congestion event. A 429 of a look above the
// budget the window was read with, naming that same budget, is the look's
// answer; one naming a higher budget, a quota grown over the same window.
// Any other, with the window known, says the quota does not
// count as the law does (the window read short, the quota shared or
// fallen, a budget in tokens binding now), and a burst sent by that
// reckoning would be refused: the pace goes back to even, as with no
// window known.
func (w *law) windowRefused() {
	if w.knownWindow <= 0 {
		return
	}
	if w.namedTPM == 0 && w.namedRPM > w.windowRPM {
		// A higher budget named: the quota grew, over the same window.
		w.windowRPM = w.namedRPM
		return
	}
	if w.namedTPM == 0 && w.namedRPM == w.windowRPM && w.rate > w.namedRate()*namedShare*1.001 {
		return
	}
	w.knownWindow = 0
	w.fitLimit() // back to the limit an even pace needs
}
