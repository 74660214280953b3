package limiter

import (
	"testing"
	"time"
)

// The law told of the runner's overload holds (onHeld, onOpened), driven
// through explicit instants.

func TestLaw_heldWithin(t *testing.T) {
	at := func(ms int) time.Time { return simEpoch.Add(time.Duration(ms) * time.Millisecond) }
	w := newTestLaw(Config{})
	w.onHeld(at(1000))
	w.onHeld(at(1100)) // already held: the hold began at 1000
	w.onOpened(at(1200))
	w.onOpened(at(1300)) // already open
	w.onHeld(at(2000))
	w.onOpened(at(2300))
	w.onHeld(at(3000)) // still held
	tests := []struct {
		name     string
		from, to time.Time
		want     time.Duration
	}{
		{"before any hold", at(0), at(1000), 0},
		{"all of one hold", at(900), at(1500), 200 * time.Millisecond},
		{"part of one hold", at(1100), at(1500), 100 * time.Millisecond},
		{"two holds", at(1000), at(2500), 500 * time.Millisecond},
		{"between holds", at(1200), at(2000), 0},
		{"the hold still on, up to to", at(2900), at(3250), 250 * time.Millisecond},
		{"everything", at(0), at(4000), 1500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := w.heldWithin(tt.from, tt.to); got != tt.want {
				t.Errorf("heldWithin = %v, want %v", got, tt.want)
			}
		})
	}
}

// A per-minute quota's window spans dozens of holds a second or two
// apart: every one of them counts, not the last few.
func TestLaw_heldWithin_manyHoldsInAWindow(t *testing.T) {
	at := func(ms int) time.Time { return simEpoch.Add(time.Duration(ms) * time.Millisecond) }
	w := newTestLaw(Config{})
	w.window = time.Minute
	const holds = 40 // every 1.5 s for 60 s, 200 ms each
	for i := range holds {
		w.onHeld(at(1500 * i))
		w.onOpened(at(1500*i + 200))
	}
	if got, want := w.heldWithin(at(0), at(60000)), holds*200*time.Millisecond; got != want {
		t.Errorf("heldWithin over the minute = %v, want %v", got, want)
	}
	// Holds older than the spans the law reads are let go.
	w.onHeld(at(10 * 60000))
	w.onOpened(at(10*60000 + 200))
	if n := len(w.holds.past); n != 1 {
		t.Errorf("%d holds kept nine minutes on, want only the last", n)
	}
}

// driveHeld is drive with the runner's overload hold closing every
// period for held (more than rtt): no call starts meanwhile, and the law
// is told when tell is set. One call started as the hold closes
// succeeds a round trip into it (a slow one). It returns the time
// reached.
func driveHeld(w *law, t time.Time, d, period, held time.Duration, tell bool) time.Time {
	end := t.Add(d)
	for t.Before(end) {
		t, _ = drive(w, t, min(period-held, end.Sub(t)))
		if !t.Before(end) {
			break
		}
		slow := w.start(t, 0)
		if tell {
			w.onHeld(t)
		}
		w.onSuccess(t.Add(rtt), slow, 100, 1)
		t = t.Add(held)
		if tell {
			w.onOpened(t)
		}
	}
	return t
}

// A rate paced between overload holds is held as long as it is sent: told
// of the holds, the law counts it safe and climbs once it has been sent
// for an answer lag, the time held left out; not told, the gaps in the
// starts read as not sending at the rate, and it never climbs.
func TestLaw_grow_overloadHolds(t *testing.T) {
	tests := []struct {
		name      string
		tell      bool
		d         time.Duration // driven for; the lag is 8 round trips
		wantClimb bool
	}{
		// Sent [0, 3], held [3, 5], sent [5, 8], held [8, 10], sent
		// from 10 (round trips): a lag of 8 is sent at 12.
		{"told: climbs after a lag sent", true, 12*rtt + rtt/2, true},
		{"told: not before a lag sent", true, 12*rtt - rtt/2, false},
		{"not told: never climbs", false, 30 * rtt, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, at := pacedLaw(t, 100)
			w.safe, w.eventRate, w.bounded = 100, 100, true
			w.probeFrom = at
			if lag := w.answerLag(); lag != 8*rtt {
				t.Fatalf("answer lag %v, want 8 round trips", lag)
			}
			driveHeld(w, at, tt.d, 5*rtt, 2*rtt, tt.tell)
			if climbed := w.rate > 100; climbed != tt.wantClimb {
				t.Errorf("rate %.2f after %v, want climbed %v", w.rate, tt.d, tt.wantClimb)
			}
		})
	}
}

// The sent rate leaves the time held out: calls sent at the paced rate
// between holds read as the paced rate.
func TestLaw_sentRate_held(t *testing.T) {
	tests := []struct {
		name string
		tell bool
		want float64
	}{
		{"told", true, 100},
		{"not told", false, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, at := pacedLaw(t, 100)
			// Starts at 100/s for half a round trip, then a hold of
			// half a round trip.
			for i := range 5 {
				w.start(at.Add(time.Duration(i)*10*time.Millisecond), 0)
			}
			at = at.Add(rtt / 2)
			if tt.tell {
				w.onHeld(at)
			}
			at = at.Add(rtt / 2)
			if got := w.sentRate(at); !near(got, tt.want) {
				t.Errorf("sentRate = %.2f, want %.2f", got, tt.want)
			}
		})
	}
}

// AIMD hands the runner's overload holds to the law at its clock's
// instants.
func TestAIMD_overloadHeld(t *testing.T) {
	l, clk := newTestAIMD(t, Config{})
	from := clk.Now()
	l.OverloadHeld()
	clk.Advance(300 * time.Millisecond)
	l.OverloadOpened()
	clk.Advance(time.Second)
	l.mu.Lock()
	defer l.mu.Unlock()
	if got := l.law.heldWithin(from.Add(-time.Second), clk.Now()); got != 300*time.Millisecond {
		t.Errorf("held %v, want the 300ms between OverloadHeld and OverloadOpened", got)
	}
}
