package pipeline_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// pacedLimiter admits at most slots calls at once while its Limit climbs
// far above that, two per success from 16 to 2,000, as a limiter pacing a
// rate does: the cap on calls in flight is not what holds them. It
// records the most goroutines alive at an Acquire.
type pacedLimiter struct {
	slots     chan struct{}
	successes atomic.Int64
	mostGos   atomic.Int64
}

func (l *pacedLimiter) Acquire(ctx context.Context) (time.Time, error) {
	if n := int64(runtime.NumGoroutine()); n > l.mostGos.Load() {
		l.mostGos.Store(n)
	}
	select {
	case l.slots <- struct{}{}:
		return time.Now(), nil
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}
func (l *pacedLimiter) release()                   { <-l.slots }
func (l *pacedLimiter) Succeeded(time.Time, int64) { l.successes.Add(1); l.release() }
func (l *pacedLimiter) RateLimited(time.Time, time.Duration) {
	l.release()
}
func (l *pacedLimiter) Failed(time.Time)  { l.release() }
func (l *pacedLimiter) Limit() int        { return int(min(16+2*l.successes.Load(), 2000)) }
func (l *pacedLimiter) InFlight() int     { return len(l.slots) }
func (l *pacedLimiter) MostInFlight() int { return 5000 }

// BenchmarkRunner_PacedStage drains 2,000 items through an API stage whose
// limiter keeps 32 calls in flight under a limit climbing to 2,000:
// goroutines/op is the most goroutines alive at once, which the pool
// keeps near the calls in flight, not the limit (see pool.go).
func BenchmarkRunner_PacedStage(b *testing.B) {
	const items = 2000
	var most int64
	for b.Loop() {
		st := newMemStore([]string{"api"}, items)
		lim := &pacedLimiter{slots: make(chan struct{}, 32)}
		api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, call int) (pipeline.Result, error) {
			time.Sleep(100 * time.Microsecond) // the endpoint's round trip
			return ok(ctx, it, call)
		}}
		r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Limiter: lim}}}
		if _, err := r.Run(context.Background()); err != nil {
			b.Fatal(err)
		}
		most = max(most, lim.mostGos.Load())
	}
	b.ReportMetric(float64(most), "goroutines/op")
}
