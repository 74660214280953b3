package storetest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// BatchStore is a pipeline.Database that keeps batch jobs: the methods
// the batch driver (batch.Store) and the commands use, named here so the
// suite does not depend on the driver.
type BatchStore interface {
	pipeline.Database
	ReserveBatch(stage string, max int, now time.Time) (pipeline.BatchJob, bool, error)
	MarkBatchCreate(num uint64, reservedUSD float64, now time.Time) (pipeline.BatchJob, error)
	SetBatchName(num uint64, name, state string, now time.Time) (pipeline.BatchJob, error)
	UpdateBatch(num uint64, state string, counts pipeline.BatchCounts, apiErr string, now time.Time) (pipeline.BatchJob, error)
	CommitBatch(num uint64, ts []pipeline.Transition) (int, error)
	ReturnBatch(num uint64, note string, now time.Time) (int, error)
	BatchJobs(openOnly bool) ([]pipeline.BatchJob, error)
	BatchJobByNum(num uint64) (pipeline.BatchJob, error)
	BatchItems(num uint64) ([]pipeline.Item, error)
	InBatchCount() (map[string]int, error)
	SetBatchEndpoint(url string) error
	BatchSends(num uint64) (map[string]int, error)
	Ledgers() (map[string]pipeline.Ledger, error)
}

// BatchLeaser is a BatchStore shared by workers: one drives a job at a
// time (see the PostgreSQL store's HoldBatches).
type BatchLeaser interface {
	HoldBatches(stage string, lease time.Duration) (held []pipeline.BatchJob, others int, err error)
}

var batchNow = time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)

// RunBatch runs the batch-job contract against databases from open, one
// per subtest: reserving moves items out of the queue into one job
// only, results of held items commit once and go where online results
// go, anything else is ignored and counted, returning puts the unanswered
// back, and create is recorded before it is sent.
func RunBatch(t *testing.T, open Open) {
	tests := []struct {
		name string
		fn   func(t *testing.T, db BatchStore)
	}{
		{"Reserve", testReserveBatch},
		{"Commit", nil},
		{"Return", testReturnBatch},
		{"MarkCreate", testMarkBatchCreate},
		{"ResultsCommitted", testBatchResultsCommitted},
		{"Endpoint", testBatchEndpoint},
		{"Sends", testBatchSends},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fn == nil {
				testCommitBatch(t, open)
				return
			}
			db := batchStore(t, open(t))
			tc.fn(t, db)
			Invariants(t, db)
		})
	}
}

func batchStore(t testing.TB, db pipeline.Database) BatchStore {
	t.Helper()
	b, ok := db.(BatchStore)
	if !ok {
		t.Fatalf("%T does not keep batch jobs", db)
	}
	return b
}

// atClassify ingests ids and moves them to the classify queue.
func atClassify(t testing.TB, db BatchStore, ids ...string) {
	t.Helper()
	for _, id := range ids {
		ingest(t, db, Record(id, "bug "+id, "x", "4"))
	}
	Advance(t, db, "sanitize")
}

func reserveBatch(t testing.TB, db BatchStore, max int) pipeline.BatchJob {
	t.Helper()
	job, ok, err := db.ReserveBatch("classify", max, batchNow)
	if err != nil || !ok {
		t.Fatalf("ReserveBatch: %v %v", ok, err)
	}
	return job
}

func queuedIDs(t testing.TB, db pipeline.Database, stage string) []string {
	t.Helper()
	var ids []string
	for _, q := range queued(t, db, stage) {
		ids = append(ids, q.Item.ID)
	}
	return ids
}

// batchResult is a result of job item id: its answer, or a dead letter.
func batchResult(id string, o pipeline.Outcome) pipeline.Transition {
	t := pipeline.Transition{Stage: "classify", ID: id, Outcome: o}
	if o == pipeline.Succeeded {
		t.Result = pipeline.Result{Output: Output("classify", pipeline.Item{Record: Record(id, "bug "+id, "x", "4")}), Usage: pipeline.Usage{TotalTokens: 10}}
	} else {
		t.Dead = pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: "blocked", Attempts: 1, First: batchNow, Last: batchNow}
	}
	return t
}

