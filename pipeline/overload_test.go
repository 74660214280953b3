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
			})
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
		h := newOverloadHold(func() backoff.BackOff { return backoff.NewConstantBackOff(100 * time.Millisecond) })
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
		ctx := context.Background()
		clock := SystemClock{} // virtual inside the bubble
		h := newOverloadHold(func() backoff.BackOff { return backoff.NewConstantBackOff(100 * time.Millisecond) })
		t0 := clock.Now()
		// Refusals that took 10 ms from start to answer: the grace is 30 ms.
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
