package storetest

import (
	"maps"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// testBatchSends: each item counts the batch jobs created holding it at
// its stage, once per job however often its create is sent (a 429 makes
// no job) or its name recorded; the count
// goes with the item back to the queue and into the next job, and starts
// afresh once a result moved the item on (a dead letter requeued comes
// back with none).
func testBatchSends(t *testing.T, db BatchStore) {
	sends := func(num uint64) map[string]int {
		t.Helper()
		got, err := db.BatchSends(num)
		if err != nil {
			t.Fatalf("BatchSends(%d): %v", num, err)
		}
		return got
	}
	want := func(what string, got, want map[string]int) {
		t.Helper()
		if !maps.Equal(got, want) {
			t.Errorf("%s: sends %v, want %v", what, got, want)
		}
	}
	atClassify(t, db, "a", "b", "c")
	first := reserveBatch(t, db, 3)
	want("reserved, not sent", sends(first.Num), map[string]int{})
	for range 2 { // a 429 on the first create, and the create again
		if _, err := db.MarkBatchCreate(first.Num, 0, batchNow); err != nil {
			t.Fatal(err)
		}
	}
	want("creates sent, none answered", sends(first.Num), map[string]int{})
	for range 2 { // created, and the name recorded again (re-attached)
		if _, err := db.SetBatchName(first.Num, "batches/first", "JOB_STATE_PENDING", batchNow); err != nil {
			t.Fatal(err)
		}
	}
	want("one job created", sends(first.Num), map[string]int{"a": 1, "b": 1, "c": 1})
	if _, err := db.CommitBatch(first.Num, []pipeline.Transition{batchResult("a", pipeline.Succeeded)}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ReturnBatch(first.Num, "test", batchNow); err != nil {
		t.Fatal(err)
	}
	second := reserveBatch(t, db, 10)
	want("given back and reserved again", sends(second.Num), map[string]int{"b": 1, "c": 1})
	if _, err := db.SetBatchName(second.Num, "batches/second", "JOB_STATE_PENDING", batchNow); err != nil {
		t.Fatal(err)
	}
	want("a second job created", sends(second.Num), map[string]int{"b": 2, "c": 2})
	if _, err := db.CommitBatch(second.Num, []pipeline.Transition{batchResult("c", pipeline.DeadLettered)}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ReturnBatch(second.Num, "test", batchNow); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Requeue("classify", nil); err != nil {
		t.Fatal(err)
	}
	third := reserveBatch(t, db, 10)
	want("c requeued from its dead letter", sends(third.Num), map[string]int{"b": 2})
}