func testReserveBatch(t *testing.T, db BatchStore) {
	atClassify(t, db, "a", "b", "c", "d", "e")
	first := reserveBatch(t, db, 3)
	if !slices.Equal(first.Items, []string{"a", "b", "c"}) || first.Name != "" || !first.Open() || !first.CreateTracked {
		t.Fatalf("first job %+v", first)
	}
	if !strings.HasPrefix(first.DisplayName, "sawtooth-") || !strings.Contains(first.DisplayName, "-classify-") {
		t.Errorf("display name %q", first.DisplayName)
	}
	if got := queuedIDs(t, db, "classify"); !slices.Equal(got, []string{"d", "e"}) {
		t.Errorf("queue after reserving: %v: the job's items must leave it", got)
	}
	second := reserveBatch(t, db, 10)
	if !slices.Equal(second.Items, []string{"d", "e"}) || second.Num <= first.Num || second.DisplayName == first.DisplayName {
		t.Errorf("second job %+v: no item in two jobs, a new number and name", second)
	}
	if _, ok, err := db.ReserveBatch("classify", 10, batchNow); ok || err != nil {
		t.Errorf("empty queue: ok %v err %v", ok, err)
	}
	if loc := locate(t, db, "a"); loc.Status != "in batch" || loc.Stage != "classify" {
		t.Errorf("locate a: %+v", loc)
	}
	items, err := db.BatchItems(first.Num)
	if err != nil || len(items) != 3 || items[0].ID != "a" || string(items[0].Prev) != string(Output("sanitize", pipeline.Item{Record: Record("a", "bug a", "x", "4")})) {
		t.Fatalf("batch items %+v %v", items, err)
	}
	if held, err := db.InBatchCount(); err != nil || held["classify"] != 5 {
		t.Errorf("in batch %v %v", held, err)
	}
	if c, err := db.Counts(); err != nil || c.Stages[1].Queued != 0 || c.Done != 0 {
		t.Errorf("counts %+v %v: held items are neither queued nor done", c, err)
	}
	if _, _, err := db.ReserveBatch("nope", 1, batchNow); err == nil {
		t.Error("unknown stage: want an error")
	}
	if _, _, err := db.ReserveBatch("classify", 0, batchNow); err == nil {
		t.Error("size 0: want an error")
	}
	if cl, ok := db.(pipeline.Claimer); ok {
		// Online workers never claim what a job holds.
		ingest(t, db, Record("f", "bug f", "x", "4"))
		Advance(t, db, "sanitize")
		cs, err := cl.Claim(t.Context(), "classify", 10, time.Hour)
		if err != nil || len(cs) != 1 || cs[0].Item.ID != "f" {
			t.Errorf("claim beside held items: %+v %v, want f alone", cs, err)
		}
		if err := cl.Release(t.Context(), "classify", cs); err != nil {
			t.Fatal(err)
		}
	}
}

