package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

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
	usage   map[string]pipeline.Usage // id -> usage carried by its committed transitions
	commits int
	failOn  int // fail from the Nth commit (1-based) on, 0 never
	failFor int // with failOn: fail only this many commits, 0 all
}

func newMemStore(stages []string, n int) *memStore {
	s := &memStore{stages: stages, seq: map[string]uint64{}, todo: map[string]map[uint64]string{},
		where: map[string]string{}, outs: map[string]map[string]json.RawMessage{},
		dead: map[string]map[string]pipeline.DeadLetter{}, records: map[string]pipeline.Record{},
		usage: map[string]pipeline.Usage{}}
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
	// One sequence for every queue, as PostgreSQL's: a Claimer's
	// rejected sequences name entries of any stage.
	s.seq[""]++
	s.todo[stage][s.seq[""]] = id
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
	if s.failOn > 0 && s.commits >= s.failOn && (s.failFor == 0 || s.commits < s.failOn+s.failFor) {
		return errors.New("disk full")
	}
	for _, t := range ts {
		if s.todo[t.Stage][t.Seq] != t.ID {
			continue
		}
		delete(s.todo[t.Stage], t.Seq)
		s.usage[t.ID] = s.usage[t.ID].Add(t.Usage)
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

// testStore is a Store the runner tests can look into.
type testStore interface {
	pipeline.Store
	// places counts items by place: "done", "<stage>/queued", "<stage>/dead".
	places(t testing.TB) map[string]int
	// deadLetters returns stage's dead letters by id.
	deadLetters(t testing.TB, stage string) map[string]pipeline.DeadLetter
}

// openTestStore returns an in-memory store ("memory"), the same with
// leases (a pipeline.Claimer: "claims"), or the real bbolt
// store in t.TempDir ("bbolt", checked for consistency on cleanup), with n
// items i0000... queued at the first stage.
func openTestStore(t testing.TB, backend string, stages []string, n int) testStore {
	t.Helper()
	switch backend {
	case "memory":
		return newMemStore(stages, n)
	case "claims":
		return newClaimStore(stages, n, time.Now).view("w1")
	}
	var defs []store.StageDef
	for _, s := range stages {
		defs = append(defs, store.StageDef{Name: s})
	}
	db, err := store.Open(filepath.Join(t.TempDir(), "runner.db"), store.Options{Stages: defs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if problems, err := db.Check(); err != nil || len(problems) > 0 {
			t.Errorf("check on cleanup: %v %v", err, problems)
		}
		db.Close()
	})
	var recs []pipeline.Record
	for i := range n {
		id := fmt.Sprintf("i%04d", i)
		recs = append(recs, pipeline.Record{ID: id, Text: "text " + id})
	}
	if _, err := db.Ingest(recs); err != nil {
		t.Fatal(err)
	}
	return boltStore{db}
}

type boltStore struct{ *store.DB }

func (b boltStore) places(t testing.TB) map[string]int {
	t.Helper()
	c, err := b.Counts()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	if c.Done > 0 {
		out["done"] = c.Done
	}
	for _, s := range c.Stages {
		if s.Queued > 0 {
			out[s.Stage+"/queued"] = s.Queued
		}
		if s.Dead > 0 {
			out[s.Stage+"/dead"] = s.Dead
		}
	}
	return out
}

func (b boltStore) deadLetters(t testing.TB, stage string) map[string]pipeline.DeadLetter {
	t.Helper()
	out := map[string]pipeline.DeadLetter{}
	if err := b.ForEachDead(stage, func(e store.DeadEntry) error { out[e.ID] = e.Dead; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func (s *memStore) places(testing.TB) map[string]int { return s.tally() }

func (s *memStore) deadLetters(_ testing.TB, stage string) map[string]pipeline.DeadLetter {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.dead[stage])
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

// every returns a backoff schedule of a constant step.
func every(d time.Duration) func() backoff.BackOff {
	return func() backoff.BackOff { return backoff.NewConstantBackOff(d) }
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

func (l *fakeLimiter) counts() (succeeded, limited, failed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.succeeded, l.limited, l.fail
}

// verdictError is a stage's mark of a verdict on the item (as
// stages.VerdictError): found by its ItemVerdict method.
type verdictError struct{ err error }

func (e *verdictError) Error() string     { return e.err.Error() }
func (e *verdictError) Unwrap() error     { return e.err }
func (e *verdictError) ItemVerdict() bool { return true }

var _ pipeline.ItemVerdict = (*verdictError)(nil)

// verdict marks err as a permanent verdict on the item.
func verdict(err error) error { return pipeline.Permanent(&verdictError{err}) }
