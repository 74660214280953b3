package limiter

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Every test runs in a synctest bubble, used only for synctest.Wait (until
// every goroutine of the test is blocked) and deadlock detection: time is
// the fake clock's, stepped by hand.

// newTestAIMD returns New(cfg) running on a fresh fake clock.
func newTestAIMD(tb testing.TB, cfg Config) (*AIMD, *fakeClock) {
	tb.Helper()
	clk := newFakeClock()
	cfg.Now = clk.Now
	l := New(cfg)
	l.newTimer = clk.newTimer
	return l, clk
}

// mustAcquire acquires a slot that must be available at once.
func mustAcquire(tb testing.TB, l *AIMD) time.Time {
	tb.Helper()
	r := goAcquire(context.Background(), l)
	synctest.Wait()
	res, ok := returned(r)
	if !ok {
		tb.Fatalf("Acquire blocked; limit %d, in flight %d, gate %v",
			l.Limit(), l.InFlight(), l.GateUntil())
	}
	if res.err != nil {
		tb.Fatalf("Acquire: %v", res.err)
	}
	return res.started
}

type acquired struct {
	started time.Time
	err     error
}

// goAcquire runs Acquire in a goroutine; its result arrives on the channel.
func goAcquire(ctx context.Context, l *AIMD) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		s, err := l.Acquire(ctx)
		ch <- acquired{s, err}
	}()
	return ch
}

// returned reports whether an Acquire run by goAcquire has returned.
// Call synctest.Wait first.
func returned(ch <-chan acquired) (acquired, bool) {
	select {
	case r := <-ch:
		return r, true
	default:
		return acquired{}, false
	}
}

// succeedN runs n calls one after another, each taking latency and billing
// tokens.
func succeedN(tb testing.TB, l *AIMD, clk *fakeClock, n int, latency time.Duration, tokens int64) {
	tb.Helper()
	for range n {
		s := mustAcquire(tb, l)
		clk.Advance(latency)
		l.Succeeded(s, tokens)
	}
}

func TestAIMD_Succeeded(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		successes int
		want      int
	}{
		{"streak not complete", Config{Start: 8}, 7, 8},
		{"one streak of limit", Config{Start: 8}, 8, 9},
		{"second streak is one longer", Config{Start: 8}, 8 + 8, 9},
		{"two streaks", Config{Start: 8}, 8 + 9, 10},
		{"three streaks", Config{Start: 8}, 8 + 9 + 10, 11},
		{"increase of 2", Config{Start: 8, Increase: 2}, 8 + 10, 12},
		{"ceiling holds", Config{Start: 4, Ceiling: 5}, 100, 5},
		{"fixed does not grow", Config{Start: 4, Fixed: true}, 100, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, clk := newTestAIMD(t, tt.cfg)
				succeedN(t, l, clk, tt.successes, time.Second, 100)
				if got := l.Limit(); got != tt.want {
					t.Errorf("after %d successes Limit() = %d, want %d", tt.successes, got, tt.want)
				}
				st := l.Snapshot()
				if st.MaxLimit != tt.want || st.InFlight != 0 || st.Decreases != 0 {
					t.Errorf("Snapshot() = %+v", st)
				}
			})
		})
	}
}

func TestAIMD_RateLimited(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		events int // successive congestion events
		want   int
	}{
		{"halves", Config{Start: 8}, 1, 4},
		{"floors odd halves", Config{Start: 7}, 1, 3},
		{"factor 0.7", Config{Start: 10, DecreaseFactor: 0.7}, 1, 7},
		{"twice", Config{Start: 16}, 2, 4},
		{"floor holds", Config{Start: 3, Floor: 2}, 3, 2},
		{"floor of one", Config{Start: 8}, 10, 1},
		{"fixed does not decrease", Config{Start: 8, Fixed: true}, 3, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, clk := newTestAIMD(t, tt.cfg)
				for range tt.events {
					s := mustAcquire(t, l)
					clk.Advance(time.Second)
					l.RateLimited(s, 0)
				}
				if got := l.Limit(); got != tt.want {
					t.Errorf("after %d events Limit() = %d, want %d", tt.events, got, tt.want)
				}
				st := l.Snapshot()
				wantDecreases := int64(tt.events)
				if tt.cfg.Fixed {
					wantDecreases = 0
				}
				if st.Decreases != wantDecreases || st.MinLimit != tt.want || st.Increases != 0 {
					t.Errorf("Snapshot() = %+v, want %d decreases", st, wantDecreases)
				}
			})
		})
	}
}

