package postgres

import (
	"math"
	"testing"
	"time"
)

// TestQuotaRow_Law steps the fleet's law through single events at exact
// instants and checks the pace each leaves.
func TestQuotaRow_Law(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	const lag = 2 * time.Second
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	paced := func(rate float64) quotaRow {
		return quotaRow{Every: everyFor(rate), MarkAt: t0, Bounded: true}
	}
	for _, c := range []struct {
		name string
		row  quotaRow
		step func(quotaRow) quotaRow
		want float64 // the pace after, grants a second
	}{
		{
			name: "first event: just under what the quota admitted (spread over half a lag at least)",
			row:  quotaRow{MarkAt: t0, Granted: 160, Limited: 10},
			step: func(r quotaRow) quotaRow { return r.limited(at(500*time.Millisecond), true, 0, 0, lag) },
			want: fleetEventBackoff * 150, // 150 admitted over max(0.5 s, 1 s)
		},
		{
			name: "first event with too few calls to read: still unpaced",
			row:  quotaRow{MarkAt: t0, Granted: 5},
			step: func(r quotaRow) quotaRow { return r.limited(at(time.Second), true, 0, 0, lag) },
			want: 0,
		},
		{
			name: "a late 429 of an event already answered changes no rate",
			row:  paced(100),
			step: func(r quotaRow) quotaRow { return r.limited(at(time.Second), false, 0, 0, lag) },
			want: 100,
		},
		{
			name: "event overrunning the quota: under what it admitted, not just under the rate",
			row:  quotaRow{Every: everyFor(120), MarkAt: t0, Granted: 240, Limited: 40, Bounded: true},
			step: func(r quotaRow) quotaRow { return r.limited(at(2*time.Second), true, 0, 0, lag) },
			want: fleetEventBackoff * 100, // (240 - 40) / 2 s
		},
		{
			name: "event above a safe rate: halfway between",
			row:  quotaRow{Every: everyFor(110), Safe: 90, MarkAt: t0, Bounded: true},
			step: func(r quotaRow) quotaRow { return r.limited(at(100*time.Millisecond), true, 0, 0, lag) },
			want: 100,
		},
		{
			name: "held a lag at the rate with no refused rate known: one even stair",
			row:  quotaRow{Every: everyFor(100), MarkAt: t0, Granted: 200, Bounded: true},
			step: func(r quotaRow) quotaRow { r, _ = r.held(at(lag), lag); return r },
			want: 100 * fleetProbeStair,
		},
		{
			name: "unbounded (only slow start's burst read): the third stair is two steps",
			row:  quotaRow{Every: everyFor(100), MarkAt: t0, Granted: 200, Stairs: 2},
			step: func(r quotaRow) quotaRow { r, _ = r.held(at(lag), lag); return r },
			want: 100 * (1 + 2*(fleetProbeStair-1)),
		},
		{
			name: "held but not sent at: no step",
			row:  quotaRow{Every: everyFor(100), MarkAt: t0, Granted: 100, Bounded: true},
			step: func(r quotaRow) quotaRow { r, _ = r.held(at(lag), lag); return r },
			want: 100,
		},
		{
			name: "held too briefly: no step",
			row:  quotaRow{Every: everyFor(100), MarkAt: t0, Granted: 200, Bounded: true},
			step: func(r quotaRow) quotaRow { r, _ = r.held(at(lag/2), lag); return r },
			want: 100,
		},
		{
			name: "held under a refused rate: bisect",
			row:  quotaRow{Every: everyFor(90), Refused: 100, MarkAt: t0, Granted: 180, Bounded: true},
			step: func(r quotaRow) quotaRow { r, _ = r.held(at(lag), lag); return r },
			want: 95,
		},
		{
			name: "a given rate caps the climb",
			row:  quotaRow{Every: everyFor(99), Given: everyFor(100), MarkAt: t0, Granted: 198, Bounded: true},
			step: func(r quotaRow) quotaRow { r, _ = r.held(at(lag), lag); return r },
			want: 100,
		},
		{
			name: "a retry delay longer than the lag is the quota's window: held that long",
			row:  quotaRow{Every: everyFor(100), MarkAt: t0, Granted: 200, Bounded: true, Window: 10 * time.Second},
			step: func(r quotaRow) quotaRow { r, _ = r.held(at(lag), lag); return r },
			want: 100,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := c.step(c.row).rate()
			if math.Abs(got-c.want) > 0.01*max(c.want, 1) {
				t.Fatalf("pace %.2f a second, want %.2f", got, c.want)
			}
		})
	}
}

// TestQuotaRow_MeasuresAfterTheCooldown: an event's cooldown holds the
// fleet; the next measurement of what the quota admitted starts when it
// ends, not while nothing may be sent.
func TestQuotaRow_MeasuresAfterTheCooldown(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	r := quotaRow{Every: everyFor(100), MarkAt: t0, Granted: 300, Bounded: true}
	r = r.limited(t0.Add(3*time.Second), true, time.Second, 0, 2*time.Second)
	if want := t0.Add(4 * time.Second); !r.MarkAt.Equal(want) || !r.CooldownUntil.Equal(want) {
		t.Fatalf("mark at %s, cooldown until %s; want both at %s", r.MarkAt, r.CooldownUntil, want)
	}
	if _, ok := r.admittedRate(t0.Add(3500*time.Millisecond), 0, 0); ok {
		t.Fatal("an admitted rate read during the cooldown")
	}
}

