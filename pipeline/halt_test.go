package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// TestRunner_HaltStopsTheRunResumable: once the account cannot pay (a
// HaltError, as the API's 429 for depleted prepayment credits is), the run
// stops at once as ErrStopped with the halt's own message: no stage takes
// more work, no call waits a backoff, nothing is dead-lettered, and a run
// once the credits are back finishes every item, none answered twice.
func TestRunner_HaltStopsTheRunResumable(t *testing.T) {
	const items, credits, workers = 60, 10, 4
	for _, tc := range []struct {
		name    string
		limiter func() pipeline.Limiter
	}{
		{"no limiter", func() pipeline.Limiter { return nil }},
		{"a limiter", func() pipeline.Limiter { return &fakeLimiter{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
				st := newMemStore([]string{"api", "down"}, items)
				var (
					paid, calls atomic.Int64
					dry         atomic.Bool
					mu          sync.Mutex
					answers     = map[string]int{}
				)
				dry.Store(true)
				api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
					calls.Add(1)
					if dry.Load() && paid.Add(1) > credits {
						return pipeline.Result{}, fmt.Errorf("item %s: %w", it.ID, pipeline.Halt(errors.New("api: the account cannot pay for calls: add credits, then run again")))
					}
					mu.Lock()
					answers[it.ID]++
					mu.Unlock()
					return ok(ctx, it, n)
				}}
				down := &funcStage{name: "down", fn: ok}
				run := func() (pipeline.RunSummary, error) {
					r := &pipeline.Runner{Store: st, Clock: clock, Stages: []pipeline.StageConfig{
						{Stage: api, Workers: workers, Limiter: tc.limiter(), NewBackOff: every(1e9)},
						{Stage: down, Workers: workers},
					}}
					return r.Run(context.Background())
				}
				sum, err := run()
				if !errors.Is(err, pipeline.ErrStopped) || err.Error() != "api: the account cannot pay for calls: add credits, then run again: "+pipeline.ErrStopped.Error() {
					t.Fatalf("err = %v, want ErrStopped with the halt's message and no item named", err)
				}
				if sum.Status != "stopped" {
					t.Errorf("status %q, want stopped", sum.Status)
				}
				if got := calls.Load(); got > credits+workers {
					t.Errorf("%d calls: the run went on past the halt (%d paid, %d workers)", got, credits, workers)
				}
				if d := sum.Ended.Sub(sum.Started); d != 0 {
					t.Errorf("the run took %s of virtual time: a halt waits no backoff", d)
				}
				w := st.tally()
				if w["api/dead"]+w["down/dead"] != 0 || w["done"]+w["down/queued"] != credits || w["api/queued"] != items-credits {
					t.Fatalf("where = %v: want %d answered, the rest queued at api, none dead", w, credits)
				}

				dry.Store(false)
				if _, err := run(); err != nil {
					t.Fatalf("resume: %v", err)
				}
				if w := st.tally(); w["done"] != items {
					t.Fatalf("after the resume where = %v", w)
				}
				if len(answers) != items {
					t.Errorf("%d items answered, want %d", len(answers), items)
				}
				for id, n := range answers {
					if n != 1 {
						t.Errorf("item %s answered %d times", id, n)
					}
				}
			})
		})
	}
}
