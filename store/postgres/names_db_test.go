package postgres

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// recordForms is each item's stored record's first byte, as id:byte,
// by id.
const recordForms = `SELECT item_id || ':' || get_byte(record, 0) FROM item ORDER BY item_id`

// fieldNameRows is field_name's names, by name.
const fieldNameRows = `SELECT name FROM field_name ORDER BY name`

// located is item id's record as db reads it.
func located(t *testing.T, db *DB, id string) pipeline.Record {
	t.Helper()
	loc, err := db.Locate(id)
	if err != nil {
		t.Fatalf("Locate(%q): %v", id, err)
	}
	return loc.Record
}

// TestDB_RecordsNameTheirFieldsByNumber: an ingested record is stored
// without its id and with its field names as numbers, each name once in
// field_name; one with a name too long for a number keeps its names
// written out, one with invalid UTF-8 is JSON; each reads back as given
// (the JSON one with its bytes replaced), ingesting them again changes
// nothing, and an edit is stored in the new form too.
func TestDB_RecordsNameTheirFieldsByNumber(t *testing.T) {
	db, u := openNew(t, Options{})
	long := strings.Repeat("f", maxNameLen+1)
	recs := []pipeline.Record{
		storetest.Record("a", "bug in a", "x", "1"),
		storetest.Record("b", "ux of b", "y", ""),
		{ID: "c", Text: "a typed field", Fields: map[string]string{"n": "3", "": "unnamed"}, Types: map[string]pipeline.FieldType{"n": pipeline.FieldNumber}, Line: 4},
		{ID: "d", Text: "a long name", Fields: map[string]string{"app": "x", long: "v"}},
		{ID: "e", Text: "bad \xff bytes", Fields: map[string]string{"app": "x"}},
	}
	if _, err := db.Ingest(recs); err != nil {
		t.Fatal(err)
	}
	want := []string{"a:4", "b:4", "c:4", "d:3", fmt.Sprintf("e:%d", '{')}
	if got := queueQuery(t, u, recordForms); !slices.Equal(got, want) {
		t.Errorf("stored forms %v, want %v", got, want)
	}
	if got := queueQuery(t, u, fieldNameRows); !slices.Equal(got, []string{"", "app", "n", "note", "rating"}) {
		t.Errorf("field_name %v, want the empty name, app, n, note, rating", got)
	}
	for _, r := range recs[:4] {
		if got := located(t, db, r.ID); !reflect.DeepEqual(got, r) {
			t.Errorf("item %s reads back as %+v, want %+v", r.ID, got, r)
		}
	}
	if got := located(t, db, "e"); got.Text != "bad \ufffd bytes" || got.Fields["app"] != "x" {
		t.Errorf("item e reads back as %+v", got)
	}
	st, err := db.Ingest(recs)
	if err != nil || st.Unchanged != len(recs) {
		t.Fatalf("the same records again: %+v, %v; want all unchanged", st, err)
	}
	edited := storetest.Record("d", "a long name", "z", "2")
	if st, err := db.Ingest([]pipeline.Record{edited}); err != nil || st.Changed+st.Updated != 1 {
		t.Fatalf("an edit of d: %+v, %v", st, err)
	}
	if got := located(t, db, "d"); !reflect.DeepEqual(got, edited) {
		t.Errorf("d after its edit: %+v, want %+v", got, edited)
	}
	if got := queueQuery(t, u, recordForms); got[3] != "d:4" {
		t.Errorf("d's record after its edit: %s, want the new form", got[3])
	}
	storetest.Finish(t, db)
	storetest.Invariants(t, db)
}

// TestDB_NamesAnotherWorkerAdded: workers read records whose names
// another worker numbered after they opened (claims, Locate, the done
// items' stream, the export's field names), and a worker that ingests
// the same names uses their numbers.
func TestDB_NamesAnotherWorkerAdded(t *testing.T) {
	a, u := openNew(t, Options{Owner: "a"})
	b := worker(t, u, "b")
	c := worker(t, u, "c")
	rec := pipeline.Record{ID: "r1", Text: "bug in the region", Fields: map[string]string{"region": "eu", "tier": "gold"}}
	if _, err := a.Ingest([]pipeline.Record{rec}); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.names.number("region"); ok {
		t.Fatal("b knew the number of a name registered after it opened: the test proves nothing")
	}
	claims, err := b.Claim(context.Background(), "sanitize", 10, 30*time.Second)
	if err != nil || len(claims) != 1 || !reflect.DeepEqual(claims[0].Item.Record, rec) {
		t.Fatalf("b's claim: %+v, %v; want %+v", claims, err, rec)
	}
	if got := located(t, b, "r1"); !reflect.DeepEqual(got, rec) {
		t.Errorf("b's Locate: %+v", got)
	}
	expireLeases(t, u)
	storetest.Finish(t, a)
	var done []pipeline.Record
	if err := c.ForEachDone(func(it pipeline.Item) error { done = append(done, it.Record); return nil }); err != nil || len(done) != 1 || !reflect.DeepEqual(done[0], rec) {
		t.Fatalf("c's stream of done items: %+v, %v; want %+v", done, err, rec)
	}
	inputs, _, err := c.FieldNames()
	if err != nil || !reflect.DeepEqual(inputs, map[string]bool{"region": true, "tier": true}) {
		t.Errorf("c's FieldNames: %v, %v", inputs, err)
	}
	if _, err := c.Ingest([]pipeline.Record{{ID: "r2", Text: "t", Fields: map[string]string{"region": "us"}}}); err != nil {
		t.Fatal(err)
	}
	if got := queueQuery(t, u, recordForms); !slices.Equal(got, []string{"r1:4", "r2:4"}) {
		t.Errorf("stored forms %v, want both with numbered names", got)
	}
}