// TestWorkerLaw_TimedOut: a worker's timeouts cut its limit only as a
// wave (limiter.TimeoutWaves), to half its calls then in flight, once
// per wave; a call started after the cut that times out again counts
// toward the next; the cut ends slow start and the limit grows back a
// call per waveGrowRoundTrips round trips.
func TestWorkerLaw_TimedOut(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	const deadline = 2 * time.Second
	type timeout struct {
		after    time.Duration // when it came back, from t0
		inFlight int
	}
	// wave is n timeouts a millisecond apart from at, of calls sent a
	// deadline before, with inFlight calls in flight at the first.
	wave := func(n, inFlight int, at time.Duration) []timeout {
		var ts []timeout
		for i := range n {
			ts = append(ts, timeout{at + time.Duration(i)*time.Millisecond, inFlight - i})
		}
		return ts
	}
	for _, tc := range []struct {
		name      string
		roundTrip time.Duration // answered before the timeouts; 0: none
		timeouts  []timeout
		wantLimit float64
		wantCuts  int
	}{
		{"a lone timeout is a tail's outlier", 0, wave(1, 40, 5*time.Second), 40, 0},
		{"three make a wave: half the calls then in flight", 0, wave(3, 30, 5*time.Second), 14, 1},
		{"answers ten times a span: three of 30 are no wave", deadline / 10, wave(3, 30, 5*time.Second), 40, 0},
		{"the rest of the wave cuts no further", 0, append(wave(3, 30, 5*time.Second), wave(20, 27, 5*time.Second+3*time.Millisecond)...), 14, 1},
		{"calls sent after the cut that time out again cut again", 0,
			append(wave(3, 30, 5*time.Second), wave(3, 14, 5*time.Second+deadline+time.Second)...), 6, 2},
		{"never below the floor", 0, wave(3, 3, 5*time.Second), 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := workerLaw{floor: 1, ceiling: 64, factor: DefaultFleetDecrease, increaseEvery: time.Second, limit: 40, slowStart: true}
			if tc.roundTrip > 0 {
				w.answered(tc.roundTrip)
			}
			cuts := 0
			for _, to := range tc.timeouts {
				if w.timedOut(t0.Add(to.after), t0.Add(to.after-deadline), to.inFlight) {
					cuts++
				}
			}
			if w.limit != tc.wantLimit || cuts != tc.wantCuts {
				t.Fatalf("limit %.1f after %d cuts, want %.1f after %d", w.limit, cuts, tc.wantLimit, tc.wantCuts)
			}
			if cuts > 0 && w.slowStart {
				t.Fatal("still in slow start after a wave of timeouts")
			}
		})
	}
}

// TestWorkerLaw_GrowsBackSlowlyAfterAWave: after a wave the limit grows
// a call per waveGrowRoundTrips round trips (limit successes make one),
// not a call per increaseEvery nor a call a success: each wave costs most
// calls then in flight a timeout and a second paid call.
func TestWorkerLaw_GrowsBackSlowlyAfterAWave(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	w := workerLaw{floor: 1, ceiling: 64, factor: DefaultFleetDecrease, increaseEvery: time.Millisecond, limit: 40, slowStart: true}
	for i := range 3 {
		w.timedOut(t0.Add(5*time.Second+time.Duration(i)*time.Millisecond), t0.Add(3*time.Second), 30)
	}
	if w.limit != 15 {
		t.Fatalf("limit %.1f after the wave, want 15", w.limit)
	}
	now := t0.Add(6 * time.Second)
	for range 15 * waveGrowRoundTrips { // waveGrowRoundTrips round trips of 15 calls, a second apart each
		now = now.Add(time.Second)
		w.succeeded(now, false)
	}
	if w.limit < 15.9 || w.limit >= 17 {
		t.Fatalf("limit %.2f after %d round trips of successes, want about 16", w.limit, waveGrowRoundTrips)
	}
}

// TestWorkerLaw_GrowsBackNoFasterThanIncreaseEvery: after a wave, calls
// that answer within a few milliseconds make their round trips' worth of
// growth quickly, but the limit still grows by no more than a call per
// increaseEvery, as FleetLimitConfig.IncreaseEvery promises.
func TestWorkerLaw_GrowsBackNoFasterThanIncreaseEvery(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	w := workerLaw{floor: 1, ceiling: 64, factor: DefaultFleetDecrease, increaseEvery: time.Second, limit: 40, slowStart: true}
	for i := range 3 {
		w.timedOut(t0.Add(5*time.Second+time.Duration(i)*time.Millisecond), t0.Add(3*time.Second), 30)
	}
	now := t0.Add(5*time.Second + 10*time.Millisecond)
	for range 15 * waveGrowRoundTrips * 10 { // ten calls' worth of round trips, a millisecond apart
		now = now.Add(time.Millisecond)
		w.succeeded(now, false)
	}
	if w.limit >= 16 { // 610 ms since the wave: not a whole increaseEvery
		t.Fatalf("limit %.2f %v after the wave, want under 16 (+1 per increaseEvery %v at most)", w.limit, now.Sub(t0.Add(5*time.Second)), w.increaseEvery)
	}
	now = now.Add(time.Second)
	w.succeeded(now, false)
	if w.limit < 16 || w.limit >= 17 {
		t.Fatalf("limit %.2f after an increaseEvery more, want 16", w.limit)
	}
}
