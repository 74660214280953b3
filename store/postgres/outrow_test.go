package postgres

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

func TestOutputRow_roundTrip(t *testing.T) {
	long := bytes.Repeat([]byte("x"), 20000) // a length of three uvarint bytes
	tests := []struct {
		name    string
		entries []outputEntry
	}{
		{"one stage", []outputEntry{{0, []byte(`{"text":"a"}`)}}},
		{"three stages, packed and marked", []outputEntry{{0, []byte{markEscaped, 9, '{', '}'}}, {1, []byte{tagPacked, 1, 2}}, {2, []byte(`{}`)}}},
		{"an empty output", []outputEntry{{0, []byte{}}, {1, []byte(`1`)}}},
		{"a long output", []outputEntry{{0, long}, {1, []byte(`{}`)}}},
		{"a stage past 127", []outputEntry{{5, []byte(`{}`)}, {300, []byte(`{}`)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			row := encodeOutputRow(tc.entries)
			if row[0] != outputsFormat {
				t.Fatalf("row begins with %d, want the format byte", row[0])
			}
			got, err := outputEntries(row)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, tc.entries, func(a, b outputEntry) bool { return a.stage == b.stage && bytes.Equal(a.data, b.data) }) {
				t.Errorf("entries = %v, want %v", got, tc.entries)
			}
			for _, e := range tc.entries {
				if data, err := outputAt(row, e.stage); err != nil || !bytes.Equal(data, e.data) || data == nil {
					t.Errorf("outputAt(%d) = %q, %v; want %q", e.stage, data, err, e.data)
				}
			}
			if data, err := outputAt(row, 1000); data != nil || err != nil {
				t.Errorf("outputAt of a stage it has not = %q, %v; want nil", data, err)
			}
			// A commit appends its stage's entry to the stored row in
			// SQL (appendOutputsSQL): the same bytes as the whole row.
			grown := encodeOutputRow(tc.entries[:1])
			for _, e := range tc.entries[1:] {
				grown = appendOutputEntry(grown, e.stage, e.data)
			}
			if !bytes.Equal(grown, row) {
				t.Errorf("appended %x, encoded %x", grown, row)
			}
		})
	}
	if row := encodeOutputRow(nil); row != nil {
		t.Errorf("the row of no outputs = %x, want none", row)
	}
	if got, err := outputEntries(nil); got != nil || err != nil {
		t.Errorf("no row: %v, %v; want no entries", got, err)
	}
}

func TestOutputRow_damaged(t *testing.T) {
	row := encodeOutputRow([]outputEntry{{0, []byte(`{"a":1}`)}, {1, []byte(`{}`)}})
	tests := []struct {
		name string
		row  []byte
		want string
	}{
		{"empty", []byte{}, "unknown format byte"},
		{"another format", append([]byte{0x02}, row[1:]...), "unknown format byte"},
		{"cut short", row[:len(row)-1], "bad length"},
		{"a length past the end", append(slices.Clone(row), 2, 9, '{'), "bad length"},
		{"a stage cut short", append(slices.Clone(row), 0x80), "bad stage"},
		{"a stage twice", append(slices.Clone(row), 1, 2, '{', '}'), "stage 1 after stage 1"},
		{"stages out of order", append(slices.Clone(row), 0, 2, '{', '}'), "stage 0 after stage 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := outputEntries(tc.row)
			if !errors.Is(err, errOutputRow) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("outputEntries(%x) = %v; want an errOutputRow with %q", tc.row, err, tc.want)
			}
			if _, err := outputAt(tc.row, 5); !errors.Is(err, errOutputRow) {
				t.Errorf("outputAt(%x) = %v; want errOutputRow", tc.row, err)
			}
		})
	}
}

