package pipeline

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// steps is a backoff schedule of the given delays, the last repeated.
type steps struct {
	d []time.Duration
	i int
}

func (s *steps) NextBackOff() time.Duration {
	d := s.d[min(s.i, len(s.d)-1)]
	s.i++
	return d
}
func (s *steps) Reset() { s.i = 0 }

// TestOverloadHold drives the hold through answers at explicit instants:
// when it closes, how long, who probes, what opens it.
func TestOverloadHold(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	type answer struct {
		passed, at int // ms after t0
		probe      bool
		class      Class
	}
	const sent = -1 // answer.passed: a call passed (sent) at at, not answered
	tests := []struct {
		name      string
		answers   []answer
		wantHold  bool
		wantUntil int // ms after t0, when wantHold
		wantSince int // ms after t0; -1: none
	}{
		{name: "two overloaded answers: each item waits its own step",
			answers:  []answer{{0, 10, false, ClassOverloaded}, {1, 11, false, ClassOverloaded}},
			wantHold: false, wantSince: 10},
		{name: "three in a row close the hold for one step",
			answers:  []answer{{0, 10, false, ClassOverloaded}, {1, 11, false, ClassOverloaded}, {2, 12, false, ClassOverloaded}},
			wantHold: true, wantUntil: 112, wantSince: 10},
		{name: "a success of a call sent after the first refusal ends the run of them",
			answers: []answer{{0, 10, false, ClassOverloaded}, {1, 11, false, ClassOverloaded},
				{20, 60, false, ""}, {61, 62, false, ClassOverloaded}},
			wantHold: false, wantSince: 62},
		{name: "a success of a call sent before the first refusal does not",
			answers: []answer{{0, 10, false, ClassOverloaded}, {-500, 11, false, ""},
				{1, 12, false, ClassOverloaded}, {2, 13, false, ClassOverloaded}},
			wantHold: true, wantUntil: 113, wantSince: 10},
		{name: "refusals among many calls that pass: a server shedding a few, no hold",
			answers: []answer{{0, 10, false, ClassOverloaded},
				{sent, 11, false, ""}, {sent, 12, false, ""}, {sent, 13, false, ""}, {sent, 14, false, ""}, {sent, 15, false, ""}, {sent, 16, false, ""},
				{12, 17, false, ClassOverloaded}, {15, 18, false, ClassOverloaded}},
			wantHold: false, wantSince: 10},
		{name: "refusals of calls sent before the hold closed do not move it",
			answers: []answer{{0, 10, false, ClassOverloaded}, {1, 11, false, ClassOverloaded}, {2, 12, false, ClassOverloaded},
				{5, 40, false, ClassOverloaded}, {6, 90, false, ClassOverloaded}},
			wantHold: true, wantUntil: 112, wantSince: 10},
		{name: "a refused probe holds for the next, longer step",
			answers: []answer{{0, 10, false, ClassOverloaded}, {1, 11, false, ClassOverloaded}, {2, 12, false, ClassOverloaded},
				{112, 115, true, ClassOverloaded}},
			wantHold: true, wantUntil: 265, wantSince: 10},
		{name: "the probe's success opens the hold and ends the overload",
			answers: []answer{{0, 10, false, ClassOverloaded}, {1, 11, false, ClassOverloaded}, {2, 12, false, ClassOverloaded},
				{112, 300, true, ""}},
			wantHold: false, wantSince: -1},
		{name: "a success of a call sent before the hold closed does not open it",
			answers: []answer{{0, 10, false, ClassOverloaded}, {1, 11, false, ClassOverloaded}, {2, 12, false, ClassOverloaded},
				{11, 50, false, ""}},
			wantHold: true, wantUntil: 112, wantSince: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newOverloadHold(func() backoff.BackOff {
				return &steps{d: []time.Duration{100 * time.Millisecond, 150 * time.Millisecond}}
			}, nil)
			var held bool
			var since time.Time
			for _, a := range tc.answers {
				if a.passed == sent {
					h.mu.Lock()
					if !h.since.IsZero() {
						h.sent++
					}
					h.mu.Unlock()
					continue
				}
				if a.probe {
					h.probing = true
				}
				held, since = h.answered(ms(a.passed), a.probe, ms(a.passed), a.class, ms(a.at))
			}
			if h.needProbe != tc.wantHold {
				t.Fatalf("held = %v, want %v (until %v)", h.needProbe, tc.wantHold, h.until.Sub(t0))
			}
			if last := tc.answers[len(tc.answers)-1]; last.class == ClassOverloaded && held != tc.wantHold {
				t.Errorf("answered reports held = %v, want %v", held, tc.wantHold)
			}
			if tc.wantHold && !h.until.Equal(ms(tc.wantUntil)) {
				t.Errorf("held until +%v, want +%dms", h.until.Sub(t0), tc.wantUntil)
			}
			wantSince := time.Time{}
			if tc.wantSince >= 0 {
				wantSince = ms(tc.wantSince)
			}
			if !h.since.Equal(wantSince) {
				t.Errorf("overloaded since %v, want %v", h.since, wantSince)
			}
			if last := tc.answers[len(tc.answers)-1]; last.class == ClassOverloaded && !since.Equal(wantSince) {
				t.Errorf("answered reports since %v, want %v", since, wantSince)
			}
		})
	}
}

