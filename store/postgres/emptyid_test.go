package postgres

import (
	"context"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// emptyIDItems ingests an item whose id is the empty string (a store
// takes it) beside two others, and takes them through every stage, the
// empty id dead at classify when dead is set.
func emptyIDItems(t *testing.T, db *DB, dead bool) {
	t.Helper()
	recs := []pipeline.Record{storetest.Record("", "bug an item without a name", "x", "1"),
		storetest.Record("a", "bug a", "x", "2"), storetest.Record("b", "ux b", "y", "3")}
	if _, err := db.Ingest(recs); err != nil {
		t.Fatal(err)
	}
	storetest.Advance(t, db, "sanitize")
	if dead {
		storetest.Advance(t, db, "classify", "")
	}
	storetest.Finish(t, db)
}

// TestDB_TheEmptyIDIsWalkedLikeAnother: every walk of the items in id
// order begins at the least id, the empty string, not after it: the
// dead letters of a stage, a re-run, a prune, and the migrations that
// build the cube (step 8's backfill) and store the records binary (step
// 13) read or change the item "" like any other. Each skipped it when
// its first page began after "".
func TestDB_TheEmptyIDIsWalkedLikeAnother(t *testing.T) {
	t.Run("dead letters", func(t *testing.T) {
		db, _ := openNew(t, Options{})
		emptyIDItems(t, db, true)
		var ids []string
		if err := db.ForEachDead("classify", func(e pipeline.DeadEntry) error {
			ids = append(ids, e.ID)
			return nil
		}); err != nil || len(ids) != 1 || ids[0] != "" {
			t.Fatalf("ForEachDead(classify): %q, %v; want the item \"\"", ids, err)
		}
		storetest.Invariants(t, db)
	})
	t.Run("re-run", func(t *testing.T) {
		db, _ := openNew(t, Options{})
		emptyIDItems(t, db, false)
		if n, err := db.Rerun("classify"); err != nil || n != 3 {
			t.Fatalf("Rerun(classify): %d, %v; want all 3 items", n, err)
		}
		if loc, err := db.Locate(""); err != nil || loc.Stage != "classify" || loc.Status != "queued" {
			t.Fatalf("the item \"\" after the re-run: at %q %q, %v; want queued at classify", loc.Stage, loc.Status, err)
		}
		storetest.Invariants(t, db)
	})
	t.Run("prune", func(t *testing.T) {
		db, _ := openNew(t, Options{})
		emptyIDItems(t, db, false)
		if n, err := db.Prune(func(id string) bool { return id != "" }, false); err != nil || n != 1 {
			t.Fatalf("Prune of the item \"\": %d, %v; want 1", n, err)
		}
		if _, err := db.Locate(""); err == nil {
			t.Error("the item \"\" is still there after the prune")
		}
		storetest.Invariants(t, db)
	})
	t.Run("migrated from schema 8", func(t *testing.T) {
		defer func(n int) { backfillPage = n }(backfillPage)
		backfillPage = 2
		db, u := openNew(t, Options{})
		emptyIDItems(t, db, false)
		db.Close()
		asSchema12(t, u)
		downgrade(t, u, 8)
		db, err := Open(context.Background(), u, Options{Stages: storetest.Stages})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		if r := rawRecords(t, u)[""]; len(r) == 0 || r[0] != tagNamedRecord {
			t.Errorf("the record of \"\" after the migration: %q, not stored binary", r)
		}
		storetest.Invariants(t, db) // the cube against a recount of the done items
	})
}
