package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// cachingMemStore is a memStore that also keeps answers by (stage, key)
// and the money ledger, written with the transitions that apply, as the
// bbolt store does.
type cachingMemStore struct {
	*memStore
	cmu     sync.Mutex
	answers map[string]pipeline.Result
	ledger  map[string]pipeline.Ledger
}

var (
	_ pipeline.AnswerCache  = (*cachingMemStore)(nil)
	_ pipeline.Ledgers      = (*cachingMemStore)(nil)
	_ pipeline.QueueCounter = (*cachingMemStore)(nil)
)

func newCachingMemStore(stages []string, texts []string) *cachingMemStore {
	s := &cachingMemStore{memStore: newMemStore(stages, 0), answers: map[string]pipeline.Result{}, ledger: map[string]pipeline.Ledger{}}
	for i, text := range texts {
		id := fmt.Sprintf("i%04d", i)
		s.records[id] = pipeline.Record{ID: id, Text: text}
		s.enqueue(stages[0], id)
	}
	return s
}

func (s *cachingMemStore) Commit(ts []pipeline.Transition) error {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	s.mu.Lock()
	var applied, moves []pipeline.Transition
	for _, t := range ts {
		if s.todo[t.Stage][t.Seq] == t.ID {
			applied = append(applied, t)
		}
		if t.Outcome != pipeline.Billed {
			moves = append(moves, t)
		}
	}
	s.mu.Unlock()
	if err := s.memStore.Commit(moves); err != nil {
		return err
	}
	for _, t := range applied {
		if t.Outcome == pipeline.Succeeded && t.CacheKey != "" && !t.Cached {
			s.answers[t.Stage+"\x00"+t.CacheKey] = t.Result
		}
		l := s.ledger[t.Stage]
		l.SpentUSD += t.CostUSD
		if t.Cached {
			l.Cached++
			l.SavedUSD += t.SavedUSD
		} else if t.Outcome == pipeline.Succeeded {
			l.Paid++
		}
		s.ledger[t.Stage] = l
	}
	return nil
}

func (s *cachingMemStore) CachedAnswer(stage, key string) (pipeline.Result, bool, error) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	res, ok := s.answers[stage+"\x00"+key]
	return res, ok, nil
}

func (s *cachingMemStore) Ledgers() (map[string]pipeline.Ledger, error) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	out := map[string]pipeline.Ledger{}
	for k, v := range s.ledger {
		out[k] = v
	}
	return out, nil
}

func (s *cachingMemStore) QueuedThrough(stage string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, st := range s.stages {
		n += len(s.todo[st])
		if st == stage {
			return n, nil
		}
	}
	return 0, fmt.Errorf("unknown stage %q", stage)
}

// keyedStage is a funcStage whose cache key is its version and the
// item's text, and whose calls are priced by their text's length.
type keyedStage struct {
	funcStage
	version string
	// keyed counts CacheKey calls; gate, when set, is closed once
	// gateAt items have asked for their key.
	keyed  atomic.Int64
	gateAt int64
	gate   chan struct{}
	once   sync.Once
}

func (k *keyedStage) CacheKey(it pipeline.Item) (string, error) {
	if n := k.keyed.Add(1); k.gate != nil && n >= k.gateAt {
		k.once.Do(func() { close(k.gate) })
	}
	if it.Text == "" {
		return "", errors.New("no text")
	}
	return k.version + "\x00" + it.Text, nil
}

// answer is a paid answer that names the text it answers.
func answer(it pipeline.Item) pipeline.Result {
	out, _ := json.Marshal(map[string]string{"label": "of " + it.Text})
	n := int64(len(it.Text))
	return pipeline.Result{Output: out, Usage: pipeline.Usage{PromptTokens: 100 + n, CandidateTokens: 20 + n%7, TotalTokens: 120 + n + n%7}}
}

func repeat(text string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = text
	}
	return out
}

// TestRunner_Singleflight: identical items in flight together make one
// call; the others wait for its answer and reuse it.
func TestRunner_Singleflight(t *testing.T) {
	const items, workers = 200, 64
	st := newCachingMemStore([]string{"api"}, repeat("Great app!", items))
	api := &keyedStage{version: "v1", gateAt: workers, gate: make(chan struct{})}
	api.name = "api"
	api.fn = func(ctx context.Context, it pipeline.Item, _ int) (pipeline.Result, error) {
		// The owner answers only once every worker holds an item with
		// its key: the other 63 are waiting for it, not reading the store.
		select {
		case <-api.gate:
		case <-ctx.Done():
			return pipeline.Result{}, ctx.Err()
		}
		return answer(it), nil
	}
	price := pipeline.Price{InputPerM: 1, OutputPerM: 2}
	r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Workers: workers, Price: price, NewBackOff: noWait}}}
	sum, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, n := range api.calls {
		calls += n
	}
	s := sum.Stages["api"]
	if calls != 1 || s.Calls != 1 || s.Paid != 1 || s.Done != items || s.Cached != items-1 {
		t.Fatalf("calls %d (summary %d), done %d, cached %d; want 1 call, %d done, %d cached", calls, s.Calls, s.Done, s.Cached, items, items-1)
	}
	want := string(answer(pipeline.Item{Record: pipeline.Record{Text: "Great app!"}}).Output)
	for id, out := range st.outs["api"] {
		if string(out) != want {
			t.Fatalf("%s: output %s, want its twin's %s", id, out, want)
		}
	}
	one := price.Cost(answer(pipeline.Item{Record: pipeline.Record{Text: "Great app!"}}).Usage)
	if d := s.SavedUSD - float64(items-1)*one; d > 1e-9 || d < -1e-9 || s.CostUSD != one {
		t.Errorf("cost %v saved %v, want %v and %v", s.CostUSD, s.SavedUSD, one, float64(items-1)*one)
	}
}

