package postgres

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// The fleet against timeouts in virtual time: N workers, each with its
// workerLaw, book their calls in one quota row's schedule (its slow
// start: no 429 ever comes, so the row only paces) and send them to a
// server with no quota that answers later as the calls in flight across
// the fleet grow, with a client timeout after which the call is retried
// (and, on the real API, paid again). It is limiter's
// TestLaw_queueingServerTimeouts for a fleet. No 429 raises the row's
// epoch, so nothing of the timeouts goes through the row: each worker
// reads its own (FleetLimiter.TimedOut).

// timeoutSim is one simulated drain.
type timeoutSim struct {
	workers, items int
	// latency is how long the server takes to answer a call sent with
	// serving calls in flight across the fleet; one that takes deadline
	// or more times out then.
	latency  func(serving int) time.Duration
	deadline time.Duration
	// readTimeouts: the workers are told their timeouts (TimedOut); if
	// not, as any failure (Failed, as before FleetLimiter read them).
	readTimeouts bool
	until        time.Duration // the drain gives up after this long
}

// (items 0: no end; the drain runs until.)

// timeoutSimResult is what a drain measured.
type timeoutSimResult struct {
	answered, timeouts, waves int
	took                      time.Duration
	limits                    []int // each worker's limit at the end
}

// timeoutEvent is a call's next step: booked again (reserve), sent, or
// ended (answered or timed out).
type timeoutEvent struct {
	at      time.Time
	kind    int
	worker  int
	started time.Time
	waited  bool // the call waited for its slot in the row's schedule
	seq     int64
}

const (
	toReserve = iota
	toSend
	toAnswered
	toTimedOut
)

func (e timeoutEvent) order() (time.Time, int64) { return e.at, e.seq }

type timeoutQueue = eventQueue[timeoutEvent]

func (s timeoutSim) run() timeoutSimResult {
	start := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	row := quotaRow{MarkAt: start, Starting: true}
	ws := make([]*simWorker, s.workers)
	for i := range ws {
		ws[i] = &simWorker{law: workerLaw{floor: 1, ceiling: DefaultFleetCeiling, factor: DefaultFleetDecrease,
			increaseEvery: DefaultFleetCooldown / 4, limit: DefaultFleetStart, slowStart: true}}
	}
	var q timeoutQueue
	var seq int64
	push := func(e timeoutEvent) {
		seq++
		e.seq = seq
		heap.Push(&q, e)
	}
	var res timeoutSimResult
	left, serving := s.items, 0
	// reserve is SharedQuota.Reserve for worker i: a slot of the row's
	// schedule, booked no more than DefaultBookAhead ahead.
	reserve := func(now time.Time, i int, deferred bool) {
		tat := later(row.Tat, now)
		wait := tat.Sub(now)
		if row.Every > 0 && wait > DefaultBookAhead {
			push(timeoutEvent{at: now.Add(wait - DefaultBookAhead), kind: toReserve, worker: i, waited: true})
			return
		}
		row.Tat = tat.Add(row.Every)
		row.Granted++
		if next, changed := row.held(now, DefaultFleetProbeEvery); changed {
			row = next
		}
		push(timeoutEvent{at: tat, kind: toSend, worker: i, waited: deferred || wait > 0 && row.Every > 0})
	}
	pump := func(now time.Time, i int) {
		w := ws[i]
		for (s.items == 0 || left > 0) && w.inFlight < int(w.law.limit) {
			left--
			w.inFlight++
			reserve(now, i, false)
		}
	}
	for i := range ws {
		pump(start, i)
	}
	now := start
	for q.Len() > 0 && (s.items == 0 || res.answered < s.items) && now.Sub(start) < s.until {
		e := heap.Pop(&q).(timeoutEvent)
		now = e.at
		w := ws[e.worker]
		switch e.kind {
		case toReserve:
			reserve(now, e.worker, e.waited)
			continue
		case toSend:
			latency := s.latency(serving)
			serving++
			e.started = now
			if latency < s.deadline {
				e.at, e.kind = now.Add(latency), toAnswered
			} else {
				e.at, e.kind = now.Add(s.deadline), toTimedOut
			}
			push(e)
			continue
		case toAnswered:
			serving--
			w.inFlight--
			res.answered++
			w.law.answered(now.Sub(e.started))
			w.law.succeeded(now, e.waited)
		case toTimedOut:
			serving--
			w.inFlight--
			left++ // retried: a second call for the item
			res.timeouts++
			if s.readTimeouts && w.law.timedOut(now, e.started, w.inFlight+1) {
				res.waves++
			}
		}
		pump(now, e.worker)
	}
	res.took = now.Sub(start)
	for _, w := range ws {
		res.limits = append(res.limits, int(w.law.limit))
	}
	return res
}