// A burst of 429s of calls started before the first decrease is one
// congestion event; a 429 of a call started after it is the next one. The
// frozen-clock cases check the same with start and decrease at one instant.
func TestAIMD_RateLimited_onePerEvent(t *testing.T) {
	for _, step := range []time.Duration{time.Second, 0} {
		t.Run(fmt.Sprintf("step=%v", step), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, clk := newTestAIMD(t, Config{Start: 20, Ceiling: 20})
				burst := make([]time.Time, 20)
				for i := range burst {
					burst[i] = mustAcquire(t, l)
				}
				clk.Advance(step)
				for _, s := range burst {
					l.RateLimited(s, 0)
				}
				if got, d := l.Limit(), l.Snapshot().Decreases; got != 10 || d != 1 {
					t.Fatalf("after 20 simultaneous 429s: Limit() = %d with %d decreases, want 10 with 1", got, d)
				}

				clk.Advance(step)
				late := mustAcquire(t, l)
				stale := mustAcquire(t, l) // started after the first decrease too
				clk.Advance(step)
				l.RateLimited(late, 0)
				if got, d := l.Limit(), l.Snapshot().Decreases; got != 5 || d != 2 {
					t.Fatalf("after a 429 started after the decrease: Limit() = %d with %d decreases, want 5 with 2", got, d)
				}
				// stale started before the second decrease: same event.
				l.RateLimited(stale, 0)
				if got := l.Limit(); got != 5 {
					t.Errorf("429 of a call started before the second decrease: Limit() = %d, want 5", got)
				}
			})
		})
	}
}

func TestAIMD_Succeeded_cooldown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, clk := newTestAIMD(t, Config{Start: 4, Cooldown: 4 * time.Second})
		before := mustAcquire(t, l) // started before the decrease
		s := mustAcquire(t, l)
		clk.Advance(time.Second)
		l.RateLimited(s, 0) // decrease at T+1s: limit 2, cooldown until T+5s
		if got := l.Limit(); got != 2 {
			t.Fatalf("Limit() = %d after a 429, want 2", got)
		}
		// Ten successes inside the cooldown: plenty of streaks, no growth.
		for range 10 {
			s := mustAcquire(t, l)
			clk.Advance(100 * time.Millisecond)
			l.Succeeded(s, 100)
		}
		if got := l.Limit(); got != 2 {
			t.Fatalf("Limit() = %d within the cooldown, want 2", got)
		}
		clk.Advance(4 * time.Second) // past the cooldown
		// A call started before the decrease does not count toward a streak.
		l.Succeeded(before, 100)
		succeedN(t, l, clk, 1, time.Millisecond, 100)
		if got := l.Limit(); got != 2 {
			t.Fatalf("Limit() = %d after one counted success, want 2", got)
		}
		succeedN(t, l, clk, 1, time.Millisecond, 100)
		if got, inc := l.Limit(), l.Snapshot().Increases; got != 3 || inc != 1 {
			t.Fatalf("Limit() = %d with %d increases after a streak past the cooldown, want 3 with 1", got, inc)
		}
	})
}

