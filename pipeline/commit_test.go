package pipeline_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// slowStore is a memStore whose commits take latency of virtual time
// (a slow fsync), and which tracks the answers not yet committed: what a
// kill at that instant would throw away and re-pay.
type slowStore struct {
	*memStore
	clock   *virtualClock
	latency time.Duration

	mu                  sync.Mutex
	answered, committed int
	maxExposure         int
}

func (s *slowStore) answer() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answered++
	s.maxExposure = max(s.maxExposure, s.answered-s.committed)
}

func (s *slowStore) Commit(ts []pipeline.Transition) error {
	_ = s.clock.sleep(context.Background(), s.latency)
	if err := s.memStore.Commit(ts); err != nil {
		return err
	}
	s.mu.Lock()
	s.committed += len(ts)
	s.mu.Unlock()
	return nil
}

// TestRunner_SlowCommitBoundsBacklog: whatever the disk's speed, the
// answers waiting for their commit stay within the calls in flight plus
// MaxBacklogAge of answers; a slow disk slows the calls instead.
func TestRunner_SlowCommitBoundsBacklog(t *testing.T) {
	const (
		workers  = 8
		callTime = 10 * time.Millisecond
		items    = 2000
	)
	// Answers that can be waiting: every call in flight when the oldest
	// waiting answer arrived, plus the calls started in the MaxBacklogAge
	// after it.
	bound := workers + workers*int(pipeline.DefaultMaxBacklogAge/callTime)
	for _, latency := range []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond, 400 * time.Millisecond, 2 * time.Second} {
		t.Run(fmt.Sprint("commit takes ", latency), func(t *testing.T) {
			inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
				st := &slowStore{memStore: newMemStore([]string{"api"}, items), clock: clock, latency: latency}
				api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
					if err := clock.sleep(ctx, callTime); err != nil {
						return pipeline.Result{}, err
					}
					st.answer()
					return ok(ctx, it, n)
				}}
				r := &pipeline.Runner{Store: st, Clock: clock, Stages: []pipeline.StageConfig{{Stage: api, Workers: workers}}}
				if _, err := r.Run(context.Background()); err != nil {
					t.Fatal(err)
				}
				if w := st.tally(); w["done"] != items {
					t.Fatalf("where = %v", w)
				}
				t.Logf("commit %s: at most %d answers waited for their commit (bound %d, plus %d in flight); %d items in %s",
					latency, st.maxExposure, bound, workers, items, clock.Since())
				if st.maxExposure > bound {
					t.Errorf("%d answers waited for their commit at once, want at most %d", st.maxExposure, bound)
				}
			})
		})
	}
}
