package batch

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/sawtooth-dev/sawtooth/store"
)

// sharedStore is the bbolt store playing a store shared with one other
// worker: the jobs in theirs are the other worker's until their lease
// ends on the test clock, and the store refuses this worker's changes to
// them, as the PostgreSQL store does.
type sharedStore struct {
	*store.DB
	clock   *clock
	mu      sync.Mutex
	theirs  map[uint64]time.Time // job -> the other worker's lease end
	refused []string             // changes tried on the other worker's jobs
	takenAt map[uint64]time.Time
	// giveBack: the other worker closes its job at this time, its items
	// back in the queue, as when the job failed at the API.
	giveBack map[uint64]time.Time
}

var _ Leaser = (*sharedStore)(nil)

func (s *sharedStore) HoldBatches(stage string, lease time.Duration) ([]pipeline.BatchJob, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	open, err := s.DB.BatchJobs(true)
	if err != nil {
		return nil, 0, err
	}
	now := s.clock.Now()
	var held []pipeline.BatchJob
	others := 0
	for _, j := range open {
		if at, ok := s.giveBack[j.Num]; ok && !now.Before(at) {
			if _, err := s.DB.ReturnBatch(j.Num, "failed at the API", now); err != nil {
				return nil, 0, err
			}
			delete(s.theirs, j.Num)
			delete(s.giveBack, j.Num)
			continue
		}
		if end, ok := s.theirs[j.Num]; ok && now.Before(end) {
			others++
			continue
		}
		if _, ok := s.theirs[j.Num]; ok {
			delete(s.theirs, j.Num)
			s.takenAt[j.Num] = now
		}
		held = append(held, j)
	}
	return held, others, nil
}

func (s *sharedStore) check(what string, num uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if end, ok := s.theirs[num]; ok && s.clock.Now().Before(end) {
		s.refused = append(s.refused, fmt.Sprintf("%s of job %d", what, num))
		return fmt.Errorf("batch job %d: %w", num, pipeline.ErrBatchHeld)
	}
	return nil
}

func (s *sharedStore) MarkBatchCreate(num uint64, usd float64, now time.Time) (pipeline.BatchJob, error) {
	if err := s.check("create", num); err != nil {
		return pipeline.BatchJob{}, err
	}
	return s.DB.MarkBatchCreate(num, usd, now)
}

func (s *sharedStore) SetBatchName(num uint64, name, state string, now time.Time) (pipeline.BatchJob, error) {
	if err := s.check("name", num); err != nil {
		return pipeline.BatchJob{}, err
	}
	return s.DB.SetBatchName(num, name, state, now)
}

func (s *sharedStore) ReturnBatch(num uint64, note string, now time.Time) (int, error) {
	if err := s.check("return", num); err != nil {
		return 0, err
	}
	return s.DB.ReturnBatch(num, note, now)
}

// TestDriver_WaitsForAndTakesOverAnotherWorkersJob: a job another worker
// reserved (and died before creating) is left alone while that worker's
// lease lasts, the driver does not finish while it is open, and once the
// lease ended the driver takes it over, creates it once and collects it.
func TestDriver_WaitsForAndTakesOverAnotherWorkersJob(t *testing.T) {
	f := newFixture(t, 45, geminisim.BatchConfig{Pending: time.Minute, Running: time.Minute})
	s := &sharedStore{DB: f.db, clock: f.clock, theirs: map[uint64]time.Time{}, takenAt: map[uint64]time.Time{}}
	theirs, ok, err := f.db.ReserveBatch("classify", 20, f.clock.Now())
	if err != nil || !ok {
		t.Fatalf("the other worker's reservation: %v %v", ok, err)
	}
	until := f.clock.Now().Add(time.Hour)
	s.theirs[theirs.Num] = until

	sum, err := f.driver(s, Config{Size: 20, Lease: time.Minute}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.refused) > 0 {
		t.Errorf("the driver tried to change the other worker's job while its lease lasted: %v", s.refused)
	}
	if at, ok := s.takenAt[theirs.Num]; !ok || at.Before(until) {
		t.Errorf("the other worker's job taken at %v (%v), want once its lease ended at %v", at, ok, until)
	}
	if sum.Created != 3 || sum.Succeeded != 3 || sum.Answered != 45 {
		t.Errorf("summary %+v: want its 2 jobs and the one taken over created and collected", sum)
	}
	if done, _, queued := f.state(t); done != 45 || queued != 0 {
		t.Errorf("done %d, queued %d: want all 45 done", done, queued)
	}
	f.answeredOnce(t)
}

// TestDriver_SendsWhatAnotherWorkersJobGaveBack: in mode batch, the items
// of another worker's job that failed come back to the queue while this
// driver waits for that job; they go into this driver's next round (the
// other worker may be gone), and the run ends with every item answered,
// not with them left queued as if no round were left.
func TestDriver_SendsWhatAnotherWorkersJobGaveBack(t *testing.T) {
	f := newFixture(t, 45, geminisim.BatchConfig{Pending: time.Minute, Running: time.Minute})
	s := &sharedStore{DB: f.db, clock: f.clock, theirs: map[uint64]time.Time{}, takenAt: map[uint64]time.Time{},
		giveBack: map[uint64]time.Time{}}
	theirs, ok, err := f.db.ReserveBatch("classify", 20, f.clock.Now())
	if err != nil || !ok {
		t.Fatalf("the other worker's reservation: %v %v", ok, err)
	}
	s.theirs[theirs.Num] = f.clock.Now().Add(time.Hour)
	s.giveBack[theirs.Num] = f.clock.Now().Add(10 * time.Minute)

	sum, err := f.driver(s, Config{Mode: ModeBatch, Size: 20, Lease: time.Minute}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.refused) > 0 || len(s.takenAt) > 0 {
		t.Errorf("the driver touched the other worker's job: refused %v, taken %v", s.refused, s.takenAt)
	}
	if sum.Answered != 45 || sum.Created != 3 {
		t.Errorf("summary %+v: want its 2 jobs and one of the 20 items given back, 45 answered", sum)
	}
	if done, _, queued := f.state(t); done != 45 || queued != 0 {
		t.Errorf("done %d, queued %d: want all 45 done", done, queued)
	}
	f.answeredOnce(t)
}

// onlineHeldStore is sharedStore whose queued items are all held by
// other workers online: the queue counts them, ReserveBatch finds none.
type onlineHeldStore struct {
	*sharedStore
	reserves int
}

func (s *onlineHeldStore) ReserveBatch(string, int, time.Time) (pipeline.BatchJob, bool, error) {
	s.reserves++
	return pipeline.BatchJob{}, false, nil
}

// TestDriver_EndsWhenNothingQueuedCanBeReserved: in a fleet where
// online workers hold every queued item, a batch driver's round finds
// nothing to reserve and no job to wait for: it ends there, instead of
// spending every round at once on the same empty answer.
func TestDriver_EndsWhenNothingQueuedCanBeReserved(t *testing.T) {
	f := newFixture(t, 10, geminisim.BatchConfig{})
	s := &onlineHeldStore{sharedStore: &sharedStore{DB: f.db, clock: f.clock, theirs: map[uint64]time.Time{}, takenAt: map[uint64]time.Time{},
		giveBack: map[uint64]time.Time{}}}
	sum, err := f.driver(s, Config{Mode: ModeBatch, Size: 5, Lease: time.Minute, MaxRounds: 50}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.reserves > 1 || sum.Created != 0 {
		t.Errorf("%d reservations tried, %d jobs created: want one try, no job", s.reserves, sum.Created)
	}
}