func TestAIMD_Failed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, clk := newTestAIMD(t, Config{Start: 4})
		for range 20 {
			s := mustAcquire(t, l)
			clk.Advance(time.Second)
			l.Failed(s)
		}
		if st := l.Snapshot(); st.Limit != 4 || st.Decreases != 0 || st.Increases != 0 || st.InFlight != 0 {
			t.Fatalf("after 20 failures Snapshot() = %+v, want limit 4 unchanged", st)
		}
		// Failures neither count toward nor break a streak: 3 successes,
		// 5 failures, 1 success complete a streak of 4.
		succeedN(t, l, clk, 3, time.Second, 100)
		for range 5 {
			s := mustAcquire(t, l)
			l.Failed(s)
		}
		if got := l.Limit(); got != 4 {
			t.Fatalf("Limit() = %d after 3 successes, want 4", got)
		}
		succeedN(t, l, clk, 1, time.Second, 100)
		if got := l.Limit(); got != 5 {
			t.Fatalf("Limit() = %d after 4 successes around 5 failures, want 5", got)
		}
	})
}

// After a halving no call starts until the calls in flight have drained
// below the new limit, and from then on they never exceed it.
func TestAIMD_RateLimited_takesEffectInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, clk := newTestAIMD(t, Config{Start: 8})
		ctx := t.Context()
		held := make([]time.Time, 8)
		for i := range held {
			held[i] = mustAcquire(t, l)
		}
		var running atomic.Int64 // calls the test holds: started, not yet reported
		running.Store(8)
		starts := make(chan time.Time, 12)
		for range 12 {
			go func() {
				s, err := l.Acquire(ctx)
				if err != nil {
					return // the test has ended: ctx is canceled
				}
				running.Add(1)
				starts <- s
			}()
		}
		synctest.Wait()
		if n := len(starts); n != 0 {
			t.Fatalf("%d calls started beyond a full limit of 8", n)
		}

		clk.Advance(time.Second)
		l.RateLimited(held[0], 0)
		running.Add(-1)
		synctest.Wait()
		if got := l.Limit(); got != 4 {
			t.Fatalf("Limit() = %d after a 429, want 4", got)
		}
		// Drain 7 -> 4: nothing may start while 4 or more are in flight.
		for i := 1; i <= 3; i++ {
			l.Failed(held[i])
			running.Add(-1)
			synctest.Wait()
			if n := len(starts); n != 0 {
				t.Fatalf("%d calls started while %d were in flight, limit 4", n, l.InFlight()-n)
			}
		}
		// Every further release lets exactly one start.
		pending := held[4:]
		for step := 0; step < 12; step++ {
			if len(pending) > 0 {
				l.Failed(pending[0])
				pending = pending[1:]
			} else {
				l.Failed(<-starts)
			}
			running.Add(-1)
			synctest.Wait()
			if r, in := running.Load(), l.InFlight(); r != int64(in) || in > 4 {
				t.Fatalf("step %d: %d calls running, InFlight() = %d, limit 4", step, r, in)
			}
		}
		for len(starts) > 0 {
			l.Failed(<-starts)
			running.Add(-1)
		}
		synctest.Wait()
		if r, in := running.Load(), l.InFlight(); r != 0 || in != 0 {
			t.Fatalf("after draining: %d running, InFlight() = %d", r, in)
		}
	})
}

