package store

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

var batchNow = time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)

// atClassify ingests ids and moves them to the classify queue.
func atClassify(t *testing.T, ids ...string) *DB {
	t.Helper()
	db := openTest(t)
	if _, err := db.Ingest(recs(ids...)); err != nil {
		t.Fatal(err)
	}
	advance(t, db, "sanitize", func(id string) json.RawMessage { return json.RawMessage(`{"text":"clean ` + id + `"}`) })
	return db
}

func reserve(t *testing.T, db *DB, max int) pipeline.BatchJob {
	t.Helper()
	job, ok, err := db.ReserveBatch("classify", max, batchNow)
	if err != nil || !ok {
		t.Fatalf("reserve: %v %v", ok, err)
	}
	return job
}

func queuedIDs(t *testing.T, db *DB, stage string) []string {
	t.Helper()
	qs, err := db.Queued(stage, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, q := range qs {
		ids = append(ids, q.Item.ID)
	}
	return ids
}

func result(id string, o pipeline.Outcome) pipeline.Transition {
	t := pipeline.Transition{Stage: "classify", ID: id, Outcome: o}
	if o == pipeline.Succeeded {
		t.Result = pipeline.Result{Output: fact("bug"), Usage: pipeline.Usage{TotalTokens: 10}}
	} else {
		t.Dead = pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: "blocked", Attempts: 1}
	}
	return t
}

func TestDB_ReserveBatch(t *testing.T) {
	db := atClassify(t, "a", "b", "c", "d", "e")
	first := reserve(t, db, 3)
	if !slices.Equal(first.Items, []string{"a", "b", "c"}) || first.Num != 1 || first.Name != "" {
		t.Fatalf("first job %+v", first)
	}
	if !strings.HasPrefix(first.DisplayName, "sawtooth-") || !strings.Contains(first.DisplayName, "-classify-1-") {
		t.Errorf("display name %q", first.DisplayName)
	}
	if got := queuedIDs(t, db, "classify"); !slices.Equal(got, []string{"d", "e"}) {
		t.Errorf("queue after reserving: %v: the job's items must leave it", got)
	}
	second := reserve(t, db, 10)
	if !slices.Equal(second.Items, []string{"d", "e"}) {
		t.Errorf("second job %v: no item in two jobs", second.Items)
	}
	if _, ok, err := db.ReserveBatch("classify", 10, batchNow); ok || err != nil {
		t.Errorf("empty queue: ok %v err %v", ok, err)
	}
	loc, err := db.Locate("a")
	if err != nil || loc.Status != "in batch" || loc.Stage != "classify" {
		t.Errorf("locate a: %+v %v", loc, err)
	}
	items, err := db.BatchItems(first.Num)
	if err != nil || len(items) != 3 || string(items[0].Prev) != `{"text":"clean a"}` {
		t.Fatalf("batch items %+v %v", items, err)
	}
	held, err := db.InBatchCount()
	if err != nil || held["classify"] != 5 {
		t.Errorf("in batch %v %v", held, err)
	}
	if _, _, err := db.ReserveBatch("nope", 1, batchNow); err == nil {
		t.Error("unknown stage: want an error")
	}
}