// TestDB_NamesUnreadable: a worker that meets a number it does not know
// and cannot read field_name (here: its connection's database is gone)
// reports that, not a damaged record.
func TestDB_NamesUnreadable(t *testing.T) {
	a, u := openNew(t, Options{Owner: "a"})
	b := worker(t, u, "b")
	if _, err := a.Ingest([]pipeline.Record{{ID: "r1", Text: "t", Fields: map[string]string{"region": "eu"}}}); err != nil {
		t.Fatal(err)
	}
	b.names.cfg.Database = "no_such_database"
	_, err := b.Locate("r1")
	var damaged *pipeline.DamagedError
	if err == nil || errors.As(err, &damaged) || !strings.Contains(err.Error(), "read the field names") {
		t.Fatalf("Locate without the names: %v; want a failed read of the field names, not damage", err)
	}
	if _, err := b.Claim(context.Background(), "sanitize", 10, 30*time.Second); err == nil || errors.As(err, &damaged) {
		t.Fatalf("Claim without the names: %v; want a failed read of the field names, not damage", err)
	}
}

// TestDB_NamesRegisteredAtOnce: workers that ingest records with the
// same new names at once give each name one number, and each reads
// every record as it was given.
func TestDB_NamesRegisteredAtOnce(t *testing.T) {
	_, u := openNew(t, Options{})
	const n = 4
	dbs := make([]*DB, n)
	for i := range dbs {
		dbs[i] = worker(t, u, fmt.Sprintf("w%d", i))
	}
	var recs []pipeline.Record
	for i := range n {
		for j := range 5 {
			recs = append(recs, pipeline.Record{ID: fmt.Sprintf("w%d-%d", i, j), Text: "text",
				Fields: map[string]string{fmt.Sprintf("f%d", j): "v", fmt.Sprintf("g%d", (i+j)%5): "w"}})
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { _, errs[i] = dbs[i].Ingest(recs[i*5 : i*5+5]) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	if got := queueQuery(t, u, fieldNameRows); len(got) != 10 {
		t.Errorf("field_name %v, want f0..f4 and g0..g4", got)
	}
	for _, form := range queueQuery(t, u, recordForms) {
		if !strings.HasSuffix(form, ":4") {
			t.Errorf("stored form %s, want numbered names", form)
		}
	}
	for _, db := range dbs {
		for _, r := range recs {
			if got := located(t, db, r.ID); !reflect.DeepEqual(got, r) {
				t.Fatalf("%s reads %s as %+v, want %+v", db.owner, r.ID, got, r)
			}
		}
	}
}

// TestDB_NamesPastTheLimit: once field_name holds maxFieldNames names, a
// record with a new name keeps its names written out and reads back,
// and the table takes no more.
func TestDB_NamesPastTheLimit(t *testing.T) {
	db, u := openNew(t, Options{})
	sql(t, u, `INSERT INTO field_name (name) SELECT 'x' || i FROM generate_series(1, $1) AS i`, maxFieldNames)
	rec := pipeline.Record{ID: "r", Text: "t", Fields: map[string]string{"x1": "a", "fresh": "b"}}
	if _, err := db.Ingest([]pipeline.Record{rec}); err != nil {
		t.Fatal(err)
	}
	if got := queueQuery(t, u, recordForms); !slices.Equal(got, []string{"r:3"}) {
		t.Errorf("stored form %v, want the names written out", got)
	}
	if got := located(t, db, "r"); !reflect.DeepEqual(got, rec) {
		t.Errorf("reads back as %+v", got)
	}
	if got := queueQuery(t, u, `SELECT count(*)::text FROM field_name`); got[0] != fmt.Sprint(maxFieldNames) {
		t.Errorf("field_name holds %s names, want %d", got[0], maxFieldNames)
	}
}

// TestDB_FailedIngestLeavesOnlyNames: an ingest that fails after it
// numbered its names stores no item; the names stay, unused, and the
// next ingest uses them.
func TestDB_FailedIngestLeavesOnlyNames(t *testing.T) {
	db, u := openNew(t, Options{})
	bad := pipeline.Record{ID: "nul\x00id", Text: "t", Fields: map[string]string{"region": "eu"}}
	if _, err := db.Ingest([]pipeline.Record{bad}); err == nil {
		t.Fatal("an id with a NUL byte was ingested")
	}
	if got := queueQuery(t, u, `SELECT count(*)::text FROM item`); got[0] != "0" {
		t.Fatalf("%s items after the failed ingest", got[0])
	}
	const numbers = `SELECT name || ':' || id FROM field_name ORDER BY name`
	left := queueQuery(t, u, numbers)
	if len(left) != 1 || !strings.HasPrefix(left[0], "region:") {
		t.Fatalf("field_name after the failed ingest: %v, want region", left)
	}
	good := pipeline.Record{ID: "ok", Text: "t", Fields: map[string]string{"region": "eu"}}
	if _, err := db.Ingest([]pipeline.Record{good}); err != nil {
		t.Fatal(err)
	}
	if got := queueQuery(t, u, numbers); !slices.Equal(got, left) {
		t.Errorf("field_name %v, want %v as the failed ingest left it", got, left)
	}
	if got := located(t, db, "ok"); !reflect.DeepEqual(got, good) {
		t.Errorf("reads back as %+v", got)
	}
	storetest.Invariants(t, db)
}

// TestMigrate_NamedRecords: a pipeline of schema 17 (every record with
// its id and names written out) migrates to 18 with its records in the
// new form, shorter, exporting the same; a new item is stored in the new
// form too, and the step runs again on a pipeline whose version alone
// was set back.
func TestMigrate_NamedRecords(t *testing.T) {
	db, u := openNew(t, Options{})
	quoteItems(t, db)
	exported := exports(t, db)
	db.Close()
	downgrade(t, u, 17)
	const sizes = `SELECT sum(length(record))::text FROM item`
	before := queueQuery(t, u, recordForms)
	oldSize := queueQuery(t, u, sizes)[0]
	for _, form := range before {
		if strings.HasSuffix(form, ":4") {
			t.Fatalf("a record of the new form at schema 17: %v", before)
		}
	}
	db = openMigrated(t, u)
	sameExports(t, db, exported)
	for _, form := range queueQuery(t, u, recordForms) {
		if !strings.HasSuffix(form, ":4") {
			t.Errorf("after the migration a record of form %s, want 4", form)
		}
	}
	if newSize := queueQuery(t, u, sizes)[0]; len(newSize) > len(oldSize) || newSize >= oldSize && len(newSize) == len(oldSize) {
		t.Errorf("records after the migration: %s bytes, %s before", newSize, oldSize)
	}
	if _, err := db.Ingest([]pipeline.Record{storetest.Record("new", "bug in a new item", "x", "2")}); err != nil {
		t.Fatal(err)
	}
	if got := queueQuery(t, u, `SELECT get_byte(record, 0)::text FROM item WHERE item_id = 'new'`); got[0] != "4" {
		t.Errorf("a new item's record after the migration: form %s, want 4", got[0])
	}
	storetest.Finish(t, db)
	storetest.Invariants(t, db)
	exported = exports(t, db)
	db.Close()

	sql(t, u, `UPDATE meta SET value = '17' WHERE key = 'schema'`)
	db = openMigrated(t, u)
	sameExports(t, db, exported)
	storetest.Invariants(t, db)
}

// TestMigrate_NamedRecordsLeavesWhatItCannotRead: step 18 leaves a
// damaged record and one whose id is not its row's as they were, and
// rewrites the rest, one stored as JSON (invalid UTF-8, replaced as it
// reads) included, each reading back as before.
func TestMigrate_NamedRecordsLeavesWhatItCannotRead(t *testing.T) {
	db, u := openNew(t, Options{})
	if _, err := db.Ingest([]pipeline.Record{
		storetest.Record("a", "fine", "x", "1"),
		storetest.Record("b", "to damage", "x", "1"),
		{ID: "c", Text: "bad \xff bytes", Fields: map[string]string{"app": "x"}},
		storetest.Record("d", "to rename", "x", "1"),
	}); err != nil {
		t.Fatal(err)
	}
	wantC := located(t, db, "c")
	db.Close()
	downgrade(t, u, 17)
	sql(t, u, `UPDATE item SET record = '\x0305ab' WHERE item_id = 'b'`)
	sql(t, u, `UPDATE item SET record = (SELECT record FROM item WHERE item_id = 'a') WHERE item_id = 'd'`)
	const kept = `SELECT item_id || ':' || encode(record, 'hex') FROM item WHERE item_id IN ('b', 'd') ORDER BY item_id`
	before := queueQuery(t, u, kept)
	db = openMigrated(t, u)
	if got := queueQuery(t, u, kept); !slices.Equal(got, before) {
		t.Errorf("records the step cannot rewrite:\n%v\nbefore:\n%v", got, before)
	}
	if got := queueQuery(t, u, recordForms); got[0] != "a:4" || got[2] != "c:4" {
		t.Errorf("records after the migration: %v, want a and c of form 4", got)
	}
	if got := located(t, db, "c"); !reflect.DeepEqual(got, wantC) || !strings.Contains(got.Text, "\ufffd") {
		t.Errorf("c after the migration: %+v, want %+v", got, wantC)
	}
}