func TestAIMD_Acquire_retryAfterGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, clk := newTestAIMD(t, Config{Start: 8})
		t0 := clk.Now()
		a, b, c := mustAcquire(t, l), mustAcquire(t, l), mustAcquire(t, l)
		l.RateLimited(a, 10*time.Second)
		if got, want := l.GateUntil(), t0.Add(10*time.Second); !got.Equal(want) {
			t.Fatalf("GateUntil() = %v, want %v", got, want)
		}
		r := goAcquire(t.Context(), l)
		synctest.Wait()
		if _, ok := returned(r); ok {
			t.Fatal("Acquire returned inside the retry-after gate with slots free")
		}
		// A shorter delay does not move the gate earlier.
		clk.Advance(time.Second)
		l.RateLimited(b, time.Second)
		if got, want := l.GateUntil(), t0.Add(10*time.Second); !got.Equal(want) {
			t.Fatalf("GateUntil() = %v after a shorter delay, want %v", got, want)
		}
		clk.Advance(9*time.Second - time.Millisecond)
		synctest.Wait()
		if _, ok := returned(r); ok {
			t.Fatal("Acquire returned 1ms before the gate")
		}
		// A longer delay moves it later, and the waiter follows.
		l.RateLimited(c, 12*time.Second)
		wantGate := clk.Now().Add(12 * time.Second)
		clk.Advance(time.Millisecond)
		synctest.Wait()
		if _, ok := returned(r); ok {
			t.Fatal("Acquire returned at the first gate after it was extended")
		}
		clk.Advance(wantGate.Sub(clk.Now()) - time.Millisecond)
		synctest.Wait()
		if _, ok := returned(r); ok {
			t.Fatal("Acquire returned 1ms before the extended gate")
		}
		clk.Advance(time.Millisecond)
		synctest.Wait()
		res, ok := returned(r)
		if !ok || res.err != nil {
			t.Fatalf("Acquire did not return at the gate: returned %v, err %v", ok, res.err)
		}
		if !res.started.Equal(wantGate) {
			t.Errorf("started = %v, want the gate %v", res.started, wantGate)
		}
		if n := clk.Timers(); n != 0 {
			t.Errorf("%d timers left pending", n)
		}
		l.Succeeded(res.started, 100)
	})
}

// Waiters are served in arrival order, both as slots free up and when a
// retry-after gate opens.
func TestAIMD_Acquire_fifo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, clk := newTestAIMD(t, Config{Start: 1, Ceiling: 1})
		first := mustAcquire(t, l)
		clk.Advance(time.Second)
		l.RateLimited(first, 5*time.Second) // limit stays 1 (floor), gate for 5s
		held := mustAcquireAfterGate(t, l, clk)

		const n = 6
		order := make(chan int, n)
		startedAt := make([]time.Time, n)
		for i := range n {
			go func() {
				s, err := l.Acquire(t.Context())
				if err != nil {
					return // the test has ended: ctx is canceled
				}
				startedAt[i] = s
				order <- i
			}()
			synctest.Wait() // waiter i is in line before i+1 arrives
		}
		if got := l.Snapshot().Waiting; got != n {
			t.Fatalf("Waiting = %d, want %d", got, n)
		}
		// Gate the line again, then free the slot: nobody moves until the
		// gate opens, then the head goes first.
		l.RateLimited(held, 3*time.Second)
		synctest.Wait()
		if len(order) != 0 {
			t.Fatal("a waiter started inside the gate")
		}
		clk.Advance(3 * time.Second)
		for want := range n {
			synctest.Wait()
			if len(order) != 1 {
				t.Fatalf("%d waiters started at once, want 1 (limit 1)", len(order))
			}
			if got := <-order; got != want {
				t.Fatalf("waiter %d started, want %d (FIFO)", got, want)
			}
			l.Failed(startedAt[want])
		}
	})
}

// mustAcquireAfterGate advances the clock past the gate and acquires.
func mustAcquireAfterGate(tb testing.TB, l *AIMD, clk *fakeClock) time.Time {
	tb.Helper()
	clk.Advance(l.GateUntil().Sub(clk.Now()))
	return mustAcquire(tb, l)
}

