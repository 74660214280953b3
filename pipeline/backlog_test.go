package pipeline_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// stageCommits is a memStore whose commits take latency of virtual time
// and which counts, per stage, the commits holding its transitions.
type stageCommits struct {
	*memStore
	clock   *virtualClock
	latency time.Duration

	mu  sync.Mutex
	per map[string]int
}

func (s *stageCommits) Commit(ts []pipeline.Transition) error {
	_ = s.clock.sleep(context.Background(), s.latency)
	seen := map[string]bool{}
	for _, t := range ts {
		seen[t.Stage] = true
	}
	s.mu.Lock()
	for st := range seen {
		s.per[st]++
	}
	s.mu.Unlock()
	return s.memStore.Commit(ts)
}

func (s *stageCommits) commits(stage string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.per[stage]
}

// free is a local stage's result: an output, nothing billed.
func free(clock *virtualClock, took time.Duration) func(context.Context, pipeline.Item, int) (pipeline.Result, error) {
	return func(ctx context.Context, it pipeline.Item, _ int) (pipeline.Result, error) {
		if err := clock.sleep(ctx, took); err != nil {
			return pipeline.Result{}, err
		}
		return pipeline.Result{Output: json.RawMessage(`"` + it.ID + `"`)}, nil
	}
}

// TestRunner_FreeResultsDoNotHoldCalls: results that billed nothing are
// not in the backlog that stops calls while answers wait for a slow
// disk (a kill re-does them for free), so a local stage goes on at its
// own pace while its results are being written.
func TestRunner_FreeResultsDoNotHoldCalls(t *testing.T) {
	const (
		items   = 200
		workers = 2
		took    = 10 * time.Millisecond
	)
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		st := &stageCommits{memStore: newMemStore([]string{"pre"}, items), clock: clock, latency: 2 * time.Second, per: map[string]int{}}
		var mu sync.Mutex
		var last time.Duration
		work := free(clock, took)
		pre := &funcStage{name: "pre", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			res, err := work(ctx, it, n)
			mu.Lock()
			last = max(last, clock.Since())
			mu.Unlock()
			return res, err
		}}
		r := &pipeline.Runner{Store: st, Clock: clock, Stages: []pipeline.StageConfig{{Stage: pre, Workers: workers}}}
		if _, err := r.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if w := st.tally(); w["done"] != items {
			t.Fatalf("where = %v", w)
		}
		ownPace := items / workers * took
		t.Logf("the last item was worked at +%s (its own pace %s); %d commits", last, ownPace, st.commits("pre"))
		if last > ownPace+took {
			t.Errorf("the last item was worked at +%s, want by +%s: the stage waited for commits of results a kill re-does for free", last, ownPace+took)
		}
	})
}
