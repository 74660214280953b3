package limiter

import (
	"testing"
	"time"
)

// The limit on calls in flight is fitted with a latency that a run of
// quick answers under a heavy tail does not drag down, and that a
// latency grown with load still raises at once.
func TestLaw_limitLatency(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name      string
		latencies []time.Duration // successes, in order
		// wantLimit is the limit at 100 starts per second (× 1.5
		// headroom); the quick average's limit is given for contrast.
		wantLimit, quickLimit int
	}{
		{"steady", repeat(300*ms, 200), 45, 45},
		{"quick answers after slow ones: the slow average holds", append(repeat(300*ms, 200), repeat(50*ms, 16)...), 37, 12},
		{"latency grown with load: at once", append(repeat(100*ms, 200), repeat(400*ms, 8)...), 45, 45},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newTestLaw(Config{Start: 10})
			for _, d := range tt.latencies {
				w.observe(d, 100)
			}
			w.rate = 100
			w.fitLimit()
			quick := int(float64(w.rate)*w.latency().Seconds()*rateHeadroom + 0.999999)
			if w.limit != tt.wantLimit || quick != tt.quickLimit {
				t.Errorf("limit %d (the quick average's %d), want %d (%d)", w.limit, quick, tt.wantLimit, tt.quickLimit)
			}
		})
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = d
	}
	return s
}