// TestDB_OneRowOfOutputsPerItem: a pipeline stores an item's outputs of
// every stage in one row, and a re-run from a middle stage cuts the rows
// to the stages before it (a re-run from the first deletes them).
func TestDB_OneRowOfOutputsPerItem(t *testing.T) {
	db, u := openNew(t, Options{})
	exportItems(t, db)
	c, err := db.Counts()
	if err != nil {
		t.Fatal(err)
	}
	// Every item with an output of the first stage has one row.
	if rows := queueQuery(t, u, `SELECT count(*)::text FROM output`); rows[0] != strconv.Itoa(c.Stages[0].Output) {
		t.Errorf("%s rows of outputs for %d items with outputs; want one each", rows[0], c.Stages[0].Output)
	}
	if p, err := db.Check(); err != nil || len(p) > 0 {
		t.Fatalf("Check: %v %v", p, err)
	}
	done := queueQuery(t, u, `SELECT min(item_id) FROM item i WHERE NOT EXISTS (SELECT 1 FROM todo t WHERE t.item_id = i.item_id)
		AND NOT EXISTS (SELECT 1 FROM dead d WHERE d.item_id = i.item_id)`)[0]
	if _, err := db.Rerun("classify"); err != nil {
		t.Fatal(err)
	}
	if got := stagesOf(t, u, done); !slices.Equal(got, []int{0}) {
		t.Errorf("after a re-run from classify, %s has outputs of stages %v; want [0]", done, got)
	}
	if p, err := db.Check(); err != nil || len(p) > 0 {
		t.Fatalf("Check after a re-run from classify: %v %v", p, err)
	}
	if _, err := db.Rerun("sanitize"); err != nil {
		t.Fatal(err)
	}
	if n := queueQuery(t, u, `SELECT count(*)::text FROM output`); n[0] != "0" {
		t.Errorf("after a re-run from the first stage, %s rows of outputs; want none", n[0])
	}
	storetest.Finish(t, db)
	if got := stagesOf(t, u, done); !slices.Equal(got, []int{0, 1, 2}) {
		t.Errorf("after it ran again, %s has outputs of stages %v; want [0 1 2]", done, got)
	}
	storetest.Invariants(t, db)
}

// stagesOf lists the stages item id's row of outputs holds.
func stagesOf(t testing.TB, url, id string) []int {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	var row []byte
	if err := conn.QueryRow(ctx, `SELECT data FROM `+DefaultSchema+`.output WHERE item_id = $1`, id).Scan(&row); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	entries, err := outputEntries(row)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range entries {
		out = append(out, e.stage)
	}
	return out
}