// TestFleetLaw_QueueingServerTimeouts: 1, 4 and 8 workers against a
// server with no quota that serves 50 calls a second (20 ms plus 20 ms
// per call in flight across the fleet), a 2 s client timeout, 3,000
// items. Blind to timeouts, the workers' limits climb until nearly every
// call times out and is sent again; reading them, each worker caps its
// own calls at the first wave and the items finish with about that
// wave's timeouts, in under twice the time the server needs.
func TestFleetLaw_QueueingServerTimeouts(t *testing.T) {
	const (
		items    = 3000
		perCall  = 20 * time.Millisecond
		deadline = 2 * time.Second
	)
	for _, workers := range []int{2, 4, 8} {
		t.Run(fmt.Sprintf("%d workers", workers), func(t *testing.T) {
			latency := func(serving int) time.Duration { return 20*time.Millisecond + perCall*time.Duration(serving) }
			s := timeoutSim{workers: workers, items: items, latency: latency, deadline: deadline, until: 10 * time.Minute}
			blind := s.run()
			s.readTimeouts = true
			reading := s.run()
			t.Logf("reading timeouts: %d answered, %d timed out (%d waves), in %s, limits %v; blind to them: %d answered, %d timed out in %s, limits %v",
				reading.answered, reading.timeouts, reading.waves, reading.took, reading.limits,
				blind.answered, blind.timeouts, blind.took, blind.limits)
			if blind.timeouts < items/2 {
				t.Fatalf("the server times out only %d calls of a fleet blind to timeouts: the scenario tests nothing", blind.timeouts)
			}
			if reading.answered < items || reading.timeouts > items/8 {
				t.Errorf("%d of %d items answered, %d timed-out calls (each paid twice), want all and at most %d",
					reading.answered, items, reading.timeouts, items/8)
			}
			if perfect := time.Duration(items) * perCall; reading.took > 2*perfect {
				t.Errorf("took %s, more than twice the %s the server needs", reading.took, perfect)
			}
		})
	}
}

// TestFleetLaw_HeavyTailTimeouts: a server with no quota whose answers
// do not slow as the calls grow but have a heavy tail (a thinking model:
// lognormal, median 10 s), so that a few percent of the calls run out
// the 60 s timeout however few are in flight, one simulated hour. Cutting
// the calls in flight does not make those answers come sooner: a fleet
// reading its timeouts must answer about as many items as one blind to
// them. Each worker holds fewer calls than a single process would, and
// a wave needs 3 of its own timeouts at least, which a small worker's
// tail may reach at random.
func TestFleetLaw_HeavyTailTimeouts(t *testing.T) {
	const (
		median   = 10 * time.Second
		deadline = 60 * time.Second
	)
	run := func(workers int, sigma float64, readTimeouts bool) timeoutSimResult {
		rng := rand.New(rand.NewPCG(1, 7))
		latency := func(int) time.Duration { return time.Duration(float64(median) * math.Exp(sigma*rng.NormFloat64())) }
		s := timeoutSim{workers: workers, latency: latency, deadline: deadline, until: time.Hour, readTimeouts: readTimeouts}
		return s.run()
	}
	for _, tc := range []struct {
		workers int
		sigma   float64 // 0.8: 1.3% of the calls time out; 1.0: 3.7%
	}{{4, 0.8}, {4, 1.0}, {8, 1.0}} {
		blind, reading := run(tc.workers, tc.sigma, false), run(tc.workers, tc.sigma, true)
		t.Logf("%d workers, sigma %.1f: reading timeouts %d answered (%d timed out, %d waves, limits %v); blind %d answered (%d timed out)",
			tc.workers, tc.sigma, reading.answered, reading.timeouts, reading.waves, reading.limits, blind.answered, blind.timeouts)
		if float64(reading.answered) < 0.9*float64(blind.answered) {
			t.Errorf("%d workers, sigma %.1f: %d items answered in an hour reading timeouts, %d blind to them",
				tc.workers, tc.sigma, reading.answered, blind.answered)
		}
	}
}
