package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memStore is an in-memory pipeline.Store with the same transition rules
// as the bbolt store, so the engine can be tested on its own.
type memStore struct {
	mu      sync.Mutex
	stages  []string
	seq     map[string]uint64
	todo    map[string]map[uint64]string // stage -> seq -> id
	where   map[string]string            // id -> "stage/queued|dead" or "done"
	outs    map[string]map[string]json.RawMessage
	dead    map[string]map[string]pipeline.DeadLetter
	records map[string]pipeline.Record
	commits int
	failOn  int // fail the Nth commit (1-based), 0 never
}

func newMemStore(stages []string, n int) *memStore {
	s := &memStore{stages: stages, seq: map[string]uint64{}, todo: map[string]map[uint64]string{},
		where: map[string]string{}, outs: map[string]map[string]json.RawMessage{},
		dead: map[string]map[string]pipeline.DeadLetter{}, records: map[string]pipeline.Record{}}
	for _, st := range stages {
		s.todo[st], s.outs[st], s.dead[st] = map[uint64]string{}, map[string]json.RawMessage{}, map[string]pipeline.DeadLetter{}
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("i%04d", i)
		s.records[id] = pipeline.Record{ID: id, Text: "text " + id}
		s.enqueue(stages[0], id)
	}
	return s
}

func (s *memStore) enqueue(stage, id string) {
	s.seq[stage]++
	s.todo[stage][s.seq[stage]] = id
	s.where[id] = stage + "/queued"
}

func (s *memStore) Queued(stage string, after uint64, max int) ([]pipeline.Queued, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var seqs []uint64
	for q := range s.todo[stage] {
		if q > after {
			seqs = append(seqs, q)
		}
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	var out []pipeline.Queued
	for _, q := range seqs {
		if len(out) == max {
			break
		}
		id := s.todo[stage][q]
		it := pipeline.Item{Record: s.records[id]}
		for i, st := range s.stages {
			if st == stage && i > 0 {
				it.Prev = s.outs[s.stages[i-1]][id]
			}
		}
		out = append(out, pipeline.Queued{Seq: q, Item: it})
	}
	return out, nil
}

func (s *memStore) Commit(ts []pipeline.Transition) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commits++
	if s.failOn > 0 && s.commits >= s.failOn {
		return errors.New("disk full")
	}
	for _, t := range ts {
		if s.todo[t.Stage][t.Seq] != t.ID {
			continue
		}
		delete(s.todo[t.Stage], t.Seq)
		if t.Outcome == pipeline.DeadLettered {
			s.dead[t.Stage][t.ID] = t.Dead
			s.where[t.ID] = t.Stage + "/dead"
			continue
		}
		s.outs[t.Stage][t.ID] = t.Result.Output
		for i, st := range s.stages {
			if st == t.Stage {
				if i+1 < len(s.stages) {
					s.enqueue(s.stages[i+1], t.ID)
				} else {
					s.where[t.ID] = "done"
				}
			}
		}
	}
	return nil
}

func (s *memStore) tally() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, w := range s.where {
		out[w]++
	}
	return out
}

// funcStage adapts a function to pipeline.Stage and counts calls per item.
type funcStage struct {
	name  string
	fn    func(ctx context.Context, it pipeline.Item, call int) (pipeline.Result, error)
	mu    sync.Mutex
	calls map[string]int
}

func (f *funcStage) Name() string { return f.name }
func (f *funcStage) Process(ctx context.Context, it pipeline.Item) (pipeline.Result, error) {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[it.ID]++
	n := f.calls[it.ID]
	f.mu.Unlock()
	return f.fn(ctx, it, n)
}

func ok(context.Context, pipeline.Item, int) (pipeline.Result, error) {
	return pipeline.Result{Output: json.RawMessage(`{"ok":true}`), Usage: pipeline.Usage{TotalTokens: 10}}, nil
}

func noWait() backoff.BackOff { return &backoff.ZeroBackOff{} }

