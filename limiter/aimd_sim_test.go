package limiter

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The concurrent AIMD, not only its law, against quota shapes: workers
// block in Acquire on the fake clock, and a driver steps the clock from
// one due instant to the next (a call's end, or a timer of the limiter)
// once every goroutine is blocked. It checks that the queue, the lock and
// the timers carry out the law as the law's own simulation does (the
// figures agree); goroutines that wake at one instant may run in any
// order, so the bounds are the law's guards, loosened.

// callEnds holds the calls in progress until the driver ends them.
type callEnds struct {
	mu   sync.Mutex
	ends map[chan struct{}]time.Time
}

func (c *callEnds) add(at time.Time) chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{})
	c.ends[ch] = at
	return ch
}

// earliest returns the first end pending, if any.
func (c *callEnds) earliest() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first time.Time
	for _, at := range c.ends {
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// release ends every call due by now.
func (c *callEnds) release(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ch, at := range c.ends {
		if !at.After(now) {
			close(ch)
			delete(c.ends, ch)
		}
	}
}

// runAIMD drains the shape's items through an AIMD on a fake clock with
// DefaultCeiling workers, each retrying a refused call at once as
// pipeline.Runner does. Call it in a synctest bubble.
func runAIMD(t *testing.T, sh quotaShape, seed uint64) simRun {
	clk := newFakeClock()
	clk.now = simEpoch
	l := New(Config{Now: clk.Now})
	l.newTimer = clk.newTimer
	srv := newSimServer(sh, seed)
	ends := &callEnds{ends: map[chan struct{}]time.Time{}}
	var (
		mu sync.Mutex
		r  simRun
		wg sync.WaitGroup
	)
	next := 0
	for range DefaultCeiling {
		wg.Go(func() {
			for {
				mu.Lock()
				if next >= sh.items {
					mu.Unlock()
					return
				}
				next++
				mu.Unlock()
				for {
					started, err := l.Acquire(context.Background())
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					mu.Lock()
					took, retryAfter, ok, named := srv.call(clk.Now(), simTokens)
					r.calls++
					mu.Unlock()
					<-ends.add(clk.Now().Add(took))
					if ok {
						l.Succeeded(started, simTokens)
						mu.Lock()
						r.done++
						mu.Unlock()
						break
					}
					mu.Lock()
					r.r429s++
					mu.Unlock()
					var rpm, tpm int64
					if named {
						rpm, tpm = sh.namedAt(started)
					}
					l.RateLimitedQuota(started, retryAfter, rpm, tpm)
				}
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	for {
		synctest.Wait()
		select {
		case <-finished:
			r.wall = clk.Now().Sub(simEpoch)
			r.goodput = perfect(sh, seed, 0).Seconds() / r.wall.Seconds()
			return r
		default:
		}
		at, ok := ends.earliest()
		if timer, tok := clk.NextTimer(); tok && (!ok || timer.Before(at)) {
			at, ok = timer, true
		}
		if !ok {
			t.Fatalf("%s: stalled at %v with %d of %d done", sh.name, clk.Now().Sub(simEpoch), r.done, sh.items)
		}
		clk.Advance(at.Sub(clk.Now()))
		ends.release(clk.Now())
	}
}

func TestAIMD_quotaShapes(t *testing.T) {
	for _, sh := range quotaShapes() {
		t.Run(sh.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := runAIMD(t, sh, 1)
				t.Logf("goodput %.3f, 429s %.2f%%, calls per item %.3f", r.goodput, 100*r.share(), r.callsPerItem())
				if r.done != sh.items {
					t.Fatalf("%d of %d items done", r.done, sh.items)
				}
				if r.goodput < sh.goodputFloor()-0.05 || r.share() > bar429+0.005 {
					t.Errorf("goodput %.3f with %.2f%% 429s; want at least %.2f and at most %.2f%%",
						r.goodput, 100*r.share(), sh.goodputFloor()-0.05, 100*(bar429+0.005))
				}
			})
		})
	}
}
