package limiter

import "time"

// A window's quota spent by the first calls is spent at the pace they
// were sent: slow start sends a few calls at first, then hundreds a
// round trip. A sliding
// window frees its slots at that same pace a window later, so the rate
// paced when it reopens meets a log that frees a trickle for the first
// part of the window and a flood at its end, and each call sent into the
// trickle is refused: about a 429 per retry delay for the first half of
// the window (15-25 on a per-minute window of 1,800 calls of 1-3 s). A
// replay holds each start after the window reopens to the instant the
// slot of one of the window's admitted calls is freed: the call sent
// k-th after it reopens waits for the window to pass over the k-th call
// the quota admitted. A fixed window frees them all at once, earlier
// than that, so a replay there costs only calls held back within the
// first window after it reopens. It ends once every call of the spent
// window is replayed, as the law's rate then fits the window's pace.

// replay is a spent window to be replayed: the sends numbered from next
// to end (exclusive; w.nSent numbering), shifted by a window.
type replay struct {
	shift     time.Duration
	next, end int
}

// startReplay begins replaying the calls sent since the first start, on
// the first 429, whose exact retry delay says the window its calls spent
// opens again at reopen. The record of the calls must outlast the
// replay: each start after it consumes one of them before its own
// record is written, so the ring holds them while they are fewer than
// its length. (A window of more calls than that is not replayed.)
func (w *law) startReplay(reopen time.Time) {
	if w.nSent >= sentRing {
		return
	}
	w.replay = replay{shift: reopen.Sub(w.firstStart), next: 0, end: w.nSent}
}

// replayHold is the earliest instant the replay lets the next call start,
// zero when no replay holds it.
func (w *law) replayHold() time.Time {
	r := &w.replay
	for r.next < r.end && w.sent[r.next%sentRing].outcome == refusedCall {
		r.next++ // refused: it took no slot in the window
	}
	if r.next >= r.end {
		return time.Time{}
	}
	return w.sent[r.next%sentRing].at.Add(r.shift)
}

// replayed records a start the replay let through.
func (w *law) replayed() {
	if w.replay.next < w.replay.end {
		w.replay.next++
	}
}
