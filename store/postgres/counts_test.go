package postgres

import (
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// TestDB_CountsReusedWithinOneSnapshot: the cube read right after the
// counts, with nothing committed between, takes the counts already read
// (marked here so that a recount would show); once an item moves, the
// counts are read again, and right.
func TestDB_CountsReusedWithinOneSnapshot(t *testing.T) {
	db, _ := openNew(t, Options{})
	cubeItems(t, db)
	first, err := db.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if first.Items != 31 || first.Done != 29 || first.Stages[1].Dead != 1 || first.Stages[0].Queued != 1 || first.Stages[1].Output != 29 {
		t.Fatalf("Counts = %+v; want 31 items, 29 done, 1 dead at classify, 1 queued, 29 classify outputs", first)
	}
	marked := first
	marked.Stages = append([]pipeline.StageCounts(nil), first.Stages...)
	marked.Items = 1000
	db.counted.put(db.counted.snapshot, marked)
	c, ok, err := db.StoredCube()
	if err != nil || !ok || c.Counts.Items != 1000 {
		t.Fatalf("StoredCube in the same state: counts %+v, ok %v, %v; want the counts read before", c.Counts, ok, err)
	}

	storetest.Advance(t, db, "sanitize")
	c, ok, err = db.StoredCube()
	if err != nil || !ok || c.Counts.Items != 31 || c.Counts.Stages[0].Queued != 0 || c.Counts.Stages[1].Queued != 1 || c.Counts.Done != 29 {
		t.Fatalf("StoredCube after a commit: counts %+v, ok %v, %v; want 31 items, q queued at classify", c.Counts, ok, err)
	}
}
