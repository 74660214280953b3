package limiter

import (
	"math"
	"time"
)

// How the law's rate climbs while nothing is refused: the bisection
// between the rate proven safe and the rate last refused, the stairs
// above when no refusal bounds it, and the climb back to the rate a
// quota that fell had admitted; and what a refusal says of the rate
// proven safe and of how soon to look above it again (reviseSafe), as
// the climb starts over from that. The events that move the state live
// in law.go; these are the steps they schedule.

// grow moves the rate on once it has been held for the quota's answer
// lag (see answerLag) with no 429 while pacing held the calls back: that
// rate is safe, and the next is halfway to the rate last refused, or a
// stair above when none is known. A bisection finds the quota's rate in a
// few lags, and a stair now and then finds a quota that grew.
func (w *law) grow(t time.Time) {
	if judged, atRate := w.sendingAtRate(t); !atRate {
		if judged {
			w.probeFrom = t // not sending at the rate proves nothing about it
		}
		return
	}
	if t.Sub(w.probeFrom) < w.growLag() {
		return
	}
	base := w.rate // held too briefly to be proven: the first 429 reads the quota
	if w.bounded {
		w.safe = max(w.safe, w.rate)
		base = w.safe
	}
	w.held++
	// Below the rate the quota admitted before it fell, look again after
	// one lag while no look has been refused; after two when one has but
	// looks are cheap (bare 429s: a light gate, one call refused).
	belowPeak := w.peak > w.rate && w.held > min(w.calm, 1) && (w.calm == 0 || w.bareEvent)
	if w.refused > 0 && (w.held > reprobeLags<<w.calm || belowPeak) {
		w.refused = 0 // long at the safe rate: look for more again
	}
	w.nextRate(base, w.lookAboveNamed())
	w.rate = min(w.rate, w.maxRate())
	if w.peak > 0 && w.rate >= w.peak {
		// Back at the rate the quota admitted before it fell. A quota
		// that came back as it went is bounded where it was: look above
		// it from the rate refused then, not in the stairs of the climb
		// back, which would look far above it.
		w.peak = 0
		if w.peakBound > w.rate {
			w.refused, w.stairs, w.held = w.peakBound, 0, 0
		}
		w.peakBound = 0
	}
	w.probeFrom = t
}

// growLag is how long grow holds a rate before it counts as safe: the
// quota's answer lag, shorter while the climb is unbounded or stairs
// keep holding.
func (w *law) growLag() time.Duration {
	lag := w.answerLag()
	if !w.bounded {
		// Only slow start's burst was refused, which says little about
		// the quota's rate: climb as fast as its round trips answer.
		lag = max(firstClimbRoundTrips*w.latency(), w.window)
	} else if w.stairs >= 2 || w.stairs >= 1 && (w.window > 0 || w.rate < w.peak) {
		// Stairs held: the quota grew; climb on in half lags (no less
		// than its window, when a retry delay showed one, else after
		// two stairs, when it grew for sure).
		lag = max(lag/2, w.window)
	}
	return lag
}

// lookAboveNamed reports whether the rate has been held at a budget a
// 429 named long enough to look above it; if so it forgets the budget
// and starts the stairs over from the first.
func (w *law) lookAboveNamed() bool {
	hold := namedHoldLags << w.calm
	switch {
	case w.namedMoved && w.peak > w.rate:
		// A live quota below the rate it admitted before it fell:
		// look above the budget named every lag, as it often comes
		// back (a look refused costs a 429 that names it again).
		hold = 0
	case w.namedMoved:
		hold = namedMovedHoldLags << w.calm
	}
	if w.minute.on {
		return false // it looks above by the minute (see minuteLookBegins)
	}
	if named := w.namedRate(); named > 0 && w.rate >= named*namedShare*0.999 && w.held > hold {
		// Long at the budget a 429 named, with no 429: the quota may
		// have grown past it since (a quota named while it was down,
		// a tier raised). Look above it from the first stair; a 429
		// there names it again, and the next look waits twice as long.
		w.namedRPM, w.namedTPM = 0, 0
		w.stairs = 0
		return true
	}
	return false
}