func TestAIMD_Acquire_cancel(t *testing.T) {
	t.Run("waiting for a slot", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, _ := newTestAIMD(t, Config{Start: 1, Ceiling: 1})
			held := mustAcquire(t, l)
			ctx, cancel := context.WithCancel(t.Context())
			r := goAcquire(ctx, l)
			synctest.Wait()
			cancel()
			synctest.Wait()
			res, ok := returned(r)
			if !ok || !errors.Is(res.err, context.Canceled) {
				t.Fatalf("Acquire after cancel: returned %v, err %v; want context.Canceled", ok, res.err)
			}
			if st := l.Snapshot(); st.InFlight != 1 || st.Waiting != 0 {
				t.Fatalf("Snapshot() = %+v, want 1 in flight and nobody waiting", st)
			}
			l.Failed(held)
			mustAcquire(t, l)
			if got := l.InFlight(); got != 1 {
				t.Fatalf("InFlight() = %d, want 1", got)
			}
		})
	})
	t.Run("head waiting for the gate", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, clk := newTestAIMD(t, Config{Start: 4})
			s := mustAcquire(t, l)
			l.RateLimited(s, 10*time.Second)
			ctx, cancel := context.WithCancel(t.Context())
			head := goAcquire(ctx, l)
			synctest.Wait()
			next := goAcquire(t.Context(), l)
			synctest.Wait()
			if n := clk.Timers(); n != 1 {
				t.Fatalf("%d timers pending, want 1 (the head's)", n)
			}
			cancel()
			synctest.Wait()
			if res, ok := returned(head); !ok || !errors.Is(res.err, context.Canceled) {
				t.Fatalf("head after cancel: returned %v, err %v", ok, res.err)
			}
			if n := clk.Timers(); n != 1 {
				t.Fatalf("%d timers pending, want 1 (taken over by the new head)", n)
			}
			clk.Advance(10 * time.Second)
			synctest.Wait()
			res, ok := returned(next)
			if !ok || res.err != nil {
				t.Fatalf("next waiter at the gate: returned %v, err %v", ok, res.err)
			}
			if st := l.Snapshot(); st.InFlight != 1 || st.Waiting != 0 {
				t.Fatalf("Snapshot() = %+v, want 1 in flight", st)
			}
			l.Failed(res.started)
		})
	})
	t.Run("already canceled", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, _ := newTestAIMD(t, Config{})
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			if _, err := l.Acquire(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("Acquire(canceled ctx) = %v, want context.Canceled", err)
			}
			if got := l.InFlight(); got != 0 {
				t.Fatalf("InFlight() = %d, want 0", got)
			}
		})
	})
	t.Run("waiting for pacing", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, clk := newTestAIMD(t, Config{RPM: 60})
			s := mustAcquire(t, l)
			ctx, cancel := context.WithCancel(t.Context())
			r := goAcquire(ctx, l)
			synctest.Wait()
			if got := l.InFlight(); got != 2 {
				t.Fatalf("InFlight() = %d while pacing, want 2", got)
			}
			cancel()
			synctest.Wait()
			if res, ok := returned(r); !ok || !errors.Is(res.err, context.Canceled) {
				t.Fatalf("Acquire after cancel: returned %v, err %v", ok, res.err)
			}
			if got, n := l.InFlight(), clk.Timers(); got != 1 || n != 0 {
				t.Fatalf("InFlight() = %d with %d timers, want 1 and 0", got, n)
			}
			l.Succeeded(s, 100)
		})
	})
}

func TestAIMD_Acquire_pacing(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		immediate int           // calls that start at once
		wait      time.Duration // the next one's wait
	}{
		{"RPM 60", Config{RPM: 60}, 1, time.Second},
		{"RPM 600", Config{RPM: 600}, 10, 100 * time.Millisecond},
		// 1000 tokens/s, burst 1000, 500 estimated tokens per call.
		{"TPM 60000", Config{TPM: 60000, PaceTPM: true}, 2, 500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				tt.cfg.Start, tt.cfg.Ceiling = 16, 16
				l, clk := newTestAIMD(t, tt.cfg)
				t0 := clk.Now()
				var held []time.Time
				for range tt.immediate {
					held = append(held, mustAcquire(t, l))
				}
				r := goAcquire(t.Context(), l)
				synctest.Wait()
				clk.Advance(tt.wait - time.Millisecond)
				synctest.Wait()
				if _, ok := returned(r); ok {
					t.Fatalf("call %d started before %v", tt.immediate+1, tt.wait)
				}
				clk.Advance(time.Millisecond)
				synctest.Wait()
				res, ok := returned(r)
				if !ok || res.err != nil {
					t.Fatalf("call %d at %v: returned %v, err %v", tt.immediate+1, tt.wait, ok, res.err)
				}
				if want := t0.Add(tt.wait); !res.started.Equal(want) {
					t.Errorf("started = %v, want %v", res.started, want)
				}
				for _, s := range append(held, res.started) {
					l.Failed(s)
				}
			})
		})
	}
}