// TestDB_AppendsToARowLockedByAnother: two transactions appending
// entries to one item's row (what two commits would do, were the item
// lock not there) keep both: the second waits for the first's row lock
// and appends to what it committed, where a read in Go and a write of
// the whole row would lose the first's entry. The second, at the last
// stage, carries the item's quote, which is kept with both entries.
func TestDB_AppendsToARowLockedByAnother(t *testing.T) {
	db, _ := openNew(t, Options{})
	ctx := context.Background()
	if _, err := db.pool.Exec(ctx, `INSERT INTO cube_key (cell, label) VALUES ('\x00', 'bug')`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.pool.Exec(ctx, appendOutputsSQL, []string{"x"}, [][]byte{appendOutputEntry(nil, 0, []byte(`{}`))}, []byte{outputsFormat}, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	first, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Rollback(ctx)
	if _, err := first.Exec(ctx, appendOutputsSQL, []string{"x"}, [][]byte{appendOutputEntry(nil, 1, []byte(`{"a":1}`))}, []byte{outputsFormat}, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	var firstPID int
	if err := first.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&firstPID); err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() {
		_, err := db.pool.Exec(ctx, appendOutputsSQL, []string{"x"}, [][]byte{appendOutputEntry(nil, 2, []byte(`{"b":2}`))}, []byte{outputsFormat},
			[][]byte{{0}}, []string{"bug"}, []float64{0.75})
		second <- err
	}()
	// Until the second waits on the first's lock (it cannot end before).
	for waiting := false; !waiting; {
		if err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)))`, firstPID).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	var row []byte
	var label *string
	var conf *float64
	if err := db.pool.QueryRow(ctx, `SELECT o.data, k.label, o.conf FROM output o LEFT JOIN cube_key k ON k.id = o.key_id WHERE o.item_id = 'x'`).Scan(&row, &label, &conf); err != nil {
		t.Fatal(err)
	}
	want := encodeOutputRow([]outputEntry{{0, []byte(`{}`)}, {1, []byte(`{"a":1}`)}, {2, []byte(`{"b":2}`)}})
	if !bytes.Equal(row, want) {
		t.Errorf("row %x, want %x: an entry lost", row, want)
	}
	if label == nil || *label != "bug" || conf == nil || *conf != 0.75 {
		t.Errorf("quote of the row: label %v, confidence %v; want bug, 0.75", label, conf)
	}
}

// TestDB_AppendCarriesTheQuote: the append of an entry sets the row's
// quote to the one it is given: a new row is inserted with it, an
// append without one (a stage before the last) clears it, and a quote
// whose key is not in cube_key fails the statement rather than being
// lost.
func TestDB_AppendCarriesTheQuote(t *testing.T) {
	db, _ := openNew(t, Options{})
	ctx := context.Background()
	if _, err := db.pool.Exec(ctx, `INSERT INTO cube_key (cell, label) VALUES ('\x00', 'bug')`); err != nil {
		t.Fatal(err)
	}
	quote := func(id string) string {
		var q string
		if err := db.pool.QueryRow(ctx, `SELECT coalesce(k.label, '-') || '/' || coalesce(o.conf::text, '-') FROM output o LEFT JOIN cube_key k ON k.id = o.key_id WHERE o.item_id = $1`, id).Scan(&q); err != nil {
			t.Fatal(err)
		}
		return q
	}
	entry := [][]byte{appendOutputEntry(nil, 0, []byte(`{}`))}
	// A new row, with its quote (a pipeline of one stage).
	if _, err := db.pool.Exec(ctx, appendOutputsSQL, []string{"n"}, entry, []byte{outputsFormat}, [][]byte{{0}}, []string{"bug"}, []float64{0.5}); err != nil {
		t.Fatal(err)
	}
	if got := quote("n"); got != "bug/0.5" {
		t.Errorf("quote of a new row: %s, want bug/0.5", got)
	}
	// An append with none: the row has no quote any more.
	if _, err := db.pool.Exec(ctx, appendOutputsSQL, []string{"n"}, [][]byte{appendOutputEntry(nil, 1, []byte(`{}`))}, []byte{outputsFormat},
		[][]byte{nil}, []*string{nil}, []*float64{nil}); err != nil {
		t.Fatal(err)
	}
	if got := quote("n"); got != "-/-" {
		t.Errorf("quote after an append without one: %s, want none", got)
	}
	// A quote whose key is missing.
	_, err := db.pool.Exec(ctx, appendOutputsSQL, []string{"m"}, entry, []byte{outputsFormat}, [][]byte{{1}}, []string{"ux"}, []float64{0.5})
	if err == nil || !strings.Contains(err.Error(), "check constraint") {
		t.Errorf("a quote of a key not in cube_key: %v, want output's check to fail", err)
	}
}

// TestMigrate_OutputRows: a pipeline stored at schema 14 (a row per item
// and stage) is stored a row per item when a writable open migrates it,
// a page of items at a time: every output keeps its stored bytes, the
// exports are byte for byte as before, Check finds nothing, and the
// pipeline goes on.
func TestMigrate_OutputRows(t *testing.T) {
	u, before, recs := toMigrate(t)
	var stored []map[string][]byte
	for si := range storetest.Stages {
		stored = append(stored, rawOutputs(t, u, si))
	}
	downgrade(t, u, 14)
	byStage := queueQuery(t, u, `SELECT count(*)::text FROM output`)[0]
	items := queueQuery(t, u, `SELECT count(DISTINCT item_id)::text FROM output`)[0]
	if byStage == items {
		t.Fatalf("the schema-14 fixture holds %s rows for %s items; want a row per stage", byStage, items)
	}
	defer func(page int) { outputRowsPage = page }(outputRowsPage)
	outputRowsPage = 2

	db := openMigrated(t, u)
	if got := queueQuery(t, u, `SELECT count(*)::text FROM output`)[0]; got != items {
		t.Errorf("after the migration, %s rows of outputs for %s items", got, items)
	}
	if got := queueQuery(t, u, `SELECT coalesce(to_regclass('output_by_stage')::text, 'none')`)[0]; got != "none" {
		t.Errorf("the table of rows by stage is left: %s", got)
	}
	for si := range storetest.Stages {
		if now := rawOutputs(t, u, si); !mapsEqualBytes(now, stored[si]) {
			t.Errorf("stage %d: stored outputs after the migration differ from before", si)
		}
	}
	sameExports(t, db, before)
	if p, err := db.Check(); err != nil || len(p) > 0 {
		t.Errorf("Check after the migration: %v %v", p, err)
	}
	if st, err := db.Ingest(recs); err != nil || st.Unchanged != len(recs) {
		t.Errorf("ingesting the same records again: %+v, %v", st, err)
	}
	storetest.Finish(t, db)
	storetest.Invariants(t, db)
}

// TestMigrate_OutputRowsStepRunsAgain: step 15 run again on a pipeline
// already stored a row per item (its version alone set back to 14)
// leaves the rows as they are.
func TestMigrate_OutputRowsStepRunsAgain(t *testing.T) {
	u, before, _ := toMigrate(t)
	rows := queueQuery(t, u, `SELECT item_id || ':' || encode(data, 'hex') FROM output ORDER BY item_id`)
	sql(t, u, `UPDATE meta SET value = '14' WHERE key = 'schema'`)

	db := openMigrated(t, u)
	if now := queueQuery(t, u, `SELECT item_id || ':' || encode(data, 'hex') FROM output ORDER BY item_id`); !slices.Equal(now, rows) {
		t.Errorf("rows after the step ran again:\n%v\nbefore:\n%v", now, rows)
	}
	sameExports(t, db, before)
}

func mapsEqualBytes(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// TestMigrate_FramedRowsUnderAnOlderVersion: a pipeline of this version
// set back to schema 7 with its cube dropped (what e2e's migration test
// does), its outputs still a row per item, migrates: the steps that
// read rows by stage (11-13) read the framed rows or leave them, the
// cube is built again from them, and the exports are as before.
func TestMigrate_FramedRowsUnderAnOlderVersion(t *testing.T) {
	u, before, _ := toMigrate(t)
	rows := queueQuery(t, u, `SELECT item_id || ':' || encode(data, 'hex') FROM output ORDER BY item_id`)
	cube := queueQuery(t, u, quotesByItem)
	// output keeps its quotes' key ids, which name the dropped
	// cube_key's rows: the migration must replace them.
	sql(t, u, downgradeHash+`DROP TABLE cube_cell, cube_key;
		ALTER TABLE todo DROP COLUMN batch_sends;
		UPDATE meta SET value = '7' WHERE key = 'schema'`)

	db := openMigrated(t, u)
	if now := queueQuery(t, u, `SELECT item_id || ':' || encode(data, 'hex') FROM output ORDER BY item_id`); !slices.Equal(now, rows) {
		t.Errorf("rows after the migration:\n%v\nbefore:\n%v", now, rows)
	}
	if now := queueQuery(t, u, quotesByItem); !slices.Equal(now, cube) {
		t.Errorf("quotes after the migration:\n%v\nbefore:\n%v", now, cube)
	}
	sameExports(t, db, before)
	if p, err := db.Check(); err != nil || len(p) > 0 {
		t.Errorf("Check after the migration: %v %v", p, err)
	}
}

// TestMigrate_OutputRowsOfTheEmptyID: step 15 moves the outputs of an
// item whose id is the empty string (a store takes it) like any other's:
// the pages of items begin at the least id, not after it, and the rows
// by stage are dropped once moved.
func TestMigrate_OutputRowsOfTheEmptyID(t *testing.T) {
	db, u := openNew(t, Options{})
	if _, err := db.Ingest([]pipeline.Record{storetest.Record("", "bug an item without a name", "x", "1"), storetest.Record("a", "bug a", "x", "2")}); err != nil {
		t.Fatal(err)
	}
	storetest.Finish(t, db)
	db.Close()
	var stored []map[string][]byte
	for si := range storetest.Stages {
		stored = append(stored, rawOutputs(t, u, si))
	}
	downgrade(t, u, 14)
	defer func(page int) { outputRowsPage = page }(outputRowsPage)
	outputRowsPage = 1

	db = openMigrated(t, u)
	for si := range storetest.Stages {
		if now := rawOutputs(t, u, si); !mapsEqualBytes(now, stored[si]) {
			t.Errorf("stage %d: stored outputs after the migration %q, before %q", si, slices.Sorted(maps.Keys(now)), slices.Sorted(maps.Keys(stored[si])))
		}
	}
	if p, err := db.Check(); err != nil || len(p) > 0 {
		t.Errorf("Check after the migration: %v %v", p, err)
	}
}

// TestDB_ReadsOfADamagedRowNameItsItem: a claim or a read of a queue
// that meets an item whose row of outputs does not unframe fails with
// an error naming the item (not only its queue entry), a damage.
func TestDB_ReadsOfADamagedRowNameItsItem(t *testing.T) {
	db, u := openNew(t, Options{})
	ingestN(t, db, 2)
	storetest.Advance(t, db, "sanitize")
	sql(t, u, `UPDATE output SET data = data || '\x0109' WHERE item_id = 'i00001'`)
	reads := []struct {
		name string
		read func() error
	}{
		{"Queued", func() error { _, err := db.Queued("classify", 0, 5); return err }},
		{"Claim", func() error { _, err := db.Claim(context.Background(), "classify", 5, testLease); return err }},
	}
	for _, r := range reads {
		err := r.read()
		if !pipeline.IsDamaged(err) || !strings.Contains(err.Error(), `item "i00001"`) {
			t.Errorf("%s of a damaged row: %v; want a damage naming item \"i00001\"", r.name, err)
		}
	}
}

// TestDB_DamagedRowGoesWithEveryOutput: a row of outputs that does not
// unframe, of an item not done, does not block the commands that drop
// every output of its item (a re-run from the first stage, prune), which
// repair it as they did when outputs were rows by stage; a re-run that
// keeps the first stage's output, or one over a done item (whose fact
// the tally counted from the unreadable row), fails naming the item.
func TestDB_DamagedRowGoesWithEveryOutput(t *testing.T) {
	damaged := func(t *testing.T, finish bool) (*DB, string) {
		db, u := openNew(t, Options{})
		ingestN(t, db, 3)
		storetest.Advance(t, db, "sanitize")
		if finish {
			storetest.Finish(t, db)
		}
		sql(t, u, `UPDATE output SET data = data || '\x0109' WHERE item_id = 'i00001'`)
		return db, u
	}
	for _, tc := range []struct {
		name   string
		finish bool
		stage  string
		want   string
	}{
		{"re-run from a later stage", false, "classify", "first stage"},
		{"re-run of a done item", true, "sanitize", "tally"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, _ := damaged(t, tc.finish)
			_, err := db.Rerun(tc.stage)
			if !pipeline.IsDamaged(err) || !strings.Contains(err.Error(), `item "i00001"`) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Rerun(%s) over a damaged row: %v; want a damage naming item \"i00001\" and %q", tc.stage, err, tc.want)
			}
		})
	}
	t.Run("re-run from the first stage", func(t *testing.T) {
		db, u := damaged(t, false)
		if n, err := db.Rerun("sanitize"); err != nil || n != 3 {
			t.Fatalf("Rerun(sanitize) over a damaged row: %d items, %v; want 3 moved", n, err)
		}
		if n := queueQuery(t, u, `SELECT count(*)::text FROM output`); n[0] != "0" {
			t.Errorf("%s rows of outputs after a re-run from the first stage; want none", n[0])
		}
		storetest.Finish(t, db)
		if got := stagesOf(t, u, "i00001"); !slices.Equal(got, []int{0, 1, 2}) {
			t.Errorf("after it ran again, i00001 has outputs of stages %v; want [0 1 2]", got)
		}
		if p, err := db.Check(); err != nil || len(p) > 0 {
			t.Errorf("Check after it ran again: %v %v", p, err)
		}
	})
	t.Run("prune", func(t *testing.T) {
		db, u := damaged(t, false)
		if n, err := db.Prune(func(id string) bool { return id != "i00001" }, false); err != nil || n != 1 {
			t.Fatalf("Prune of the damaged item: %d, %v; want 1", n, err)
		}
		if n := queueQuery(t, u, `SELECT count(*)::text FROM output WHERE item_id = 'i00001'`); n[0] != "0" {
			t.Errorf("the pruned item keeps %s row of outputs", n[0])
		}
	})
}

// quotesByItem lists every stored quote as its item, cell, label and
// confidence, by item.
const quotesByItem = `SELECT o.item_id || ':' || k.cell::text || ':' || k.label || ':' || o.conf FROM output o JOIN cube_key k ON k.id = o.key_id ORDER BY o.item_id`
