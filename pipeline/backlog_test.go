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

// paidExposure is a memStore whose commits take latency of virtual time
// and which tracks the paid answers not yet committed: what a kill at
// that instant would throw away and pay again.
type paidExposure struct {
	*memStore
	clock   *virtualClock
	latency time.Duration

	mu                  sync.Mutex
	answered, committed int
	maxExposure         int
}

func (s *paidExposure) answer() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answered++
	s.maxExposure = max(s.maxExposure, s.answered-s.committed)
}

func (s *paidExposure) Commit(ts []pipeline.Transition) error {
	_ = s.clock.sleep(context.Background(), s.latency)
	if err := s.memStore.Commit(ts); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range ts {
		if t.Usage != (pipeline.Usage{}) {
			s.committed++
		}
	}
	return nil
}

// skipAfter is a local stage that skips every item after took of
// virtual time: its free results reach the committer without waiting
// for the backlog, as a Skipper's and a cached answer's do.
type skipAfter struct {
	funcStage
	clock *virtualClock
	took  time.Duration
}

func (s *skipAfter) Skip(ctx context.Context, it pipeline.Item) (pipeline.Result, bool) {
	if s.clock.sleep(ctx, s.took) != nil {
		return pipeline.Result{}, false
	}
	return pipeline.Result{Output: json.RawMessage(`"` + it.ID + `"`)}, true
}

// TestRunner_FreeResultsDoNotHidePaidAnswers: a commit that carries free
// results beside paid answers takes only the paid ones off the backlog,
// so the paid answers waiting for a slow disk stay within the calls in
// flight plus MaxBacklogAge of answers (TestRunner_SlowCommitBoundsBacklog)
// while free results commit with them.
func TestRunner_FreeResultsDoNotHidePaidAnswers(t *testing.T) {
	const (
		workers  = 8
		callTime = 10 * time.Millisecond
		items    = 2000
	)
	bound := workers + workers*int(pipeline.DefaultMaxBacklogAge/callTime)
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		st := &paidExposure{memStore: newMemStore([]string{"pre", "api"}, items), clock: clock, latency: 400 * time.Millisecond}
		// Slow enough that its results reach several commits.
		pre := &skipAfter{funcStage: funcStage{name: "pre", fn: free(clock, callTime)}, clock: clock, took: 5 * time.Millisecond}
		api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			if err := clock.sleep(ctx, callTime); err != nil {
				return pipeline.Result{}, err
			}
			st.answer()
			return ok(ctx, it, n)
		}}
		r := &pipeline.Runner{Store: st, Clock: clock, Stages: []pipeline.StageConfig{{Stage: pre, Workers: 4}, {Stage: api, Workers: workers}}}
		if _, err := r.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if w := st.tally(); w["done"] != items {
			t.Fatalf("where = %v", w)
		}
		t.Logf("at most %d paid answers waited for their commit (bound %d); %d items in %s", st.maxExposure, bound, items, clock.Since())
		if st.maxExposure > bound {
			t.Errorf("%d paid answers waited for their commit at once, want at most %d: free results took paid answers off the backlog", st.maxExposure, bound)
		}
	})
}