func TestAIMD_TPMCeiling(t *testing.T) {
	// TPM 60000: ceiling = 60000 * latency / (60s * tokens), in [1, 64].
	tests := []struct {
		name    string
		latency time.Duration
		tokens  int64
		want    int
	}{
		{"2s at 1000 tokens", 2 * time.Second, 1000, 2},
		{"6s at 500 tokens", 6 * time.Second, 500, 12},
		{"7s at 600 tokens floors 11.67", 7 * time.Second, 600, 11},
		{"capped by Ceiling", 30 * time.Second, 100, 64},
		{"held at Floor", time.Second, 10000, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, clk := newTestAIMD(t, Config{Start: 8, TPM: 60000})
				if got := l.Snapshot().Ceiling; got != DefaultCeiling {
					t.Fatalf("Ceiling before any measurement = %d, want %d", got, DefaultCeiling)
				}
				l.SetLimit(DefaultCeiling)
				succeedN(t, l, clk, 100, tt.latency, tt.tokens)
				st := l.Snapshot()
				if st.Ceiling != tt.want || st.Limit != tt.want {
					t.Errorf("Ceiling = %d, Limit = %d; want both %d", st.Ceiling, st.Limit, tt.want)
				}
				if st.AvgTokens != float64(tt.tokens) || st.AvgLatency != tt.latency {
					t.Errorf("averages = %v tokens, %v; want %v, %v", st.AvgTokens, st.AvgLatency, tt.tokens, tt.latency)
				}
				if st.Decreases != 0 {
					t.Errorf("Decreases = %d: lowering to the derived ceiling is not a congestion event", st.Decreases)
				}
			})
		})
	}
}

// Growth by streaks stops at the derived ceiling.
func TestAIMD_TPMCeiling_growth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, clk := newTestAIMD(t, Config{Start: 8, TPM: 60000})
		succeedN(t, l, clk, 8+9+10+11, 6*time.Second, 500) // ceiling 12
		if got := l.Limit(); got != 12 {
			t.Fatalf("Limit() = %d after four streaks, want 12", got)
		}
		succeedN(t, l, clk, 200, 6*time.Second, 500)
		if st := l.Snapshot(); st.Limit != 12 || st.MaxLimit != 12 || st.Increases != 4 {
			t.Fatalf("Snapshot() = %+v, want limit held at the derived ceiling 12", st)
		}
	})
}

func TestAIMD_SetLimit(t *testing.T) {
	tests := []struct {
		name string
		n    int
		want int
	}{
		{"inside", 20, 20},
		{"above ceiling", 100, 32},
		{"below floor", 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, _ := newTestAIMD(t, Config{Start: 8, Floor: 2, Ceiling: 32})
				l.SetLimit(tt.n)
				if got := l.Limit(); got != tt.want {
					t.Errorf("SetLimit(%d): Limit() = %d, want %d", tt.n, got, tt.want)
				}
			})
		})
	}
	t.Run("wakes waiters", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, _ := newTestAIMD(t, Config{Start: 1})
			held := mustAcquire(t, l)
			r := goAcquire(t.Context(), l)
			synctest.Wait()
			l.SetLimit(2)
			synctest.Wait()
			res, ok := returned(r)
			if !ok || res.err != nil {
				t.Fatalf("waiter after SetLimit(2): returned %v, err %v", ok, res.err)
			}
			l.Failed(held)
			l.Failed(res.started)
		})
	})
}