// TestRunner_SingleflightOwnerFails: an owner's failure is its own; the
// items that waited for it are not dead-lettered with it but call again
// (one of them owns the key next).
func TestRunner_SingleflightOwnerFails(t *testing.T) {
	for _, backend := range []string{"memory", "bbolt"} {
		t.Run(backend, func(t *testing.T) {
			st := cacheTestStore(t, backend, repeat("Doesn't work", 50))
			var calls atomic.Int64
			api := &keyedStage{version: "v1"}
			api.name = "api"
			api.fn = func(ctx context.Context, it pipeline.Item, _ int) (pipeline.Result, error) {
				if calls.Add(1) == 1 {
					return pipeline.Result{}, pipeline.Permanentf("item %s: blocked", it.ID)
				}
				return answer(it), nil
			}
			r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Workers: 8, NewBackOff: noWait}}}
			sum, err := r.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			s := sum.Stages["api"]
			if calls.Load() != 2 || s.Dead != 1 || s.Done != 49 || s.Cached != 48 {
				t.Fatalf("calls %d, dead %d, done %d, cached %d; want 2 calls, 1 dead, 49 done, 48 cached", calls.Load(), s.Dead, s.Done, s.Cached)
			}
		})
	}
}

// cacheTestStore is an in-memory caching store, or the bbolt store, with
// one item per text.
func cacheTestStore(t testing.TB, backend string, texts []string) testStore {
	t.Helper()
	if backend == "memory" {
		return newCachingMemStore([]string{"api"}, texts)
	}
	b := openTestStore(t, backend, []string{"api"}, 0).(boltStore)
	ingest(t, b, 0, texts)
	return b
}

func ingest(t testing.TB, b boltStore, from int, texts []string) {
	t.Helper()
	var recs []pipeline.Record
	for i, text := range texts {
		recs = append(recs, pipeline.Record{ID: fmt.Sprintf("i%04d", from+i), Text: text})
	}
	if _, err := b.Ingest(recs); err != nil {
		t.Fatal(err)
	}
}

// TestRunner_CacheAcrossRuns: an answer committed by one run is reused by
// the next for an identical question; --no-cache, or a changed key (a
// new prompt or model), pays again.
func TestRunner_CacheAcrossRuns(t *testing.T) {
	texts := []string{"Great app!", "Too many ads", "Crashes on start", "Great app!"}
	price := pipeline.Price{InputPerM: 0.3, OutputPerM: 2.5}
	b := openTestStore(t, "bbolt", []string{"api"}, 0).(boltStore)
	run := func(version string, noCache bool) (calls int64, s *pipeline.StageStats) {
		t.Helper()
		var n atomic.Int64
		api := &keyedStage{version: version}
		api.name = "api"
		api.fn = func(_ context.Context, it pipeline.Item, _ int) (pipeline.Result, error) {
			n.Add(1)
			return answer(it), nil
		}
		r := &pipeline.Runner{Store: b, NoCache: noCache, Stages: []pipeline.StageConfig{{Stage: api, Workers: 1, Price: price, NewBackOff: noWait}}}
		sum, err := r.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return n.Load(), sum.Stages["api"]
	}
	steps := []struct {
		name       string
		version    string
		noCache    bool
		wantCalls  int64
		wantCached int64
	}{
		{"first run pays once per distinct text", "v1", false, 3, 1},
		{"same questions again are all cached", "v1", false, 0, 4},
		{"--no-cache pays for every item", "v1", true, 4, 0},
		{"a changed prompt is a new key", "v2", false, 3, 1},
	}
	for i, step := range steps {
		ingest(t, b, i*len(texts), texts)
		calls, s := run(step.version, step.noCache)
		if calls != step.wantCalls || s.Cached != step.wantCached || s.Done != int64(len(texts)) {
			t.Errorf("%s: calls %d cached %d done %d, want %d, %d, %d", step.name, calls, s.Cached, s.Done, step.wantCalls, step.wantCached, len(texts))
		}
		if step.wantCached > 0 && s.SavedUSD <= 0 {
			t.Errorf("%s: saved %v, want > 0", step.name, s.SavedUSD)
		}
	}
	ledgers, err := b.Ledgers()
	if err != nil {
		t.Fatal(err)
	}
	l := ledgers["api"]
	if l.Paid != 3+4+3 || l.Cached != 1+4+1 {
		t.Errorf("ledger %+v, want 10 paid and 6 cached", l)
	}
}
