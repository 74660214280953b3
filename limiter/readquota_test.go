package limiter

import (
	"testing"
	"testing/synctest"
	"time"
)

// Tests of how the limiter reads a window-counted quota once round trips
// are measured (see AIMD): slow start, edge 429s, probing, one decrease per
// round trip, the cooldown in round trips and pacing after a decrease.

func TestAIMD_Succeeded_slowStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, clk := newTestAIMD(t, Config{}) // Start 0: slow start to 64/3 = 21
		succeedN(t, l, clk, 10, 100*time.Millisecond, 100)
		if got := l.Limit(); got != 18 {
			t.Fatalf("after 10 successes in slow start Limit() = %d, want 18 (8 + 10)", got)
		}
		succeedN(t, l, clk, 3, 100*time.Millisecond, 100)
		if got := l.Limit(); got != 21 {
			t.Fatalf("Limit() = %d, want slow start to stop at 21", got)
		}
		// Then by streaks: 21 successes for the next step.
		succeedN(t, l, clk, 20, 100*time.Millisecond, 100)
		if got := l.Limit(); got != 21 {
			t.Fatalf("Limit() = %d after 20 successes past slow start, want 21", got)
		}
		succeedN(t, l, clk, 1, 100*time.Millisecond, 100)
		if got := l.Limit(); got != 22 {
			t.Fatalf("Limit() = %d after a streak of 21, want 22", got)
		}
	})
	t.Run("ended by a 429", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, clk := newTestAIMD(t, Config{})
			succeedN(t, l, clk, 4, 100*time.Millisecond, 100) // 12
			s := mustAcquire(t, l)
			clk.Advance(100 * time.Millisecond)
			l.RateLimited(s, 0) // no retry delay: halves
			if got := l.Limit(); got != 6 {
				t.Fatalf("Limit() = %d after a 429 in slow start, want 6", got)
			}
			clk.Advance(time.Second) // past the cooldown (5 round trips)
			succeedN(t, l, clk, 5, 100*time.Millisecond, 100)
			if got := l.Limit(); got != 6 {
				t.Fatalf("Limit() = %d after 5 successes, want 6: no slow start after a 429", got)
			}
		})
	})
	t.Run("not with a start given", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, clk := newTestAIMD(t, Config{Start: 8})
			succeedN(t, l, clk, 7, 100*time.Millisecond, 100)
			if got := l.Limit(); got != 8 {
				t.Fatalf("Limit() = %d, want 8: a given start grows by streaks", got)
			}
		})
	})
}

// measured returns a limiter on a fake clock that has measured a round trip
// of 100ms, at limit start (no slow start).
func measured(tb testing.TB, start int) (*AIMD, *fakeClock) {
	tb.Helper()
	l, clk := newTestAIMD(tb, Config{Start: start})
	s := mustAcquire(tb, l)
	clk.Advance(100 * time.Millisecond)
	l.Failed(s) // latency is measured from successes only
	succeedN(tb, l, clk, 1, 100*time.Millisecond, 100)
	return l, clk
}

func TestAIMD_RateLimited_edge(t *testing.T) {
	tests := []struct {
		name       string
		retryAfter time.Duration
		want       int
	}{
		// The limit was 20 until 100ms ago, then 30: an edge 429 goes back
		// to the limit of 5 round trips (500ms) ago.
		{"edge: back to the limit before the overshoot", 50 * time.Millisecond, 20},
		{"delay of exactly a round trip is an edge", 100 * time.Millisecond, 20},
		{"longer delay: the quota fell, halve", 150 * time.Millisecond, 15},
		{"no delay: halve", 0, 15},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, clk := measured(t, 20)
				clk.Advance(time.Second)
				l.SetLimit(30)
				clk.Advance(100 * time.Millisecond)
				s := mustAcquire(t, l)
				l.RateLimited(s, tt.retryAfter)
				if got := l.Limit(); got != tt.want {
					t.Fatalf("Limit() = %d, want %d", got, tt.want)
				}
			})
		})
	}
	t.Run("takes off at least 3%", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, clk := measured(t, 40) // 40 for long: the limit 500ms ago is 40
			clk.Advance(time.Second)
			s := mustAcquire(t, l)
			l.RateLimited(s, 10*time.Millisecond)
			if got := l.Limit(); got != 38 {
				t.Fatalf("Limit() = %d, want 38 (40 x 0.97)", got)
			}
		})
	})
	t.Run("never more than DecreaseFactor", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, clk := measured(t, 10)
			clk.Advance(time.Second)
			l.SetLimit(40)
			clk.Advance(100 * time.Millisecond)
			s := mustAcquire(t, l)
			l.RateLimited(s, 10*time.Millisecond)
			if got := l.Limit(); got != 20 {
				t.Fatalf("Limit() = %d, want 20 (40 x 0.5, not back to 10)", got)
			}
		})
	})
}

// Within one round trip of a decrease, a 429 belongs to the same event even
// when its call started after the decrease.
func TestAIMD_RateLimited_oncePerRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, clk := measured(t, 16)
		clk.Advance(time.Second)
		s := mustAcquire(t, l)
		l.RateLimited(s, 0) // 16 -> 8
		late := mustAcquire(t, l)
		clk.Advance(50 * time.Millisecond)
		l.RateLimited(late, 0)
		if got := l.Limit(); got != 8 {
			t.Fatalf("Limit() = %d after a 429 half a round trip later, want 8", got)
		}
		clk.Advance(60 * time.Millisecond) // pacing lets one start per 12.5ms
		later := mustAcquire(t, l)
		l.RateLimited(later, 0)
		if got, d := l.Limit(), l.Snapshot().Decreases; got != 4 || d != 2 {
			t.Fatalf("Limit() = %d with %d decreases after a 429 past the round trip, want 4 with 2", got, d)
		}
	})
}