// TestOverloadHold_Pass: calls wait out the hold, then exactly one goes
// as the probe while the others wait for its answer; a call waiting for
// its limiter slot when the hold closes is told to come back (its open
// context ends).
func TestOverloadHold_Pass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		clock := SystemClock{} // virtual inside the bubble
		h := newOverloadHold(func() backoff.BackOff { return backoff.NewConstantBackOff(100 * time.Millisecond) }, nil)
		start := clock.Now()
		passed, probe, open, ok := h.pass(ctx, clock)
		if !ok || probe {
			t.Fatalf("open hold: pass = %v, probe %v", ok, probe)
		}
		for i := 0; i < overloadedToHold; i++ {
			h.answered(start.Add(-time.Millisecond), false, start.Add(-time.Millisecond), ClassOverloaded, clock.Now())
		}
		if open.Err() == nil {
			t.Fatal("a call that passed before the hold closed is not told it closed")
		}
		h.answered(passed, false, passed, ClassOverloaded, clock.Now())

		type result struct {
			after time.Duration
			probe bool
		}
		results := make(chan result, 3)
		for range 3 {
			go func() {
				p, probe, _, ok := h.pass(ctx, clock)
				if !ok {
					t.Error("pass failed")
				}
				results <- result{p.Sub(start), probe}
			}()
		}
		time.Sleep(time.Second) // virtual: every waiter is blocked by now
		synctest.Wait()
		first := <-results
		if !first.probe || first.after != 100*time.Millisecond {
			t.Fatalf("first through: %+v, want the probe at +100ms", first)
		}
		select {
		case r := <-results:
			t.Fatalf("%+v passed while the probe is out", r)
		default:
		}
		h.started(true, clock.Now())
		h.answered(start.Add(first.after), true, clock.Now(), "", clock.Now())
		for range 2 {
			if r := <-results; r.probe {
				t.Fatalf("a second probe after the hold opened: %+v", r)
			}
		}
	})
}

// TestOverloadHold_ProbeGrace: a probe not refused within a few refusal
// round trips is being served (its answer may take seconds), so the
// calls waiting behind it go; if it is refused after all, the hold
// closes again.
func TestOverloadHold_ProbeGrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, clock := context.Background(), SystemClock{} // virtual inside the bubble
		h, passed := probeInFlight(t, ctx, clock)
		behind := make(chan time.Duration, 1)
		go func() {
			p, probe, _, _ := h.pass(ctx, clock)
			if probe {
				t.Error("a second probe")
			}
			behind <- p.Sub(passed)
		}()
		synctest.Wait()
		select {
		case d := <-behind:
			t.Fatalf("a call passed %s after the probe, within its grace", d)
		default:
		}
		if d := <-behind; d != probeGrace*10*time.Millisecond {
			t.Fatalf("the call behind the probe passed %s after it, want the grace %s", d, probeGrace*10*time.Millisecond)
		}
		// The probe is refused after all, slowly: closed again.
		if held, _ := h.answered(passed, true, passed, ClassOverloaded, clock.Now()); !held {
			t.Fatal("a probe refused after its grace does not close the hold again")
		}
		if !h.needProbe || !h.until.After(clock.Now()) {
			t.Fatalf("hold open after the probe's refusal: until %v", h.until)
		}
	})
}

// TestOverloadHold_ProbeInFlightWhenClosedAgain: the hold opened on a
// probe's grace, the probe still in flight, and a call let through since
// was refused: the hold closes again, and when it expires the next call
// is a new probe. (It used to take the old probe, in flight past its
// grace, as served and open for every call with no probe at all.)
func TestOverloadHold_ProbeInFlightWhenClosedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, clock := context.Background(), SystemClock{} // virtual inside the bubble
		h, oldProbe := probeInFlight(t, ctx, clock)
		// Past the probe's grace, unanswered: the hold opens for all.
		after, probe, _, _ := h.pass(ctx, clock)
		if probe {
			t.Fatal("the call behind the probe went as a second probe")
		}
		// That call is refused: the hold closes again, the old probe
		// still out.
		if held, _ := h.answered(after, false, after, ClassOverloaded, after.Add(5*time.Millisecond)); !held {
			t.Fatal("a refusal after the hold opened on a grace did not close it again")
		}
		time.Sleep(time.Second) // well past the hold and the old probe's grace
		if _, probe, _, _ := h.pass(ctx, clock); !probe {
			t.Fatal("the hold opened again with no new probe: the old probe, still in flight, was taken as served")
		}
		// The old probe's answer, now, moves nothing.
		h.answered(oldProbe, true, oldProbe, "", clock.Now())
		if !h.probing {
			t.Fatal("the old probe's answer cleared the new probe's flight")
		}
	})
}

