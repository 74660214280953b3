package postgres

import (
	"math"
	"time"

	"github.com/sawtooth-dev/sawtooth/limiter"
)

// One worker's law on its own calls in flight, beside the fleet's shared
// rate law (fleetlaw.go): the quota row paces the fleet, and each worker
// bounds how many of its calls wait on that pace or on a slowing server.

// workerLaw is one worker's limit on calls in flight, pure: slow start
// (+1 a success) until the fleet's first congestion event or this
// worker's first wave of timeouts, then +1 per increaseEvery at most,
// one multiplicative decrease per fleet event, and a cut to half the
// calls in flight per wave of timeouts (see timedOut).
type workerLaw struct {
	floor, ceiling float64
	factor         float64       // the decrease per event, 0 < factor < 1
	increaseEvery  time.Duration // the additive increase's pace
	limit          float64
	slowStart      bool
	grown          time.Time // when the limit last moved after slow start

	// waves reads this worker's timeouts as the single process's law
	// does (limiter.TimeoutWaves); waveCut is when a wave last cut the
	// limit (calls started by then belong to that wave), zero before.
	waves   limiter.TimeoutWaves
	waveCut time.Time
	// waveCuts counts the waves that cut the limit (see sentAfterCut).
	waveCuts int
	// roundTrip is the smoothed round trip of this worker's answered
	// calls, 0 before the first (see answered).
	roundTrip time.Duration
}

const (
	// roundTripWeight is the weight of one answer in workerLaw.roundTrip,
	// the single process's (limiter's ewmaWeight).
	roundTripWeight = 1.0 / 8
	// waveGrowRoundTrips: after a wave of timeouts the limit grows back a
	// call per this many of the worker's round trips, as the single
	// process's cap does (limiter's capGrowRoundTrips). A server that
	// answers later as calls grow refuses nothing, so the next wave is
	// the only sign of having grown too far, and each costs a timeout
	// (a second paid call) for most calls then in flight: grown back
	// +1 per IncreaseEvery (a quarter second), 4 and 8 workers made a
	// wave every few seconds (fleettimeout_sim_test.go: 28 and 76 waves,
	// 835 and 1,157 timed-out calls for 3,000 items).
	waveGrowRoundTrips = 4
)

// decrease applies n fleet congestion events at now. paced: the fleet
// keeps to a rate through the quota row's schedule, which the event has
// lowered; then the calls in flight are not what to lower (a limit cut
// event after event would come to bind below the fleet's rate), and
// slow start only ends.
func (w *workerLaw) decrease(n int, now time.Time, paced bool) {
	if n <= 0 {
		return
	}
	w.slowStart = false
	w.grown = now
	if !paced {
		w.limit = max(w.floor, w.limit*math.Pow(w.factor, float64(n)))
	}
}

// succeeded grows the limit for a success at now. waited: the call
// waited for its slot in the fleet's schedule, so the pace, not the
// calls in flight, bound it; the limit then stays (more calls in flight
// would only book slots further ahead, and a 429 would find them booked
// at the old pace).
func (w *workerLaw) succeeded(now time.Time, waited bool) {
	if waited {
		return
	}
	if w.slowStart {
		w.limit++
	} else if !w.waveCut.IsZero() {
		// A call per waveGrowRoundTrips round trips, and, as after a
		// fleet event, no faster than +1 per increaseEvery (quick calls
		// would otherwise outpace the probe FleetLimitConfig promises).
		next := w.limit + 1/(waveGrowRoundTrips*max(w.limit, 1))
		if math.Floor(next) > math.Floor(w.limit) {
			if now.Sub(w.grown) < w.increaseEvery {
				next = w.limit
			} else {
				w.grown = now
			}
		}
		w.limit = next
	} else if now.Sub(w.grown) >= w.increaseEvery {
		w.limit++
		w.grown = now
	}
	w.limit = min(w.limit, w.ceiling)
}

// answered folds a success's round trip (from its start, after its
// slot in the fleet's schedule, to its answer) into roundTrip. The wave
// rule needs the calls' usual round trip only to tell how many calls
// ended within one timeout's span; the worker measures its own calls,
// which share the fleet's server and latency, rather than read a fleet
// figure from the quota row (a write per answer for nothing better). An
// average of the answers only: timeouts are not answers, and a server
// that slows as calls grow answers near the deadline anyway.
func (w *workerLaw) answered(roundTrip time.Duration) {
	roundTrip = max(roundTrip, time.Microsecond)
	if w.roundTrip <= 0 {
		w.roundTrip = roundTrip
		return
	}
	w.roundTrip += time.Duration(roundTripWeight * float64(roundTrip-w.roundTrip))
}

// timedOut folds in the call started at started that ran out its own
// deadline at now, with inFlight of this worker's calls (this one
// included) holding slots, and reports whether it cut the limit. A wave
// (limiter.TimeoutWaves) caps this worker's calls in flight at half of
// those then in flight (at least the floor), ends slow start, and from
// then on the limit grows back a call per waveGrowRoundTrips round trips
// (see succeeded), not +1 per increaseEvery as after a fleet event. Each
// worker cuts its own calls on its own timeouts: a server with no quota
// that answers later as calls grow answers every worker late, so each
// sees its own wave, and no 429 raises the quota row's epoch for the
// fleet to share.
func (w *workerLaw) timedOut(now, started time.Time, inFlight int) bool {
	wave, level := w.waves.TimedOut(now, started, w.waveCut, inFlight, w.roundTrip)
	if !wave {
		return false
	}
	w.waveCut = now // the calls in flight sent by now (see sentAfterCut)
	w.waveCuts++
	w.slowStart = false
	w.grown = now
	w.limit = max(w.floor, min(w.limit, float64(level)))
	return true
}

// sentAfterCut moves waveCut past started, the start of a call admitted
// before the last wave's cut that went out after it (it waited for its
// slot in the fleet's schedule): the call is of the wave that cut
// answered, and its timeout must not count toward the next (one cut per
// wave; the single process's law moves its decrease past every start
// stamp it handed out, for the same reason).
func (w *workerLaw) sentAfterCut(started time.Time) {
	w.waveCut = later(w.waveCut, started)
}