// Within a round trip of an edge decrease, a 429 with a long delay is not
// the same event: the quota fell just after the limit overshot it.
func TestAIMD_RateLimited_escalates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, clk := measured(t, 20)
		clk.Advance(time.Second)
		s := mustAcquire(t, l)
		l.RateLimited(s, 10*time.Millisecond) // edge: 20 -> 19
		if got := l.Limit(); got != 19 {
			t.Fatalf("Limit() = %d after an edge 429, want 19", got)
		}
		clk.Advance(20 * time.Millisecond) // past the gate
		edge := mustAcquire(t, l)
		clk.Advance(6 * time.Millisecond) // past the pacing: 100ms/19
		long := mustAcquire(t, l)
		l.RateLimited(edge, 10*time.Millisecond)
		if got := l.Limit(); got != 19 {
			t.Fatalf("Limit() = %d after a second edge 429 in the round trip, want 19", got)
		}
		l.RateLimited(long, 500*time.Millisecond)
		if got, d := l.Limit(), l.Snapshot().Decreases; got != 9 || d != 2 {
			t.Fatalf("Limit() = %d with %d decreases after a long-delay 429 in the round trip, want 9 with 2", got, d)
		}
	})
}

func TestAIMD_cooldownRoundTrips(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, clk := measured(t, 4) // round trip 100ms, Cooldown 4s: cooldown 500ms
		clk.Advance(time.Second)
		s := mustAcquire(t, l)
		decrease := clk.Now()
		l.RateLimited(s, time.Second) // halves to 2; gate 1s, then cooldown 500ms
		clk.Advance(1400 * time.Millisecond)
		succeedN(t, l, clk, 1, 50*time.Millisecond, 100) // ends 1.45s after: cooling
		clk.Advance(100 * time.Millisecond)              // 1.55s: past gate + 5 round trips
		succeedN(t, l, clk, 1, 10*time.Millisecond, 100)
		if got := l.Limit(); got != 2 {
			t.Fatalf("Limit() = %d, want 2: a success within the cooldown counted", got)
		}
		succeedN(t, l, clk, 1, 10*time.Millisecond, 100)
		if got := l.Limit(); got != 3 {
			t.Fatalf("Limit() = %d after a streak past the cooldown, want 3", got)
		}
		if since := clk.Now().Sub(decrease); since >= 4*time.Second {
			t.Fatalf("grew %v after the decrease: the cooldown was not in round trips", since)
		}
	})
}

// After a decrease the calls waiting for the gate start one per round
// trip/limit, not all at once.
func TestAIMD_Acquire_pacedAfterDecrease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, clk := measured(t, 8)
		clk.Advance(time.Second)
		s := mustAcquire(t, l)
		l.RateLimited(s, 200*time.Millisecond) // 8 -> 4, gate 200ms
		var rs []<-chan acquired
		for range 4 {
			rs = append(rs, goAcquire(t.Context(), l))
			synctest.Wait()
		}
		started := func() int {
			n := 0
			for _, r := range rs {
				if len(r) > 0 {
					n++
				}
			}
			return n
		}
		clk.Advance(200 * time.Millisecond) // the gate opens
		synctest.Wait()
		if n := started(); n != 1 {
			t.Fatalf("%d calls started when the gate opened, want 1", n)
		}
		// Round trip 100ms, limit 4: one start per 25ms.
		clk.Advance(24 * time.Millisecond)
		synctest.Wait()
		if n := started(); n != 1 {
			t.Fatalf("%d calls started 24ms after the gate opened, want 1", n)
		}
		clk.Advance(time.Millisecond)
		synctest.Wait()
		if n := started(); n != 2 {
			t.Fatalf("%d calls started 25ms after the gate opened, want 2", n)
		}
		for want := 3; want <= 4; want++ {
			clk.Advance(25 * time.Millisecond)
			synctest.Wait()
			if n := started(); n != want {
				t.Fatalf("%d calls started, want %d", n, want)
			}
		}
		for _, r := range rs {
			l.Failed((<-r).started)
		}
	})
}

// From the level of the last edge 429 up, the limit takes three streaks per
// step, for three steps; then one again.
func TestAIMD_Succeeded_probing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, clk := measured(t, 10)
		clk.Advance(time.Second)
		s := mustAcquire(t, l)
		l.RateLimited(s, 10*time.Millisecond) // edge 429 at 10: to 9, edge level 9
		if got := l.Limit(); got != 9 {
			t.Fatalf("Limit() = %d, want 9", got)
		}
		clk.Advance(time.Second) // past the cooldown
		steps := []struct{ successes, want int }{
			{9*3 - 1, 9}, {1, 10}, // at the edge level: three streaks
			{10 * 3, 11}, {11 * 3, 12}, // two more slow steps
			{12, 13}, {13, 14}, // no 429: by streaks again
		}
		for _, st := range steps {
			succeedN(t, l, clk, st.successes, 10*time.Millisecond, 100)
			if got := l.Limit(); got != st.want {
				t.Fatalf("Limit() = %d, want %d", got, st.want)
			}
		}
	})
}