func TestRunner_Run(t *testing.T) {
	permanentFor := func(id string) func(context.Context, pipeline.Item, int) (pipeline.Result, error) {
		return func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			if it.ID == id {
				return pipeline.Result{}, pipeline.Permanentf("empty text")
			}
			return ok(ctx, it, n)
		}
	}
	flaky := func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		if n < 3 {
			return pipeline.Result{}, errors.New("503 overloaded")
		}
		return ok(ctx, it, n)
	}
	alwaysFails := func(context.Context, pipeline.Item, int) (pipeline.Result, error) {
		return pipeline.Result{}, errors.New("500 internal")
	}
	panics := func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		if it.ID == "i0003" {
			panic("boom")
		}
		return ok(ctx, it, n)
	}
	tests := []struct {
		name      string
		first     func(context.Context, pipeline.Item, int) (pipeline.Result, error)
		second    func(context.Context, pipeline.Item, int) (pipeline.Result, error)
		wantWhere map[string]int
		wantCalls int // calls at the second stage
	}{
		{"all succeed", ok, ok, map[string]int{"done": 50}, 50},
		{"permanent dead-letters at once", permanentFor("i0007"), ok, map[string]int{"done": 49, "first/dead": 1}, 49},
		{"transient retried in place", ok, flaky, map[string]int{"done": 50}, 150},
		{"transient budget spent", ok, alwaysFails, map[string]int{"second/dead": 50}, 200},
		{"panic is permanent for that item", panics, ok, map[string]int{"done": 49, "first/dead": 1}, 49},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := newMemStore([]string{"first", "second"}, 50)
			second := &funcStage{name: "second", fn: tc.second}
			r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{
				{Stage: &funcStage{name: "first", fn: tc.first}, Workers: 4, NewBackOff: noWait},
				{Stage: second, Workers: 3, MaxAttempts: 4, NewBackOff: noWait},
			}}
			sum, err := r.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := st.tally(); fmt.Sprint(got) != fmt.Sprint(tc.wantWhere) {
				t.Errorf("where = %v, want %v", got, tc.wantWhere)
			}
			total := 0
			for _, n := range second.calls {
				total += n
			}
			if total != tc.wantCalls || sum.Stages["second"].Calls != int64(tc.wantCalls) {
				t.Errorf("second-stage calls = %d (summary %d), want %d", total, sum.Stages["second"].Calls, tc.wantCalls)
			}
			if sum.Status != "complete" {
				t.Errorf("status = %q", sum.Status)
			}
			for _, d := range st.dead["second"] {
				if d.Attempts != 4 || d.Class != pipeline.ClassTransient {
					t.Errorf("dead letter = %+v", d)
				}
			}
		})
	}
}

// fakeLimiter counts calls and in-flight, and records each outcome.
type fakeLimiter struct {
	mu                       sync.Mutex
	inFlight, peak           int
	succeeded, limited, fail int
	retryAfter               []time.Duration
}

func (l *fakeLimiter) Acquire(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inFlight++
	l.peak = max(l.peak, l.inFlight)
	return time.Now(), nil
}
func (l *fakeLimiter) done(f func())              { l.mu.Lock(); l.inFlight--; f(); l.mu.Unlock() }
func (l *fakeLimiter) Succeeded(time.Time, int64) { l.done(func() { l.succeeded++ }) }
func (l *fakeLimiter) RateLimited(_ time.Time, d time.Duration) {
	l.done(func() { l.limited++; l.retryAfter = append(l.retryAfter, d) })
}
func (l *fakeLimiter) Failed(time.Time) { l.done(func() { l.fail++ }) }
func (l *fakeLimiter) Limit() int       { return 4 }
func (l *fakeLimiter) InFlight() int    { l.mu.Lock(); defer l.mu.Unlock(); return l.inFlight }