// testCommitBatch: CommitBatch applies each result once to an item the
// job still holds, and counts the rest as ignored. It is one table, kept whole past the
// usual length: each case reads as what happened before the commit, the
// results and what must follow.
func testCommitBatch(t *testing.T, open Open) {
	cases := []struct {
		name        string
		before      func(t *testing.T, db BatchStore, job pipeline.BatchJob)
		results     []pipeline.Transition
		wantApplied int
		wantIgnored int
		wantQueued  []string // at aggregate
		wantDead    int
		check       func(t *testing.T, db BatchStore, job pipeline.BatchJob)
	}{
		{
			name:        "answers and a dead letter",
			results:     []pipeline.Transition{batchResult("b", pipeline.Succeeded), batchResult("a", pipeline.Succeeded), batchResult("c", pipeline.DeadLettered)},
			wantApplied: 3, wantQueued: []string{"b", "a"}, wantDead: 1,
			check: func(t *testing.T, db BatchStore, job pipeline.BatchJob) {
				if j, err := db.BatchJobByNum(job.Num); err != nil || j.Answered != 2 || j.Usage.TotalTokens != 20 {
					t.Errorf("job %+v %v: want 2 answered, 20 tokens", j, err)
				}
				if items, err := db.BatchItems(job.Num); err != nil || len(items) != 0 {
					t.Errorf("job still holds %d items (%v)", len(items), err)
				}
			},
		},
		{
			name:        "a result twice is applied once",
			results:     []pipeline.Transition{batchResult("a", pipeline.Succeeded), batchResult("a", pipeline.Succeeded)},
			wantApplied: 1, wantIgnored: 1, wantQueued: []string{"a"},
		},
		{
			name:        "an item not in the job",
			results:     []pipeline.Transition{batchResult("z", pipeline.Succeeded), {Stage: "sanitize", ID: "a", Outcome: pipeline.Succeeded}},
			wantApplied: 0, wantIgnored: 2,
		},
		{
			name: "an item returned and answered online meanwhile",
			before: func(t *testing.T, db BatchStore, job pipeline.BatchJob) {
				if n, err := db.ReturnBatch(job.Num, "deadline", batchNow); err != nil || n != 3 {
					t.Fatalf("return: %d %v", n, err)
				}
				Advance(t, db, "classify")
			},
			results:     []pipeline.Transition{batchResult("a", pipeline.Succeeded)},
			wantApplied: 0, wantIgnored: 1, wantQueued: []string{"a", "b", "c"},
		},
		{
			// A rerun while job 1 is open frees its items and job 2 takes
			// them: job 1's late results must not land on them.
			name: "an item a newer job holds after a rerun",
			before: func(t *testing.T, db BatchStore, job pipeline.BatchJob) {
				if n, err := db.Rerun("classify"); err != nil || n != 3 {
					t.Fatalf("rerun: %d %v", n, err)
				}
				if second := reserveBatch(t, db, 3); second.Num == job.Num || !slices.Contains(second.Items, "a") {
					t.Fatalf("second job %+v: want a new job holding a", second)
				}
			},
			results:     []pipeline.Transition{batchResult("a", pipeline.Succeeded)},
			wantApplied: 0, wantIgnored: 1,
			check: func(t *testing.T, db BatchStore, job pipeline.BatchJob) {
				if loc := locate(t, db, "a"); loc.Status != "in batch" || loc.Stage != "classify" {
					t.Errorf("locate a: %+v: want it still in batch at classify", loc)
				}
				if items, err := db.BatchItems(job.Num); err != nil || len(items) != 0 {
					t.Errorf("job 1 still holds %d items (%v), want none", len(items), err)
				}
			},
		},
		{
			name: "a billed answer that goes back to the queue",
			results: []pipeline.Transition{{Stage: "classify", ID: "a", Outcome: pipeline.Billed,
				Usage: pipeline.Usage{PromptTokens: 100, CandidateTokens: 20}, CostUSD: 0.5}},
			check: func(t *testing.T, db BatchStore, job pipeline.BatchJob) {
				if l, err := db.Ledgers(); err != nil || l["classify"].SpentUSD != 0.5 || l["classify"].Paid != 0 {
					t.Errorf("ledger %+v %v: want $0.5 spent, nothing paid for", l, err)
				}
				if j, err := db.BatchJobByNum(job.Num); err != nil || j.Usage.PromptTokens != 100 || j.Answered != 0 {
					t.Errorf("job %+v %v: want its usage counted, nothing answered", j, err)
				}
				if n, err := db.ReturnBatch(job.Num, "done", batchNow); err != nil || n != 3 {
					t.Errorf("returned %d %v, want all 3: the billed one is still held", n, err)
				}
			},
		},
		{
			name: "an item re-ingested with a new text",
			before: func(t *testing.T, db BatchStore, job pipeline.BatchJob) {
				ingest(t, db, Record("a", "edited a", "x", "4"))
			},
			results:     []pipeline.Transition{batchResult("a", pipeline.Succeeded)},
			wantApplied: 0, wantIgnored: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := batchStore(t, open(t))
			atClassify(t, db, "a", "b", "c")
			job := reserveBatch(t, db, 3)
			if tc.before != nil {
				tc.before(t, db, job)
			}
			applied, err := db.CommitBatch(job.Num, tc.results)
			if err != nil {
				t.Fatal(err)
			}
			got, err := db.BatchJobByNum(job.Num)
			if err != nil {
				t.Fatal(err)
			}
			if applied != tc.wantApplied || got.Ignored != tc.wantIgnored || got.Dead != tc.wantDead {
				t.Errorf("applied %d ignored %d dead %d, want %d %d %d", applied, got.Ignored, got.Dead, tc.wantApplied, tc.wantIgnored, tc.wantDead)
			}
			if q := queuedIDs(t, db, "aggregate"); !slices.Equal(q, tc.wantQueued) {
				t.Errorf("aggregate queue %v, want %v", q, tc.wantQueued)
			}
			if tc.check != nil {
				tc.check(t, db, job)
			}
			Invariants(t, db)
		})
	}
}