// nextRate sets the rate grow moves to from base, the rate just proven:
// a stair above it while nothing bounds the quota (or the climb back to
// the rate admitted before a fall), halfway to the rate last refused,
// or base itself once the two are close.
func (w *law) nextRate(base float64, namedLook bool) {
	switch {
	case w.refused == 0:
		// Stairs up, each twice the last while none is refused: a
		// quota that grew far is found in a few lags, one that did not
		// is overshot by a few percent.
		w.rate = base * (1 + (probeStair-1)*float64(int(1)<<min(w.stairs, 4)))
		stair := true
		if top := w.climbTowardTop(base); top > w.rate {
			// The stairs above slow start's top begin from the first.
			w.rate, stair = top, false
		}
		if w.peak > base && !namedLook {
			// Below the rate the quota admitted before it fell: climb
			// back to it in larger stairs; straight to it once a stair
			// held in a run whose 429s named different budgets (a live
			// quota, which comes back as it went).
			w.rate = min(base*(1+(probeStair-1)*float64(int(1)<<min(w.stairs+peakStairs, 4))), w.peak)
			if w.namedMoved && w.stairs > 0 {
				w.rate = w.peak
			}
		}
		if stair {
			w.stairs++
		}
		w.increases++
	case w.refused-w.safe > bisectShare*w.refused:
		w.rate = (w.safe + w.refused) / 2
		w.increases++
	default:
		w.rate = w.safe
	}
}

// fellFrom records that the quota fell below safe, the rate it had
// admitted, which the law will climb back to (peak), and the rate
// refused above it then (0 if none), which bounds the quota once it is
// back (see grow). A fall below a peak not yet reached again keeps that
// peak and its bound.
func (w *law) fellFrom(safe, refused float64) {
	if safe >= w.peak {
		w.peakBound = 0
		if refused > safe {
			w.peakBound = refused
		}
	}
	w.peak = max(w.peak, safe)
}

// climbTowardTop is the next stair from base while only slow start's
// 429 has come: the geometric middle of base and topShare of the rate
// slow start's last round trip was admitted at (see slowTop), 0 once a
// paced 429 bounds the quota or base is near it. Slow start's 429 sets
// the rate to the mean of a ramp that doubled each round trip, a fifth
// of the quota or less whenever slow start long outlasted the window;
// the round trip before its last was admitted whole. Halving the gap
// in stairs that are each proven comes near it in a few of them, where
// stairs of 5%, 10%, 20%... took ten, and a stair the quota refuses
// bounds it as any paced 429 does.
func (w *law) climbTowardTop(base float64) float64 {
	if w.bounded || w.slowTop*topShare < base*probeStair {
		return 0
	}
	return math.Sqrt(base * w.slowTop * topShare)
}

// reviseSafe folds into the safe rate, and into how often the law looks
// above it, a refusal at the current rate while the quota admitted
// admittedRate over its window (measured: that reading holds). A refusal
// at or below the safe rate means the quota fell, unless the quota still
// admits about it; one at the first stair above it means the quota has
// not grown, and one past it that the quota did.
func (w *law) reviseSafe(admittedRate float64, measured bool) {
	switch {
	case measured && admittedRate < w.safe*fellShare:
		w.fellFrom(w.safe, w.refused)
		w.safe, w.calm = 0, 0 // it admits less than the safe rate now: the quota fell
	case w.rate <= w.safe*1.001 && measured && admittedRate >= w.safe*eventBackoff:
		// Refused at the safe rate while the quota admits about
		// it: the safe rate was a hair above the quota's, which a
		// window shows only now and then. Go just under it.
		w.safe *= eventBackoff
	case w.rate <= w.safe*1.001:
		w.fellFrom(w.safe, w.refused)
		w.safe = 0 // refused at a rate it admitted: the quota fell
		w.calm = 0
	case w.safe > 0 && w.stairs == 1:
		// The first stair above the safe rate is refused: the
		// quota has not grown. Look again less often.
		w.calm = min(w.calm+1, maxCalm)
	case w.stairs > 1:
		w.calm = 0 // a stair held: the quota grew
	}
}
