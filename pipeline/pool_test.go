package pipeline

import (
	"testing"
)

// settableLimiter is a nopLimiter whose limit the test sets.
type settableLimiter struct {
	nopLimiter
	limit int
}

func (l *settableLimiter) Limit() int { return l.limit }

// A limited stage's pool starts at poolStart (or what the limit needs,
// when more) and grows with the limit, a quarter and poolSlack above it,
// at most doubling at a look, up to Workers, while it is busy: while no
// more than a quarter of it and poolSlack is outside a call. Without a
// limiter it is Workers from the start.
func TestPool(t *testing.T) {
	tests := []struct {
		name      string
		workers   int
		limited   bool
		limits    []int // the limit at the start, then at each look
		away      int64 // workers waiting out a backoff or a hold
		idle      int64 // workers outside a call at each look, besides the away
		start     int
		grows     []int
		finalSize int64
	}{
		{"no limiter: Workers", 8, false, []int{0, 0}, 0, 0, 8, []int{0}, 8},
		{"a few dozen in flight: poolStart", 512, true, []int{8, 30, 40}, 0, 0, poolStart, []int{0, 0}, poolStart},
		{"a learned limit above poolStart", 512, true, []int{200}, 0, 0, 258, nil, 258},
		{"grows with the limit", 512, true, []int{8, 64, 64, 128}, 0, 0, poolStart, []int{88 - poolStart, 0, 168 - 88}, 168},
		{"doubling at most, up to Workers", 512, true, []int{8, 500, 500, 500}, 0, 0, poolStart, []int{64, 128, 256}, 512},
		{"a fixed pool under poolStart", 16, true, []int{16, 16}, 0, 0, 16, []int{0}, 16},
		// Calls asleep are not in flight: a limit that grows only while
		// calls fill it would stall with a pool of just the limit.
		{"and with the workers away", 512, true, []int{8, 200, 200, 200}, 60, 0, 78, []int{78, 156, 318 - 312}, 318},
		// A paced limiter keeps fewer calls in flight than its limit:
		// workers already wait for a slot, more would wait too.
		{"a limit far above the calls in flight", 512, true, []int{8, 500, 2000}, 0, 34, poolStart, []int{0, 0}, poolStart},
		{"a quarter and poolSlack outside a call: still grows", 512, true, []int{8, 200}, 0, poolStart/4 + poolSlack, poolStart, []int{poolStart}, 2 * poolStart},
		{"one more: does not", 512, true, []int{8, 200}, 0, poolStart/4 + poolSlack + 1, poolStart, []int{0}, poolStart},
		// The last items of a run: workers wait for work, none is needed.
		{"workers waiting for work", 512, true, []int{8, 2000}, 0, 40, poolStart, []int{0}, poolStart},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := &settableLimiter{limit: tt.limits[0]}
			sc := &StageConfig{Workers: tt.workers}
			if tt.limited {
				sc.Limiter = lim
			}
			c := &stageCounters{}
			c.away.Store(tt.away)
			p := newPool(sc, c)
			if got := p.started(); got != tt.start {
				t.Fatalf("started %d workers, want %d", got, tt.start)
			}
			for i, want := range tt.grows {
				lim.limit = tt.limits[i+1]
				// Every worker but the away and tt.idle is in a call.
				c.inFlight.Store(c.workers.Load() - tt.away - tt.idle)
				if got := p.grow(); got != want {
					t.Errorf("at limit %d: grew by %d, want %d", lim.limit, got, want)
				}
			}
			if got := p.n.Load(); got != tt.finalSize {
				t.Errorf("pool of %d, want %d", got, tt.finalSize)
			}
		})
	}
}
