package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// OpenPair returns two handles on one new, empty database defined by
// Stages, as two workers (two owners) would open it.
type OpenPair func(t testing.TB) (a, b pipeline.Database)

// ended is a lease that has ended by the next statement: the suite never
// waits for a lease to end.
const ended = time.Microsecond

// RunBatchWorkers runs the contract of a batch store shared by workers
// (a BatchLeaser): concurrent reservations never share an item, one
// worker drives a job at a time, a job whose driver's lease ended is
// taken over with what was recorded, and the worker that lost it can
// neither send create nor record anything for it.
func RunBatchWorkers(t *testing.T, open OpenPair) {
	t.Run("ReserveConcurrently", func(t *testing.T) { testReserveConcurrently(t, open) })
	t.Run("OneDriverAtATime", func(t *testing.T) { testOneDriverAtATime(t, open) })
	t.Run("MarkNeedsALiveLease", func(t *testing.T) { testMarkNeedsALiveLease(t, open) })
}

// testReserveConcurrently: two workers reserving at once never share an item.
func testReserveConcurrently(t *testing.T, open OpenPair) {
	a, b := leasers(t, open)
	var ids []string
	for i := range 40 {
		ids = append(ids, fmt.Sprintf("i%02d", i))
	}
	atClassify(t, a, ids...)
	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	for _, db := range []BatchStore{a, b} {
		wg.Go(func() {
			for {
				job, ok, err := db.ReserveBatch("classify", 3, batchNow)
				if err != nil || !ok {
					if err != nil {
						t.Error(err)
					}
					return
				}
				mu.Lock()
				got = append(got, job.Items...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(got)
	if !slices.Equal(got, ids) {
		t.Errorf("two workers reserved %v, want each of the %d items once", got, len(ids))
	}
	Invariants(t, a)
}

// testOneDriverAtATime: one worker drives a job at a time: a live lease
// keeps it, a lapsed one hands it over with the create recorded, and the
// worker that lost it records nothing more.
func testOneDriverAtATime(t *testing.T, open OpenPair) {
	a, b := leasers(t, open)
	atClassify(t, a, "a", "b", "c")
	hold(t, a, time.Hour, 0, 0)
	job := reserveBatch(t, a, 3)
	hold(t, b, time.Hour, 0, 1) // a live lease: left to a
	if _, err := b.MarkBatchCreate(job.Num, 0, batchNow); !errors.Is(err, pipeline.ErrBatchHeld) {
		t.Errorf("b marks a's job: %v, want ErrBatchHeld", err)
	}
	if _, err := b.ReturnBatch(job.Num, "b's deadline", batchNow); !errors.Is(err, pipeline.ErrBatchHeld) {
		t.Errorf("b returns a's job: %v, want ErrBatchHeld", err)
	}
	if _, err := a.MarkBatchCreate(job.Num, 0, batchNow); err != nil {
		t.Fatalf("a marks its job: %v", err)
	}
	// a stalls past its lease: b takes the job with the create a sent.
	hold(t, a, ended, 1, 0)
	taken := hold(t, b, time.Hour, 1, 0)
	if taken[0].Num != job.Num || taken[0].CreateSent.IsZero() {
		t.Fatalf("b took %+v: want a's job with its create recorded", taken[0])
	}
	hold(t, a, time.Hour, 0, 1)
	for name, write := range map[string]func() error{
		"mark": func() error { _, err := a.MarkBatchCreate(job.Num, 0, batchNow); return err },
		"name": func() error {
			_, err := a.SetBatchName(job.Num, "batches/a", "JOB_STATE_PENDING", batchNow)
			return err
		},
		"update": func() error {
			_, err := a.UpdateBatch(job.Num, "JOB_STATE_RUNNING", pipeline.BatchCounts{}, "", batchNow)
			return err
		},
		"return": func() error { _, err := a.ReturnBatch(job.Num, "a's deadline", batchNow); return err },
	} {
		if err := write(); !errors.Is(err, pipeline.ErrBatchHeld) {
			t.Errorf("%s by the worker that lost the job: %v, want ErrBatchHeld", name, err)
		}
	}
	if _, err := b.SetBatchName(job.Num, "batches/b", "JOB_STATE_PENDING", batchNow); err != nil {
		t.Fatalf("b records the job it re-attached: %v", err)
	}
	items, err := b.BatchItems(job.Num)
	if err != nil || len(items) != 3 {
		t.Fatalf("items %d %v", len(items), err)
	}
	var ts []pipeline.Transition
	for _, it := range items {
		ts = append(ts, batchResult(it.ID, pipeline.Succeeded))
	}
	if n, err := b.CommitBatch(job.Num, ts); err != nil || n != 3 {
		t.Fatalf("b commits: %d %v", n, err)
	}
	if n, err := b.ReturnBatch(job.Num, "done", batchNow); err != nil || n != 0 {
		t.Fatalf("b closes: %d %v", n, err)
	}
	hold(t, a, time.Hour, 0, 0)
	if q := queuedIDs(t, a, "aggregate"); !slices.Equal(q, []string{"a", "b", "c"}) {
		t.Errorf("aggregate queue %v", q)
	}
	Invariants(t, a)
}

// testMarkNeedsALiveLease: create is marked only under the live lease of
// the job's driver.
func testMarkNeedsALiveLease(t *testing.T, open OpenPair) {
	a, b := leasers(t, open)
	atClassify(t, a, "a")
	hold(t, a, ended, 0, 0)
	job := reserveBatch(t, a, 1) // under a lease that has ended
	if _, err := a.MarkBatchCreate(job.Num, 0, batchNow); !errors.Is(err, pipeline.ErrBatchHeld) {
		t.Errorf("mark under an ended lease: %v, want ErrBatchHeld", err)
	}
	if _, err := b.MarkBatchCreate(job.Num, 0, batchNow); !errors.Is(err, pipeline.ErrBatchHeld) {
		t.Errorf("mark by a worker that never held the job: %v, want ErrBatchHeld", err)
	}
	hold(t, b, time.Hour, 1, 0)
	if got, err := b.MarkBatchCreate(job.Num, 0, batchNow); err != nil || got.CreateSent.IsZero() {
		t.Errorf("mark by the job's driver: %+v %v", got, err)
	}
}

func leasers(t testing.TB, open OpenPair) (BatchStore, BatchStore) {
	t.Helper()
	x, y := open(t)
	a, b := batchStore(t, x), batchStore(t, y)
	if _, ok := a.(BatchLeaser); !ok {
		t.Fatalf("%T keeps batch jobs for one worker only", x)
	}
	return a, b
}

// hold holds db's jobs of classify for lease and checks how many it holds
// and how many others hold.
func hold(t testing.TB, db BatchStore, lease time.Duration, wantHeld, wantOthers int) []pipeline.BatchJob {
	t.Helper()
	held, others, err := db.(BatchLeaser).HoldBatches("classify", lease)
	if err != nil || len(held) != wantHeld || others != wantOthers {
		t.Fatalf("HoldBatches: %d held, %d others, %v; want %d, %d", len(held), others, err, wantHeld, wantOthers)
	}
	return held
}
