package pipeline

import (
	"sync/atomic"
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
// up to Workers; without a limiter it is Workers from the start.
func TestPool(t *testing.T) {
	tests := []struct {
		name      string
		workers   int
		limited   bool
		limits    []int // the limit at the start, then at each look
		away      int64 // workers waiting out a backoff or a hold
		start     int
		grows     []int
		finalSize int64
	}{
		{"no limiter: Workers", 8, false, []int{0, 0}, 0, 8, []int{0}, 8},
		{"a few dozen in flight: poolStart", 512, true, []int{8, 30, 40}, 0, poolStart, []int{0, 0}, poolStart},
		{"a learned limit above poolStart", 512, true, []int{200}, 0, 258, nil, 258},
		{"grows with the limit", 512, true, []int{8, 64, 64, 128}, 0, poolStart, []int{88 - poolStart, 0, 168 - 88}, 168},
		{"up to Workers", 512, true, []int{8, 500}, 0, poolStart, []int{512 - poolStart}, 512},
		{"a fixed pool under poolStart", 16, true, []int{16, 16}, 0, 16, []int{0}, 16},
		// Calls asleep are not in flight: a limit that grows only while
		// calls fill it would stall with a pool of just the limit.
		{"and with the workers away", 512, true, []int{8, 200}, 60, 78, []int{318 - 78}, 318},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := &settableLimiter{limit: tt.limits[0]}
			sc := &StageConfig{Workers: tt.workers}
			if tt.limited {
				sc.Limiter = lim
			}
			var workers, away atomic.Int64
			away.Store(tt.away)
			p := newPool(sc, &workers, &away)
			if got := p.started(); got != tt.start {
				t.Fatalf("started %d workers, want %d", got, tt.start)
			}
			for i, want := range tt.grows {
				lim.limit = tt.limits[i+1]
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
