package limiter

import (
	"cmp"
	"context"
	"errors"
	"math/rand"
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// The runner hands an AIMD the budgets a 429 names, its overload holds,
// and each call's size.
var (
	_ pipeline.QuotaLimiter     = (*AIMD)(nil)
	_ pipeline.OverloadListener = (*AIMD)(nil)
	_ pipeline.WeightedLimiter  = (*AIMD)(nil)
	_ pipeline.PoolSizer        = (*AIMD)(nil)
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

func TestAIMD_Acquire_retryAfterGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, clk := newTestAIMD(t, Config{Start: 8})
		t0 := clk.Now()
		a, b, c := mustAcquire(t, l), mustAcquire(t, l), mustAcquire(t, l)
		l.RateLimited(a, 10*time.Second+time.Millisecond)
		if got, want := l.GateUntil(), t0.Add(10*time.Second+time.Millisecond); !got.Equal(want) {
			t.Fatalf("GateUntil() = %v, want %v", got, want)
		}
		r := goAcquire(t.Context(), l)
		synctest.Wait()
		if _, ok := returned(r); ok {
			t.Fatal("Acquire returned inside the retry-after gate with slots free")
		}
		// A shorter delay does not move the gate earlier.
		clk.Advance(time.Second)
		l.RateLimited(b, time.Second+time.Millisecond)
		if got, want := l.GateUntil(), t0.Add(10*time.Second+time.Millisecond); !got.Equal(want) {
			t.Fatalf("GateUntil() = %v after a shorter delay, want %v", got, want)
		}
		clk.Advance(9 * time.Second)
		synctest.Wait()
		if _, ok := returned(r); ok {
			t.Fatal("Acquire returned 1ms before the gate")
		}
		// A longer delay moves it later, and the waiter follows.
		l.RateLimited(c, 12*time.Second+time.Millisecond)
		wantGate := clk.Now().Add(12*time.Second + time.Millisecond)
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
	// TPM 60000: ceiling = 60000 * latency / (60s * tokens), in [1,
	// Ceiling].
	tests := []struct {
		name    string
		ceiling int // 0: DefaultCeiling
		latency time.Duration
		tokens  int64
		want    int
	}{
		{"2s at 1000 tokens", 0, 2 * time.Second, 1000, 2},
		{"6s at 500 tokens", 0, 6 * time.Second, 500, 12},
		{"7s at 600 tokens floors 11.67", 0, 7 * time.Second, 600, 11},
		{"30s at 100 tokens", 0, 30 * time.Second, 100, 300},
		{"capped by DefaultCeiling", 0, 600 * time.Second, 100, DefaultCeiling},
		{"capped by Ceiling", 64, 30 * time.Second, 100, 64},
		{"held at Floor", 0, time.Second, 10000, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, clk := newTestAIMD(t, Config{Start: 8, TPM: 60000, Ceiling: tt.ceiling})
				ceiling := cmp.Or(tt.ceiling, DefaultCeiling)
				if got := l.Snapshot().Ceiling; got != ceiling {
					t.Fatalf("Ceiling before any measurement = %d, want %d", got, ceiling)
				}
				l.SetLimit(ceiling)
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
		clk.Advance(5300 * time.Millisecond)
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
		{"zero", Config{}, Config{Start: 8, Floor: 1, Ceiling: DefaultCeiling, Increase: 1, DecreaseFactor: 0.5, Cooldown: 4 * time.Second, EstimatedTokens: 500}},
		{"start clamped", Config{Start: 100, Ceiling: 10}, Config{Start: 10, Floor: 1, Ceiling: 10, Increase: 1, DecreaseFactor: 0.5, Cooldown: 4 * time.Second, EstimatedTokens: 500}},
		{"ceiling raised to floor", Config{Floor: 5, Ceiling: 3}, Config{Start: 5, Floor: 5, Ceiling: 5, Increase: 1, DecreaseFactor: 0.5, Cooldown: 4 * time.Second, EstimatedTokens: 500}},
		{"bad factor, no cooldown", Config{DecreaseFactor: 1.5, Cooldown: -1}, Config{Start: 8, Floor: 1, Ceiling: DefaultCeiling, Increase: 1, DecreaseFactor: 0.5, EstimatedTokens: 500}},
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

// TestAIMD_Acquire_neverStranded drives the limiter through seeded
// random sequences of starts, outcomes (successes, failures, 429s with
// exact, whole-second and no delays) and clock steps, and checks after
// every step that a line of waiters is never left with nobody watching the
// clock: when calls wait, either a call is in flight (its outcome will
// dispatch) or the head holds a timer. A waiter stranded with no call in
// flight and no timer is a hung run.
func TestAIMD_Acquire_neverStranded(t *testing.T) {
	for seed := int64(1); seed <= 40; seed++ {
		synctest.Test(t, func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			l, clk := newTestAIMD(t, Config{Start: 1 + rng.Intn(4), Floor: 1, Ceiling: 4})
			var waiting []<-chan acquired
			var running []time.Time
			for step := 0; step < 300; step++ {
				switch k := rng.Intn(10); {
				case k < 3:
					waiting = append(waiting, goAcquire(t.Context(), l))
				case k < 7 && len(running) > 0:
					i := rng.Intn(len(running))
					started := running[i]
					running = append(running[:i], running[i+1:]...)
					switch rng.Intn(5) {
					case 0:
						l.RateLimited(started, time.Duration(rng.Intn(3000))*time.Millisecond+time.Millisecond)
					case 1:
						l.RateLimited(started, time.Duration(1+rng.Intn(3))*time.Second)
					case 2:
						l.RateLimited(started, 0)
					case 3:
						l.Failed(started)
					default:
						l.Succeeded(started, 100)
					}
				default:
					clk.Advance(time.Duration(rng.Intn(700)) * time.Millisecond)
				}
				synctest.Wait()
				kept := waiting[:0]
				for _, r := range waiting {
					if res, ok := returned(r); ok {
						running = append(running, res.started)
					} else {
						kept = append(kept, r)
					}
				}
				waiting = kept
				if len(waiting) > 0 && l.InFlight() == 0 && clk.Timers() == 0 {
					t.Fatalf("seed %d step %d: %d waiters, no call in flight, no timer: stranded (limit %d, gate %v, now %v)",
						seed, step, len(waiting), l.Limit(), l.GateUntil(), clk.Now())
				}
			}
			for _, started := range running {
				l.Succeeded(started, 100)
			}
			for len(waiting) > 0 {
				clk.Advance(time.Minute)
				synctest.Wait()
				kept := waiting[:0]
				for _, r := range waiting {
					if res, ok := returned(r); ok {
						l.Succeeded(res.started, 100)
					} else {
						kept = append(kept, r)
					}
				}
				if len(kept) == len(waiting) && l.InFlight() == 0 && clk.Timers() == 0 {
					t.Fatalf("seed %d: %d waiters never let through", seed, len(kept))
				}
				waiting = kept
			}
		})
	}
}

// TestAIMD_startCarriedBackWhole: a start given (a limit learned by an
// earlier run) is paced, after the first round trip, as the rate it
// carries over that round trip; the limit Little's law gives back for
// that rate over the same round trip is the start, not one more. At
// round trips such as 100 µs, 5 / s / 1.5 * s * 1.5 comes to
// 5.000000000000001, which rounded up to 6.
func TestAIMD_startCarriedBackWhole(t *testing.T) {
	for _, rt := range []time.Duration{100 * time.Microsecond, 100015, 150 * time.Millisecond} {
		t.Run(rt.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l, clk := newTestAIMD(t, Config{Start: 5})
				started := mustAcquire(t, l)
				clk.Advance(rt)
				l.Succeeded(started, 100)
				if got := l.Limit(); got != 5 {
					t.Errorf("limit %d after the first round trip of %v, want the start, 5", got, rt)
				}
			})
		})
	}
}