// probeInFlight closes a new hold (a constant 100 ms schedule) with
// overloadedToHold refusals that took 10 ms each (a grace of 30 ms),
// waits past it and sends the probe, which starts and stays in flight.
// It returns the hold and when the probe passed. Call it inside a
// synctest bubble, where clock is virtual.
func probeInFlight(t *testing.T, ctx context.Context, clock Clock) (*overloadHold, time.Time) {
	t.Helper()
	h := newOverloadHold(func() backoff.BackOff { return backoff.NewConstantBackOff(100 * time.Millisecond) }, nil)
	t0 := clock.Now()
	for i := range overloadedToHold {
		at := t0.Add(time.Duration(i) * time.Millisecond)
		h.answered(at, false, at, ClassOverloaded, at.Add(10*time.Millisecond))
	}
	time.Sleep(200 * time.Millisecond)
	passed, probe, _, _ := h.pass(ctx, clock)
	if !probe {
		t.Fatal("the first call after the hold is not the probe")
	}
	h.started(true, clock.Now())
	return h, passed
}

// holdListener is a Limiter that counts the overload hold's calls.
type holdListener struct {
	Limiter
	held, opened int
}

func (l *holdListener) OverloadHeld()   { l.held++ }
func (l *holdListener) OverloadOpened() { l.opened++ }

// TestOverloadHold_LearnsLength: an overload that ended tells how long
// the next may last. Its first probe goes halfway between the latest
// refused probe and the one served of the last overload, it closes at its
// first refusal, and the limiter is told each time the hold closes and
// opens.
func TestOverloadHold_LearnsLength(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		clock := SystemClock{} // virtual inside the bubble
		lim := &holdListener{}
		h := newOverloadHold(func() backoff.BackOff { return backoff.NewConstantBackOff(100 * time.Millisecond) }, lim)
		t0 := clock.Now()
		probe := func() time.Time {
			t.Helper()
			passed, probe, _, ok := h.pass(ctx, clock)
			if !ok || !probe {
				t.Fatalf("pass = %v, probe %v; want the probe", ok, probe)
			}
			h.started(true, clock.Now())
			return passed
		}
		// The first overload: three refusals close the hold, a probe
		// 100 ms on is refused, the next, 100 ms later, served.
		for i := range overloadedToHold {
			h.answered(t0, false, t0, ClassOverloaded, t0.Add(time.Duration(i)*time.Millisecond))
		}
		if lim.held != 1 || lim.opened != 0 {
			t.Fatalf("after the hold closed: held %d, opened %d; want 1 and 0", lim.held, lim.opened)
		}
		time.Sleep(100 * time.Millisecond)
		p := probe()
		time.Sleep(time.Millisecond)
		h.answered(p, true, p, ClassOverloaded, clock.Now())
		time.Sleep(time.Until(h.until))
		p = probe()
		time.Sleep(50 * time.Millisecond)
		h.answered(p, true, p, "", clock.Now())
		if lim.held != 1 || lim.opened != 1 {
			t.Fatalf("after the probe was served: held %d, opened %d; want 1 and 1", lim.held, lim.opened)
		}
		// The hold closed 2 ms after the first refusal: a probe 102 ms
		// after it refused, one 203 ms after it served.
		if h.lo != 102*time.Millisecond || h.hi != 203*time.Millisecond {
			t.Fatalf("length between %v and %v, want 102ms and 203ms", h.lo, h.hi)
		}
		// The next overload: its first refusal closes the hold until
		// halfway between.
		time.Sleep(time.Second)
		at := clock.Now()
		if held, _ := h.answered(at, false, at, ClassOverloaded, at); !held {
			t.Fatal("the first refusal of a known overload does not close the hold")
		}
		if want := at.Add(152500 * time.Microsecond); !h.until.Equal(want) {
			t.Errorf("held until %v after the refusal, want %v", h.until.Sub(at), want.Sub(at))
		}
		// Its probe is refused: the next goes at the length served last.
		time.Sleep(time.Until(h.until))
		p = probe()
		h.answered(p, true, p, ClassOverloaded, clock.Now())
		if want := at.Add(203 * time.Millisecond); !h.until.Equal(want) {
			t.Errorf("held until %v after the refused probe, want %v", h.until.Sub(at), want.Sub(at))
		}
		if lim.held != 2 || lim.opened != 1 {
			t.Errorf("held %d, opened %d; want 2 and 1", lim.held, lim.opened)
		}
	})
}

