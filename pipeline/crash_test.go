package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

var errKilled = errors.New("process killed")

// killAfter passes commits to the bbolt store until n of them have held
// api results, and then fails every later one without writing it: the
// process "dies" after its nth api commit, and what was answered but not
// committed is lost.
type killAfter struct {
	*store.DB
	n int

	mu        sync.Mutex
	commits   int
	committed map[string]bool // ids with a committed api transition
}

func (k *killAfter) Commit(ts []pipeline.Transition) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.commits >= k.n {
		return errKilled
	}
	if err := k.DB.Commit(ts); err != nil {
		return err
	}
	api := false
	for _, t := range ts {
		if t.Stage == "api" {
			k.committed[t.ID], api = true, true
		}
	}
	if api {
		k.commits++
	}
	return nil
}

// TestRunner_CrashOnRealStore kills a run on the real bbolt store after its
// nth commit, reopens the file and runs again: every item ends done once,
// the store checks clean, an item committed before the kill is never
// called again, and what the kill re-pays is bounded by the calls in
// flight plus MaxBacklogAge of answers, with a slow disk too.
func TestRunner_CrashOnRealStore(t *testing.T) {
	const (
		items    = 600
		workers  = 8
		callTime = 10 * time.Millisecond
	)
	bound := 2*workers + workers*int(pipeline.DefaultMaxBacklogAge/callTime) // in flight + waiting answers
	defs := []store.StageDef{{Name: "pre"}, {Name: "api"}}
	for _, tc := range []struct {
		killAfter int
		slowDisk  time.Duration
	}{{1, 0}, {3, 0}, {5, 200 * time.Millisecond}, {12, 0}} {
		t.Run(fmt.Sprintf("killed after commit %d, commit takes %s", tc.killAfter, tc.slowDisk), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "crash.db")
			inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
				db, err := store.Open(path, store.Options{Stages: defs})
				if err != nil {
					t.Fatal(err)
				}
				var recs []pipeline.Record
				for i := range items {
					recs = append(recs, pipeline.Record{ID: fmt.Sprintf("r%04d", i), Text: fmt.Sprintf("review %d", i)})
				}
				if _, err := db.Ingest(recs); err != nil {
					t.Fatal(err)
				}
				var mu sync.Mutex
				calls := map[string]int{}
				api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
					mu.Lock()
					calls[it.ID]++
					mu.Unlock()
					if err := clock.sleep(ctx, callTime); err != nil {
						return pipeline.Result{}, err
					}
					out, _ := json.Marshal(pipeline.Fact{Label: "bug"})
					return pipeline.Result{Output: out, Usage: pipeline.Usage{TotalTokens: 1}}, nil
				}}
				slow := func(s pipeline.Store) pipeline.Store { return s }
				if tc.slowDisk > 0 {
					slow = func(s pipeline.Store) pipeline.Store { return &slowDisk{Store: s, clock: clock, latency: tc.slowDisk} }
				}
				stages := func() []pipeline.StageConfig {
					return []pipeline.StageConfig{{Stage: &funcStage{name: "pre", fn: ok}, Workers: 2}, {Stage: api, Workers: workers}}
				}

				killed := &killAfter{DB: db, n: tc.killAfter, committed: map[string]bool{}}
				r := &pipeline.Runner{Store: slow(killed), Clock: clock, CommitAttempts: 1, Stages: stages()}
				if _, err := r.Run(context.Background()); !errors.Is(err, errKilled) {
					t.Fatalf("first run: err = %v, want the kill", err)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				before := map[string]int{}
				for id, n := range calls {
					before[id] = n
				}

				db, err = store.Open(path, store.Options{Stages: defs})
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				r = &pipeline.Runner{Store: slow(db), Clock: clock, Stages: stages()}
				if _, err := r.Run(context.Background()); err != nil {
					t.Fatalf("resume: %v", err)
				}
				c, err := db.Counts()
				if err != nil {
					t.Fatal(err)
				}
				if c.Items != items || c.Done != items {
					t.Fatalf("after resume: %+v, want all %d done", c, items)
				}
				if problems, err := db.Check(); err != nil || len(problems) > 0 {
					t.Fatalf("check: %v %v", err, problems)
				}
				repaid := 0
				for i := range items {
					id := fmt.Sprintf("r%04d", i)
					n := calls[id]
					switch {
					case n < 1 || n > 2:
						t.Errorf("%s called %d times", id, n)
					case killed.committed[id] && n != 1:
						t.Errorf("%s was committed before the kill and called again", id)
					case n == 2 && before[id] != 1:
						t.Errorf("%s called twice in one run", id)
					}
					repaid += n - 1
				}
				t.Logf("%d of %d items committed before the kill; %d calls re-paid (bound %d)", len(killed.committed), items, repaid, bound)
				if len(killed.committed) == 0 || len(killed.committed) == items {
					t.Fatalf("the kill must land mid-run: %d items committed", len(killed.committed))
				}
				if repaid > bound {
					t.Errorf("the kill re-paid %d calls, want at most %d", repaid, bound)
				}
			})
		})
	}
}

// slowDisk delays every commit by latency of virtual time.
type slowDisk struct {
	pipeline.Store
	clock   *virtualClock
	latency time.Duration
}

func (s *slowDisk) Commit(ts []pipeline.Transition) error {
	_ = s.clock.sleep(context.Background(), s.latency)
	return s.Store.Commit(ts)
}