func TestRunner_RateLimitedSpendsNoAttempt(t *testing.T) {
	st := newMemStore([]string{"api"}, 20)
	lim := &fakeLimiter{}
	api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		if n <= 3 {
			return pipeline.Result{}, pipeline.RateLimited(errors.New("429"), time.Millisecond, false)
		}
		return ok(ctx, it, n)
	}}
	r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Workers: 4, Limiter: lim, MaxAttempts: 1, NewBackOff: noWait}}}
	sum, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.tally()["done"] != 20 {
		t.Fatalf("where = %v", st.tally())
	}
	if lim.limited != 60 || lim.succeeded != 20 || lim.inFlight != 0 || lim.retryAfter[0] != time.Millisecond {
		t.Fatalf("limiter saw %+v", lim)
	}
	if s := sum.Stages["api"]; s.RateLimited != 60 || s.Attempts != 20 || s.Calls != 80 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestRunner_DailyQuotaParks(t *testing.T) {
	st := newMemStore([]string{"pre", "api"}, 30)
	lim := &fakeLimiter{}
	var calls atomic.Int64
	api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		if calls.Add(1) > 5 {
			return pipeline.Result{}, pipeline.RateLimited(errors.New("429 per day"), 26*time.Second, true)
		}
		return ok(ctx, it, n)
	}}
	r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{
		{Stage: &funcStage{name: "pre", fn: ok}, Workers: 2},
		{Stage: api, Workers: 1, Limiter: lim},
	}}
	sum, err := r.Run(context.Background())
	if !errors.Is(err, pipeline.ErrStopped) {
		t.Fatalf("err = %v, want ErrStopped", err)
	}
	if sum.Status != "stopped" || sum.Message == "" {
		t.Fatalf("summary = %+v", sum)
	}
	w := st.tally()
	// The upstream stage drains fully; the parked stage keeps the rest queued.
	if w["done"] != 5 || w["api/queued"] != 25 {
		t.Fatalf("where = %v", w)
	}
}

func TestRunner_FatalStopsWithoutDeadLetters(t *testing.T) {
	st := newMemStore([]string{"api"}, 40)
	api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		if it.ID >= "i0010" {
			return pipeline.Result{}, pipeline.Fatal(errors.New("API key not valid"))
		}
		return ok(ctx, it, n)
	}}
	r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Workers: 1}}}
	_, err := r.Run(context.Background())
	var fe *pipeline.FatalError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, want fatal", err)
	}
	w := st.tally()
	if w["api/dead"] != 0 || w["done"] != 10 || w["api/queued"] != 30 {
		t.Fatalf("where = %v", w)
	}
}

func TestRunner_CommitFailureIsFatal(t *testing.T) {
	st := newMemStore([]string{"a"}, 100)
	st.failOn = 1
	r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: &funcStage{name: "a", fn: ok}, Workers: 2}}}
	_, err := r.Run(context.Background())
	if err == nil || pipeline.Classify(context.Background(), err) != pipeline.ClassFatal {
		t.Fatalf("err = %v", err)
	}
	if st.tally()["a/queued"] != 100 {
		t.Fatalf("items lost: %v", st.tally())
	}
}

func TestRunner_CancelGivesItemsBack(t *testing.T) {
	st := newMemStore([]string{"slow"}, 200)
	ctx, cancel := context.WithCancel(context.Background())
	var started atomic.Int64
	slow := &funcStage{name: "slow", fn: func(c context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		if started.Add(1) == 20 {
			cancel()
		}
		select {
		case <-c.Done():
			return pipeline.Result{}, c.Err()
		case <-time.After(time.Millisecond):
		}
		return ok(c, it, n)
	}}
	r := &pipeline.Runner{Store: st, Grace: time.Second, Stages: []pipeline.StageConfig{{Stage: slow, Workers: 4}}}
	_, err := r.Run(ctx)
	if !errors.Is(err, pipeline.ErrStopped) {
		t.Fatalf("err = %v", err)
	}
	w := st.tally()
	if w["done"]+w["slow/queued"] != 200 || w["slow/queued"] == 0 {
		t.Fatalf("where = %v", w)
	}
	// Resume finishes the rest, and no item is processed twice.
	r2 := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: slow, Workers: 4}}}
	if _, err := r2.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w := st.tally(); w["done"] != 200 {
		t.Fatalf("after resume: %v", w)
	}
	for id, n := range slow.calls {
		if n != 1 {
			t.Errorf("%s processed %d times", id, n)
		}
	}
}