func TestDB_CommitBatch(t *testing.T) {
	cases := []struct {
		name        string
		before      func(t *testing.T, db *DB, job pipeline.BatchJob)
		results     []pipeline.Transition
		wantApplied int
		wantIgnored int
		wantQueued  []string // at aggregate
		wantDead    int
		check       func(t *testing.T, db *DB)
	}{
		{
			name:        "answers and a dead letter",
			results:     []pipeline.Transition{result("b", pipeline.Succeeded), result("a", pipeline.Succeeded), result("c", pipeline.DeadLettered)},
			wantApplied: 3, wantQueued: []string{"b", "a"}, wantDead: 1,
		},
		{
			name:        "a result twice is applied once",
			results:     []pipeline.Transition{result("a", pipeline.Succeeded), result("a", pipeline.Succeeded)},
			wantApplied: 1, wantIgnored: 1, wantQueued: []string{"a"},
		},
		{
			name:        "an item not in the job",
			results:     []pipeline.Transition{result("z", pipeline.Succeeded), {Stage: "sanitize", ID: "a", Outcome: pipeline.Succeeded}},
			wantApplied: 0, wantIgnored: 2,
		},
		{
			name: "an item returned and answered online meanwhile",
			before: func(t *testing.T, db *DB, job pipeline.BatchJob) {
				if n, err := db.ReturnBatch(job.Num, "deadline", batchNow); err != nil || n != 3 {
					t.Fatalf("return: %d %v", n, err)
				}
				advance(t, db, "classify", func(string) json.RawMessage { return fact("praise") })
			},
			results:     []pipeline.Transition{result("a", pipeline.Succeeded)},
			wantApplied: 0, wantIgnored: 1, wantQueued: []string{"a", "b", "c"},
		},
		{
			// A rerun while job 1 is open puts its items back in the queue,
			// and job 2 takes them: job 1's late results must not land on
			// an item job 2 now holds (it would be answered, and paid, by
			// one job and then claimed by the other).
			name: "an item a newer job holds after a rerun",
			before: func(t *testing.T, db *DB, job pipeline.BatchJob) {
				if n, err := db.Rerun("classify"); err != nil || n != 3 {
					t.Fatalf("rerun: %d %v", n, err)
				}
				if second := reserve(t, db, 3); second.Num == job.Num || !slices.Contains(second.Items, "a") {
					t.Fatalf("second job %+v: want a new job holding a", second)
				}
			},
			results:     []pipeline.Transition{result("a", pipeline.Succeeded)},
			wantApplied: 0, wantIgnored: 1,
			check: func(t *testing.T, db *DB) {
				loc, err := db.Locate("a")
				if err != nil || loc.Status != "in batch" || loc.Stage != "classify" {
					t.Errorf("locate a: %+v %v: want it still in batch at classify", loc, err)
				}
				if items, err := db.BatchItems(2); err != nil || len(items) != 3 {
					t.Errorf("job 2 holds %d items (%v), want 3", len(items), err)
				}
				if items, err := db.BatchItems(1); err != nil || len(items) != 0 {
					t.Errorf("job 1 still holds %d items (%v), want none", len(items), err)
				}
			},
		},
		{
			// A request answered with something the online path asks
			// again (cut off, off the schema) was billed: the ledger
			// counts it, and its item stays in the job to be returned.
			name: "a billed answer that goes back to the queue",
			results: []pipeline.Transition{{Stage: "classify", ID: "a", Outcome: pipeline.Billed,
				Usage: pipeline.Usage{PromptTokens: 100, CandidateTokens: 20}, CostUSD: 0.5}},
			wantApplied: 0,
			check: func(t *testing.T, db *DB) {
				if l, err := db.Ledgers(); err != nil || l["classify"].SpentUSD != 0.5 || l["classify"].Paid != 0 {
					t.Errorf("ledger %+v %v: want $0.5 spent, nothing paid for", l, err)
				}
				if j, err := db.BatchJobByNum(1); err != nil || j.Usage.PromptTokens != 100 || j.Answered != 0 {
					t.Errorf("job %+v %v: want its usage counted, nothing answered", j, err)
				}
				if n, err := db.ReturnBatch(1, "done", batchNow); err != nil || n != 3 {
					t.Errorf("returned %d %v, want all 3: the billed one is still held", n, err)
				}
			},
		},
		{
			name: "an item re-ingested with a new text",
			before: func(t *testing.T, db *DB, job pipeline.BatchJob) {
				if _, err := db.Ingest([]pipeline.Record{{ID: "a", Text: "edited"}}); err != nil {
					t.Fatal(err)
				}
			},
			results:     []pipeline.Transition{result("a", pipeline.Succeeded)},
			wantApplied: 0, wantIgnored: 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := atClassify(t, "a", "b", "c")
			job := reserve(t, db, 3)
			if tc.before != nil {
				tc.before(t, db, job)
			}
			applied, err := db.CommitBatch(job.Num, tc.results)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := db.BatchJobByNum(job.Num)
			if applied != tc.wantApplied || got.Ignored != tc.wantIgnored || got.Dead != tc.wantDead {
				t.Errorf("applied %d ignored %d dead %d, want %d %d %d", applied, got.Ignored, got.Dead, tc.wantApplied, tc.wantIgnored, tc.wantDead)
			}
			if q := queuedIDs(t, db, "aggregate"); !slices.Equal(q, tc.wantQueued) {
				t.Errorf("aggregate queue %v, want %v", q, tc.wantQueued)
			}
			if tc.check != nil {
				tc.check(t, db)
			}
		})
	}
}

func TestDB_ReturnBatch(t *testing.T) {
	db := atClassify(t, "a", "b", "c")
	job := reserve(t, db, 3)
	if _, err := db.SetBatchName(job.Num, "batches/x1", "JOB_STATE_PENDING", batchNow); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetBatchName(job.Num, "batches/x2", "JOB_STATE_PENDING", batchNow); err == nil {
		t.Error("a second API name for one intent: want an error")
	}
	if _, err := db.CommitBatch(job.Num, []pipeline.Transition{result("b", pipeline.Succeeded)}); err != nil {
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
	if got.Open() || got.Note != "expired" || got.Returned != 2 || got.Answered != 1 {
		t.Errorf("job %+v", got)
	}
	open, err := db.BatchJobs(true)
	if err != nil || len(open) != 0 {
		t.Errorf("open jobs %v %v", open, err)
	}
	if _, err := db.BatchJobByNum(99); err == nil {
		t.Error("unknown job: want ErrNotFound")
	}
}

// TestDB_BatchEndpoint: each intent records the endpoint set when it was
// reserved, so a later command asks the API that has the job.
func TestDB_BatchEndpoint(t *testing.T) {
	db := atClassify(t, "a", "b", "c")
	if j := reserve(t, db, 1); j.Endpoint != "" {
		t.Errorf("endpoint %q before any was set", j.Endpoint)
	}
	for _, url := range []string{"http://127.0.0.1:8080/", "https://generativelanguage.googleapis.com/"} {
		if err := db.SetBatchEndpoint(url); err != nil {
			t.Fatal(err)
		}
		j := reserve(t, db, 1)
		got, err := db.BatchJobByNum(j.Num)
		if err != nil || j.Endpoint != url || got.Endpoint != url {
			t.Errorf("job %d: endpoint %q, recorded %q (%v), want %q", j.Num, j.Endpoint, got.Endpoint, err, url)
		}
	}
}

func TestDB_MarkBatchCreate(t *testing.T) {
	db := atClassify(t, "a", "b")
	job := reserve(t, db, 1)
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
	closed := reserve(t, db, 1)
	if _, err := db.ReturnBatch(closed.Num, "deadline", sent); err != nil {
		t.Fatal(err)
	}
	if _, err := db.MarkBatchCreate(closed.Num, 0, sent); err == nil {
		t.Error("mark a closed job: want a refusal")
	}
	if _, err := db.MarkBatchCreate(99, 0, sent); err == nil {
		t.Error("mark an unknown job: want ErrNotFound")
	}
}
