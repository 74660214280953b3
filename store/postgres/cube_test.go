package postgres

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// cubeItems are done items over two apps and three labels, with ids
// whose byte order is not a dictionary's (ties in confidence are broken
// by id as report's Go sort does), some rated, one queued, one dead.
func cubeItems(t *testing.T, db *DB) {
	t.Helper()
	var recs []pipeline.Record
	for i := range 30 {
		id := fmt.Sprintf("%c%02d", "aBcD"[i%4], i)
		label := []string{"bug", "ux", "praise"}[i%3]
		rating := []string{"", "1", "2.5", "1e17"}[i%4]
		recs = append(recs, storetest.Record(id, label+" "+id+fmt.Sprint(i%5), []string{"x", "y"}[i%2], rating))
	}
	if _, err := db.Ingest(recs); err != nil {
		t.Fatal(err)
	}
	storetest.Advance(t, db, "sanitize")
	storetest.Advance(t, db, "classify", "D03")
	storetest.Advance(t, db, "aggregate")
	if _, err := db.Ingest([]pipeline.Record{storetest.Record("q", "bug q", "x", "1")}); err != nil {
		t.Fatal(err)
	}
}

// TestCube_BuiltWhenMigrating: a pipeline stored at schema 8 (no cube)
// gets its cube from its done items when a writable open migrates it,
// a page at a time, and keeps it from then on.
func TestCube_BuiltWhenMigrating(t *testing.T) {
	defer func(n int) { backfillPage = n }(backfillPage)
	backfillPage = 4
	db, u := openNew(t, Options{})
	cubeItems(t, db)
	db.Close()
	asSchema12(t, u)
	downgrade(t, u, 8)

	if _, err := Open(context.Background(), u, Options{Stages: storetest.Stages, ReadOnly: true}); err == nil {
		t.Fatal("a read-only open of a schema-8 pipeline did not refuse")
	}
	db, err := Open(context.Background(), u, Options{Stages: storetest.Stages})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	c, ok, err := db.StoredCube()
	if err != nil || !ok || len(c.Cells) != 6 {
		t.Fatalf("StoredCube after the migration: %d cells, ok %v, %v; want 6", len(c.Cells), ok, err)
	}
	storetest.Invariants(t, db)
	storetest.Finish(t, db)
	if _, err := db.Rerun("classify"); err != nil {
		t.Fatal(err)
	}
	storetest.Finish(t, db)
	storetest.Invariants(t, db)
}

// TestCube_KeptByRestore: items restored done (`sawtooth copy` into
// PostgreSQL) are folded into the cube with their classify confidence.
func TestCube_KeptByRestore(t *testing.T) {
	src, _ := openNew(t, Options{})
	cubeItems(t, src)
	var locs []pipeline.Location
	if err := src.eachID(func(id string) error {
		loc, err := src.Locate(id)
		locs = append(locs, loc)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	dst, _ := openNew(t, Options{})
	if err := dst.Restore(locs); err != nil {
		t.Fatal(err)
	}
	c, ok, err := dst.StoredCube()
	if err != nil || !ok || len(c.Cells) != 6 {
		t.Fatalf("StoredCube after Restore: %d cells, ok %v, %v; want 6", len(c.Cells), ok, err)
	}
	storetest.Invariants(t, dst)
}

// TestCube_KeptByBatchResults: items a Batch API job at the last stage
// answers are folded into the cube with the confidence of their stored
// classify output.
func TestCube_KeptByBatchResults(t *testing.T) {
	db, _ := openNew(t, Options{})
	cubeItems(t, db)
	if _, err := db.Rerun("aggregate"); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	job, ok, err := db.ReserveBatch("aggregate", 100, now)
	if err != nil || !ok || len(job.Items) == 0 {
		t.Fatalf("ReserveBatch: %+v %v %v", job, ok, err)
	}
	items, err := db.BatchItems(job.Num)
	if err != nil {
		t.Fatal(err)
	}
	var ts []pipeline.Transition
	for _, it := range items {
		ts = append(ts, pipeline.Transition{Stage: "aggregate", ID: it.ID, Outcome: pipeline.Succeeded,
			Result: pipeline.Result{Output: storetest.Output("aggregate", it)}})
	}
	if n, err := db.CommitBatch(job.Num, ts); err != nil || n != len(items) {
		t.Fatalf("CommitBatch: %d applied, %v; want %d", n, err, len(items))
	}
	c, ok, err := db.StoredCube()
	if err != nil || !ok || len(c.Cells) != 6 {
		t.Fatalf("StoredCube after the batch: %d cells, ok %v, %v; want 6", len(c.Cells), ok, err)
	}
	storetest.Invariants(t, db)
}

// TestMigrate_QuotesByKeyID: a pipeline stored at schema 11 (each quote
// row with its cell's key and label) has its quote rows name a cube_key
// id when a writable open migrates it: the same cube, every quote kept,
// each row and its index entry smaller, and the folds from then on
// kept in the new layout.
func TestMigrate_QuotesByKeyID(t *testing.T) {
	db, u := openNew(t, Options{})
	cubeItems(t, db)
	before, ok, err := db.StoredCube()
	if err != nil || !ok {
		t.Fatalf("StoredCube: ok %v, %v", ok, err)
	}
	db.Close()
	asSchema12(t, u)
	downgrade(t, u, 11)
	oldSize := quoteBytes(t, u)

	db = openMigrated(t, u)
	after, ok, err := db.StoredCube()
	if err != nil || !ok || !reflect.DeepEqual(after.Cells, before.Cells) {
		t.Fatalf("StoredCube after the migration: ok %v, %v\n%v\nbefore:\n%v", ok, err, after.Cells, before.Cells)
	}
	if newSize := quoteBytes(t, u); newSize >= oldSize {
		t.Errorf("quote rows and index entries: %d bytes, %d before the migration", newSize, oldSize)
	}
	storetest.Invariants(t, db)
	foldsOutAndIn(t, db)
}

// quoteBytes is what the quotes and their index's entries take (their
// columns' bytes, not the pages they sit on): the rows of cube_quote
// before schema step 16, the quote's columns and id in the rows of
// outputs from it on.
func quoteBytes(t testing.TB, url string) int64 {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	query := `SELECT 2 * sum(pg_column_size(q.*)) FROM ` + DefaultSchema + `.cube_quote q`
	var table bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, DefaultSchema+".cube_quote").Scan(&table); err != nil {
		t.Fatal(err)
	}
	if !table {
		query = `SELECT 2 * sum(pg_column_size(key_id) + pg_column_size(conf) + pg_column_size(item_id)) FROM ` + DefaultSchema + `.output WHERE key_id IS NOT NULL`
	}
	var n int64
	if err := conn.QueryRow(ctx, query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