func testReturnBatch(t *testing.T, db BatchStore) {
	atClassify(t, db, "a", "b", "c")
	job := reserveBatch(t, db, 3)
	if _, err := db.SetBatchName(job.Num, "batches/x1", "JOB_STATE_PENDING", batchNow); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetBatchName(job.Num, "batches/x2", "JOB_STATE_PENDING", batchNow); err == nil {
		t.Error("a second API name for one intent: want an error")
	}
	counts := pipeline.BatchCounts{Requests: 3, Succeeded: 1, Pending: 2}
	if j, err := db.UpdateBatch(job.Num, "JOB_STATE_RUNNING", counts, "", batchNow); err != nil || j.State != "JOB_STATE_RUNNING" || j.Counts != counts {
		t.Errorf("update: %+v %v", j, err)
	}
	if _, err := db.CommitBatch(job.Num, []pipeline.Transition{batchResult("b", pipeline.Succeeded)}); err != nil {
		t.Fatal(err)
	}
	n, err := db.ReturnBatch(job.Num, "expired", batchNow)
	if err != nil || n != 2 {
		t.Fatalf("returned %d %v, want the 2 unanswered", n, err)
	}
	if q := queuedIDs(t, db, "classify"); !slices.Equal(q, []string{"a", "c"}) {
		t.Errorf("classify queue %v", q)
	}
	if n, err := db.ReturnBatch(job.Num, "again", batchNow); err != nil || n != 0 {
		t.Errorf("return twice: %d %v", n, err)
	}
	got, _ := db.BatchJobByNum(job.Num)
	if got.Open() || got.Note != "expired" || got.Returned != 2 || got.Answered != 1 || got.Name != "batches/x1" {
		t.Errorf("job %+v", got)
	}
	if open, err := db.BatchJobs(true); err != nil || len(open) != 0 {
		t.Errorf("open jobs %v %v", open, err)
	}
	if all, err := db.BatchJobs(false); err != nil || len(all) != 1 {
		t.Errorf("all jobs %v %v", all, err)
	}
	if _, err := db.BatchJobByNum(job.Num + 99); !errors.Is(err, pipeline.ErrNotFound) {
		t.Errorf("unknown job: %v, want ErrNotFound", err)
	}
	if held, err := db.InBatchCount(); err != nil || held["classify"] != 0 {
		t.Errorf("in batch %v %v", held, err)
	}
}

func testMarkBatchCreate(t *testing.T, db BatchStore) {
	atClassify(t, db, "a", "b")
	job := reserveBatch(t, db, 1)
	if !job.CreateSent.IsZero() {
		t.Fatalf("a new intent has a create sent: %+v", job)
	}
	sent := batchNow.Add(time.Minute)
	got, err := db.MarkBatchCreate(job.Num, 0.25, sent)
	if err != nil || !got.CreateSent.Equal(sent) || got.Name != "" || got.ReservedUSD != 0.25 {
		t.Fatalf("mark: %+v %v", got, err)
	}
	if again, err := db.BatchJobByNum(job.Num); err != nil || !again.CreateSent.Equal(sent) || again.ReservedUSD != 0.25 {
		t.Errorf("read back: %+v %v", again, err)
	}
	if _, err := db.SetBatchName(job.Num, "batches/x1", "JOB_STATE_PENDING", sent); err != nil {
		t.Fatal(err)
	}
	if _, err := db.MarkBatchCreate(job.Num, 0, sent); err == nil || !strings.Contains(err.Error(), "batches/x1") {
		t.Errorf("mark a created job: %v, want a refusal naming it", err)
	}
	closed := reserveBatch(t, db, 1)
	if _, err := db.ReturnBatch(closed.Num, "deadline", sent); err != nil {
		t.Fatal(err)
	}
	if _, err := db.MarkBatchCreate(closed.Num, 0, sent); err == nil {
		t.Error("mark a closed job: want a refusal")
	}
	if _, err := db.MarkBatchCreate(closed.Num+99, 0, sent); !errors.Is(err, pipeline.ErrNotFound) {
		t.Errorf("mark an unknown job: %v, want ErrNotFound", err)
	}
}

