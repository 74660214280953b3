package limiter

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// quotaSim is a small model of a rate-limited API, to run a limiter end to
// end in virtual time (a synctest bubble): a sliding-window request quota
// following a schedule of percentages, latency base plus uniform jitter,
// and 429s that reach the client after a network round trip, carrying the
// exact time until a request would be admitted, as the Gemini simulator's
// do. It is the benchmark's scenario (bench.DefaultConfig) in miniature.
type quotaSim struct {
	rpm      int           // requests per window at 100%
	window   time.Duration // the quota's window
	schedule []simStep
	latency  time.Duration
	jitter   time.Duration
	refusal  time.Duration // a 429's round trip
	seed     uint64

	mu       sync.Mutex
	start    time.Time
	admitted []time.Time // within the last window, oldest first
	rng      *rand.Rand
	calls    int
	refused  int
}

type simStep struct {
	at  time.Duration
	pct int
}

func (s *quotaSim) limitAt(t time.Time) int {
	pct := 100
	for _, st := range s.schedule {
		if t.Sub(s.start) >= st.at {
			pct = st.pct
		}
	}
	return s.rpm * pct / 100
}

// call decides a call arriving at now: admitted (ok) after a latency, or
// refused after s.refusal with the delay until one would be admitted.
func (s *quotaSim) call(now time.Time) (took, retryAfter time.Duration, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	i := 0
	for i < len(s.admitted) && !s.admitted[i].Add(s.window).After(now) {
		i++
	}
	s.admitted = s.admitted[i:]
	lim := s.limitAt(now)
	if len(s.admitted) >= lim {
		s.refused++
		delay := s.window
		if lim > 0 {
			delay = s.admitted[len(s.admitted)-lim].Add(s.window).Sub(now)
		}
		return s.refusal, delay, false
	}
	s.admitted = append(s.admitted, now)
	return s.latency + time.Duration(s.rng.Int64N(int64(s.jitter)+1)), 0, true
}

// capacity is the requests the quota admits over [0, d): its rate
// integrated over the schedule.
func (s *quotaSim) capacity(d time.Duration) float64 {
	total, from, pct := 0.0, time.Duration(0), 100
	for _, st := range append(s.schedule, simStep{at: d}) {
		to := min(st.at, d)
		if to > from {
			total += float64(s.rpm*pct/100) / s.window.Seconds() * (to - from).Seconds()
			from = to
		}
		pct = st.pct
	}
	return total
}

type simResult struct {
	wall    time.Duration
	goodput float64 // calls over capacity
	share   float64 // 429s over calls
	limits  []int   // the limit every 250 ms
}

// drain makes n calls through l from workers goroutines, each retrying a
// refused call at once (the runner's behaviour with a limiter). Call it in
// a synctest bubble.
func (s *quotaSim) drain(l *AIMD, n, workers int) simResult {
	s.start = time.Now()
	s.rng = rand.New(rand.NewPCG(s.seed, 2))
	var (
		mu   sync.Mutex
		next int
		wg   sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				if next >= n {
					mu.Unlock()
					return
				}
				next++
				mu.Unlock()
				for {
					started, err := l.Acquire(context.Background())
					if err != nil {
						panic(err)
					}
					took, retryAfter, ok := s.call(time.Now())
					time.Sleep(took)
					if ok {
						l.Succeeded(started, 100)
						break
					}
					l.RateLimited(started, retryAfter)
				}
			}
		})
	}
	done := make(chan struct{})
	var limits []int
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				limits = append(limits, l.Limit())
			case <-done:
				return
			}
		}
	}()
	wg.Wait()
	close(done)
	<-sampled
	wall := time.Since(s.start)
	return simResult{wall: wall, goodput: float64(n) / s.capacity(wall), share: float64(s.refused) / float64(s.calls), limits: limits}
}

// The default limiter against the benchmark's scenario: 200 requests per
// 1 s window (about 25 calls in flight at 100-150 ms each), halved for the
// middle third of the run. The bounds are loose: this guards the
// controller's behaviour (it tracks the quota through the drop and back,
// without a storm of 429s), not its figures, which bench measures.
func TestAIMD_quotaSim(t *testing.T) {
	for seed := range uint64(4) {
		synctest.Test(t, func(t *testing.T) {
			s := &quotaSim{
				rpm: 200, window: time.Second, latency: 100 * time.Millisecond, jitter: 50 * time.Millisecond,
				refusal: 20 * time.Millisecond, seed: seed + 1,
				schedule: []simStep{{6 * time.Second, 50}, {12 * time.Second, 100}},
			}
			r := s.drain(New(Config{}), 3000, 64)
			t.Logf("seed %d: wall %v, goodput %.1f%%, 429s %.2f%%, limit every 250ms %v",
				seed+1, r.wall.Round(10*time.Millisecond), 100*r.goodput, 100*r.share, r.limits)
			if r.goodput < 0.8 || r.share > 0.03 {
				t.Errorf("goodput %.1f%% of capacity with %.2f%% 429s; want at least 80%% and at most 3%%", 100*r.goodput, 100*r.share)
			}
			// In the middle of the halved third the limit sits near the
			// 12.5 calls the quota then carries; near the end near 25.
			if mid := r.limits[36]; mid < 8 || mid > 18 {
				t.Errorf("limit at 9s = %d, want near 12 (quota halved)", mid)
			}
			if late := r.limits[len(r.limits)-4]; late < 18 || late > 32 {
				t.Errorf("limit near the end = %d, want near 25", late)
			}
		})
	}
}