// TestRunner_UnavailableSpendsNoAttempt: an unreachable endpoint is not
// the item's fault, so a short outage costs waiting, not attempts.
func TestRunner_UnavailableSpendsNoAttempt(t *testing.T) {
	st := newMemStore([]string{"api"}, 10)
	api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		if n <= 4 {
			return pipeline.Result{}, pipeline.Unavailable(errors.New("dial tcp: connection refused"))
		}
		return ok(ctx, it, n)
	}}
	r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Workers: 2, MaxAttempts: 2, NewBackOff: noWait}}}
	sum, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if w := st.tally(); w["done"] != 10 {
		t.Fatalf("where = %v", w)
	}
	if s := sum.Stages["api"]; s.Attempts != 10 || s.Calls != 50 {
		t.Fatalf("stats = %+v", s)
	}
}

// TestRunner_OutageParks: an endpoint that stays unreachable parks the
// stage (exit 3, resumable) instead of dead-lettering every item.
func TestRunner_OutageParks(t *testing.T) {
	st := newMemStore([]string{"api"}, 50)
	var clock atomic.Int64 // one virtual second per reading
	now := func() time.Time { return time.Unix(clock.Add(1), 0) }
	api := &funcStage{name: "api", fn: func(context.Context, pipeline.Item, int) (pipeline.Result, error) {
		return pipeline.Result{}, pipeline.Unavailable(errors.New("dial tcp: connection refused"))
	}}
	r := &pipeline.Runner{Store: st, Now: now, Stages: []pipeline.StageConfig{{Stage: api, Workers: 3, NewBackOff: noWait}}}
	sum, err := r.Run(context.Background())
	if !errors.Is(err, pipeline.ErrStopped) {
		t.Fatalf("err = %v, want ErrStopped", err)
	}
	if w := st.tally(); w["api/queued"] != 50 {
		t.Fatalf("where = %v: every item must stay queued", w)
	}
	if !strings.Contains(sum.Message, "cannot reach its endpoint") {
		t.Errorf("message = %q", sum.Message)
	}
}

// TestRunner_SamePermanentIsFatal: an API stage whose first calls all fail
// permanently for one reason stops the run instead of dead-lettering every
// item; a stage that has succeeded once keeps dead-lettering item by item.
func TestRunner_SamePermanentIsFatal(t *testing.T) {
	tests := []struct {
		name      string
		okFirst   bool
		wantFatal bool
	}{
		{"no success yet: fatal", false, true},
		{"after a success: dead letters", true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := newMemStore([]string{"api"}, 100)
			api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
				if tc.okFirst && it.ID == "i0000" {
					return ok(ctx, it, n)
				}
				return pipeline.Result{}, pipeline.Permanentf("item %q: 400 INVALID_ARGUMENT: bad responseSchema", it.ID)
			}}
			// One worker, so the first call (i0000) completes first.
			r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Workers: 1, Limiter: &fakeLimiter{}}}}
			_, err := r.Run(context.Background())
			w := st.tally()
			if tc.wantFatal {
				if pipeline.Classify(context.Background(), err) != pipeline.ClassFatal || !strings.Contains(err.Error(), "failed the same way") {
					t.Fatalf("err = %v, want fatal", err)
				}
				if w["api/dead"] != 25 || w["api/queued"] != 75 {
					t.Fatalf("where = %v", w)
				}
				return
			}
			if err != nil || w["api/dead"] != 99 || w["done"] != 1 {
				t.Fatalf("err %v, where = %v", err, w)
			}
		})
	}
}
