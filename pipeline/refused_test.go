package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// syncBuffer is a bytes.Buffer safe for the runner's goroutines to log to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRunner_RefusedForMinutesStops: a 429 that never clears (a bare one,
// as a proxy sends for a per-day quota, or one that is not a quota at all),
// retried one call every 4 s as at the limiter's floor, is reported with a
// warning halfway, then parks the stage as "quota exhausted" after
// MaxRefused of virtual time: the run ends as ErrStopped with a bounded
// number of calls, every item still queued. A success now and then keeps
// the run going.
func TestRunner_RefusedForMinutesStops(t *testing.T) {
	const step, warning = 4 * time.Second, `msg="every call refused"`
	tests := []struct {
		name       string
		maxRefused time.Duration
		succeedAt  int // every succeedAt-th call succeeds; 0 none
		wantStop   time.Duration
	}{
		{"default bound", 0, 0, pipeline.DefaultMaxRefused},
		{"configured bound", 2 * time.Minute, 0, 2 * time.Minute},
		{"a success every 30 calls (2 min) keeps going", 0, 30, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
				const items = 5
				st := newMemStore([]string{"api"}, items)
				var calls atomic.Int64
				api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
					if c := calls.Add(1); tc.succeedAt > 0 && c%int64(tc.succeedAt) == 0 {
						return ok(ctx, it, n)
					}
					return pipeline.Result{}, pipeline.RateLimited(errors.New("429 RESOURCE_EXHAUSTED: Resource has been exhausted (e.g. check quota)."), 0, false)
				}}
				var log syncBuffer
				r := &pipeline.Runner{Store: st, Clock: clock, Log: slog.New(slog.NewTextHandler(&log, nil)), Stages: []pipeline.StageConfig{
					{Stage: api, Workers: 1, MaxRateLimited: 1 << 30, MaxRefused: tc.maxRefused, NewBackOff: every(step)},
				}}
				sum, err := r.Run(context.Background())
				if tc.wantStop == 0 {
					if err != nil || st.tally()["done"] != items {
						t.Fatalf("err = %v, where = %v: refusals broken by successes must not stop the run", err, st.tally())
					}
					if strings.Contains(log.String(), warning) {
						t.Errorf("warned though calls succeeded:\n%s", log.String())
					}
					return
				}
				if !errors.Is(err, pipeline.ErrStopped) || !strings.HasPrefix(err.Error(), "quota exhausted for api: every call refused (429) for "+tc.wantStop.String()) ||
					!strings.Contains(err.Error(), "then run again to resume") {
					t.Fatalf("err = %v, want the stage parked as quota exhausted after %s", err, tc.wantStop)
				}
				if d := sum.Ended.Sub(sum.Started); d < tc.wantStop || d >= tc.wantStop+step {
					t.Errorf("stopped at +%s, want within a step of +%s", d, tc.wantStop)
				}
				if got, most := calls.Load(), int64(tc.wantStop/step)+1; got > most {
					t.Errorf("%d calls, want at most %d", got, most)
				}
				if w := st.tally(); w["api/queued"] != items {
					t.Errorf("where = %v: every item stays queued", w)
				}
				if n := strings.Count(log.String(), warning); n != 1 || strings.Index(log.String(), warning) > strings.Index(log.String(), "stage parked") {
					t.Errorf("the warning logged %d times, want once before the park:\n%s", n, log.String())
				}
			})
		})
	}
}