// TestOverloadHold_ServedBounds: the lengths an overload's end reads.
func TestOverloadHold_ServedBounds(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name                 string
		lo, hi, lastRefused  time.Duration // before
		served               time.Duration // after since
		wantLo, wantHi       time.Duration
		wantFirst, wantLater time.Duration // learnedEnd after since; 0: none
	}{
		{"the first overload", 0, 0, 100 * ms, 270 * ms, 100 * ms, 270 * ms, 185 * ms, 270 * ms},
		{"as long as the last: closer", 100 * ms, 270 * ms, 0, 185 * ms, 100 * ms, 185 * ms, 142500 * time.Microsecond, 185 * ms},
		{"a refused probe raises lo", 100 * ms, 185 * ms, 142 * ms, 185 * ms, 142 * ms, 185 * ms, 163500 * time.Microsecond, 185 * ms},
		{"within a grace: at hi", 150 * ms, 185 * ms, 170 * ms, 185 * ms, 170 * ms, 185 * ms, 185 * ms, 185 * ms},
		{"longer than the last: start over", 142 * ms, 185 * ms, 185 * ms, 500 * ms, 185 * ms, 500 * ms, 342500 * time.Microsecond, 500 * ms},
		{"an outage: the schedule probes", 0, 0, 3 * time.Second, 5 * time.Second, 3 * time.Second, 5 * time.Second, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			since := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
			h := &overloadHold{since: since, lo: tc.lo, hi: tc.hi, lastRefused: tc.lastRefused}
			h.served(since.Add(tc.served))
			if h.lo != tc.wantLo || h.hi != tc.wantHi {
				t.Fatalf("lo %v, hi %v; want %v and %v", h.lo, h.hi, tc.wantLo, tc.wantHi)
			}
			h.lastRefused = 0
			for _, c := range []struct {
				first bool
				want  time.Duration
			}{{true, tc.wantFirst}, {false, tc.wantLater}} {
				at, ok := h.learnedEnd(c.first)
				if ok != (c.want > 0) || ok && !at.Equal(since.Add(c.want)) {
					t.Errorf("learnedEnd(first %v) = %v, %v; want %v", c.first, at.Sub(since), ok, c.want)
				}
			}
		})
	}
}

// TestOverloadHold_ShedNotBurst: once an overload has ended, the next
// closes the hold at its first refusal; a call sent after that refused
// one, before the hold closed, and served shows a server shedding a call
// here and there, not refusing all: the lengths learnt are dropped, and
// three refusals close the hold again.
func TestOverloadHold_ShedNotBurst(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	tests := []struct {
		name       string
		servedSent int // ms after t0 the served call passed
		wantKnown  bool
	}{
		{"sent before the refused call: still known", -1, true},
		{"sent after it, before the hold closed: a shed", 1, false},
		{"sent after the hold closed (the probe): still known", 200, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newOverloadHold(func() backoff.BackOff { return backoff.NewConstantBackOff(100 * time.Millisecond) }, nil)
			h.lo, h.hi = 100*time.Millisecond, 200*time.Millisecond
			if held, _ := h.answered(ms(0), false, ms(0), ClassOverloaded, ms(2)); !held {
				t.Fatal("the first refusal of a known overload does not close the hold")
			}
			h.answered(ms(tc.servedSent), false, ms(tc.servedSent), "", ms(300))
			if known := h.hi > 0; known != tc.wantKnown {
				t.Errorf("lengths known %v (lo %v, hi %v), want %v", known, h.lo, h.hi, tc.wantKnown)
			}
		})
	}
}

// TestOverloadHold_LearnedEnd: after probes at and past the length
// learnt are refused, the next go a grace on, twice, then the schedule
// takes over.
func TestOverloadHold_LearnedEnd(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name        string
		lastRefused time.Duration
		want        time.Duration // after since; 0: the schedule's step
	}{
		{"none refused yet: at hi", 0, 200 * ms},
		{"refused below hi: at hi", 150 * ms, 200 * ms},
		{"refused at hi: a grace on", 200 * ms, 200*ms + minProbeGrace},
		{"refused a grace past hi: another", 200*ms + minProbeGrace, 200*ms + 2*minProbeGrace},
		{"refused two graces past hi: the schedule", 200*ms + 2*minProbeGrace, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			since := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
			h := &overloadHold{since: since, lo: 190 * ms, hi: 200 * ms, lastRefused: tc.lastRefused}
			at, ok := h.learnedEnd(false)
			if ok != (tc.want > 0) || ok && !at.Equal(since.Add(tc.want)) {
				t.Errorf("learnedEnd = %v, %v; want %v", at.Sub(since), ok, tc.want)
			}
		})
	}
}