// testBatchEndpoint: each intent records the endpoint set when it was
// reserved, so a later command asks the API that has the job.
func testBatchEndpoint(t *testing.T, db BatchStore) {
	atClassify(t, db, "a", "b", "c")
	if j := reserveBatch(t, db, 1); j.Endpoint != "" {
		t.Errorf("endpoint %q before any was set", j.Endpoint)
	}
	for _, url := range []string{"http://127.0.0.1:8080/", "https://generativelanguage.googleapis.com/"} {
		if err := db.SetBatchEndpoint(url); err != nil {
			t.Fatal(err)
		}
		j := reserveBatch(t, db, 1)
		got, err := db.BatchJobByNum(j.Num)
		if err != nil || j.Endpoint != url || got.Endpoint != url {
			t.Errorf("job %d: endpoint %q, recorded %q (%v), want %q", j.Num, j.Endpoint, got.Endpoint, err, url)
		}
	}
}

// heldItems puts every item an open batch job holds, for Invariants.
func heldItems(t testing.TB, db pipeline.Database, put func(id, where string)) int {
	t.Helper()
	b, ok := db.(BatchStore)
	if !ok {
		return 0
	}
	jobs, err := b.BatchJobs(true)
	if err != nil {
		t.Fatalf("BatchJobs: %v", err)
	}
	n := 0
	for _, j := range jobs {
		items, err := b.BatchItems(j.Num)
		if err != nil {
			t.Fatalf("BatchItems(%d): %v", j.Num, err)
		}
		for _, it := range items {
			put(it.ID, "in batch at "+j.Stage)
		}
		n += len(items)
	}
	return n
}

// testBatchResultsCommitted: what create commits without a request (a
// dead letter, an answer from the cache, one a condition skips) counts
// in the job's answers and dead letters but does not mark its results
// committed; the first commit once the API named the job does, and the
// mark stays through later commits and the close.
func testBatchResultsCommitted(t *testing.T, db BatchStore) {
	atClassify(t, db, "a", "b", "c", "d")
	job := reserveBatch(t, db, 4)
	if job.ResultsCommitted {
		t.Fatalf("a new job %+v: nothing committed yet", job)
	}
	ts := []pipeline.Transition{batchResult("a", pipeline.DeadLettered), batchResult("b", pipeline.Succeeded)}
	if _, err := db.CommitBatch(job.Num, ts); err != nil {
		t.Fatal(err)
	}
	if _, err := db.MarkBatchCreate(job.Num, 0, batchNow); err != nil {
		t.Fatal(err)
	}
	got, err := db.BatchJobByNum(job.Num)
	if err != nil || got.ResultsCommitted || got.Answered != 1 || got.Dead != 1 {
		t.Fatalf("after the create-time commit: %+v %v, want 1 answer and 1 dead letter, results not committed", got, err)
	}
	if _, err := db.SetBatchName(job.Num, "batches/r1", "JOB_STATE_PENDING", batchNow); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.BatchJobByNum(job.Num); got.ResultsCommitted {
		t.Errorf("named, nothing committed since: %+v", got)
	}
	billed := pipeline.Transition{Stage: "classify", ID: "c", Outcome: pipeline.Billed, Usage: pipeline.Usage{TotalTokens: 7}}
	if _, err := db.CommitBatch(job.Num, []pipeline.Transition{billed, batchResult("d", pipeline.Succeeded)}); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.BatchJobByNum(job.Num); !got.ResultsCommitted || got.Answered != 2 {
		t.Errorf("after the results commit: %+v, want results committed and 2 answers", got)
	}
	if _, err := db.ReturnBatch(job.Num, "succeeded", batchNow); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.BatchJobByNum(job.Num); !got.ResultsCommitted || got.Open() {
		t.Errorf("closed: %+v, want the mark kept", got)
	}
}