func TestAIMD_Fixed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := newFakeClock()
		l := NewFixed(3)
		l.cfg.Now, l.newTimer = clk.Now, clk.newTimer
		held := []time.Time{mustAcquire(t, l), mustAcquire(t, l), mustAcquire(t, l)}
		r := goAcquire(t.Context(), l)
		synctest.Wait()
		if _, ok := returned(r); ok {
			t.Fatal("a fourth call started in a pool of 3")
		}
		clk.Advance(time.Second)
		l.RateLimited(held[0], 5*time.Second)
		synctest.Wait()
		if _, ok := returned(r); ok {
			t.Fatal("Acquire returned inside the retry-after gate")
		}
		if got := l.Limit(); got != 3 {
			t.Fatalf("Limit() = %d after a 429, want 3", got)
		}
		clk.Advance(5 * time.Second)
		synctest.Wait()
		res, ok := returned(r)
		if !ok || res.err != nil {
			t.Fatalf("Acquire after the gate: returned %v, err %v", ok, res.err)
		}
		held = append(held[1:], res.started)
		for _, s := range held {
			l.Succeeded(s, 100)
		}
		succeedN(t, l, clk, 50, time.Second, 100)
		if st := l.Snapshot(); st.Limit != 3 || st.Increases != 0 || st.Decreases != 0 {
			t.Fatalf("Snapshot() = %+v, want a flat 3", st)
		}
	})
}

func TestAIMD_Failed_overRelease(t *testing.T) {
	l := New(Config{})
	defer func() {
		if recover() == nil {
			t.Error("Failed without Acquire did not panic")
		}
	}()
	l.Failed(time.Now())
}

func TestConfig_withDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   Config
		want Config
	}{
		{"zero", Config{}, Config{Start: 8, Floor: 1, Ceiling: 64, Increase: 1, DecreaseFactor: 0.5, Cooldown: 4 * time.Second, EstimatedTokens: 500}},
		{"start clamped", Config{Start: 100, Ceiling: 10}, Config{Start: 10, Floor: 1, Ceiling: 10, Increase: 1, DecreaseFactor: 0.5, Cooldown: 4 * time.Second, EstimatedTokens: 500}},
		{"ceiling raised to floor", Config{Floor: 5, Ceiling: 3}, Config{Start: 5, Floor: 5, Ceiling: 5, Increase: 1, DecreaseFactor: 0.5, Cooldown: 4 * time.Second, EstimatedTokens: 500}},
		{"bad factor, no cooldown", Config{DecreaseFactor: 1.5, Cooldown: -1}, Config{Start: 8, Floor: 1, Ceiling: 64, Increase: 1, DecreaseFactor: 0.5, EstimatedTokens: 500}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in.withDefaults()
			if got.Now == nil {
				t.Fatal("Now is nil")
			}
			got.Now = nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("withDefaults() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// BenchmarkAIMD_AcquireRelease measures one Acquire and Succeeded pair under
// parallel load, with a limit that never blocks and with one far below the
// number of goroutines (every Acquire queues).
func BenchmarkAIMD_AcquireRelease(b *testing.B) {
	for _, bc := range []struct {
		name  string
		limit int
	}{
		{"unblocked", 1 << 20},
		{"limit=2", 2},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l := New(Config{Start: bc.limit, Floor: bc.limit, Ceiling: bc.limit})
			ctx := context.Background()
			b.ReportAllocs()
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					s, err := l.Acquire(ctx)
					if err != nil {
						b.Error(err)
						return
					}
					l.Succeeded(s, 500)
				}
			})
		})
	}
}
