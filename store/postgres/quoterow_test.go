package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// quoteItems stores cubeItems (ids whose byte order is no dictionary's,
// ratings none, 1, 2.5 and 1e17, one dead, one queued) and a done item
// whose id is empty.
func quoteItems(t *testing.T, db *DB) {
	t.Helper()
	if _, err := db.Ingest([]pipeline.Record{storetest.Record("", "bug with no id", "y", "2")}); err != nil {
		t.Fatal(err)
	}
	cubeItems(t, db)
}

// rowsWithQuotes lists every row of outputs as its id, data, key id and
// confidence (NULLs as such), by id.
const rowsWithQuotes = `SELECT item_id || ':' || encode(data, 'hex') || ':' || coalesce(key_id::text, 'NULL') || ':' || coalesce(conf::text, 'NULL') FROM output ORDER BY item_id`

// storedCube is db's cube, which must be there.
func storedCube(t *testing.T, db *DB) pipeline.StoredCube {
	t.Helper()
	c, ok, err := db.StoredCube()
	if err != nil || !ok {
		t.Fatalf("StoredCube: ok %v, %v", ok, err)
	}
	return c
}

// foldsOutAndIn re-runs classify on db's drained pipeline and adds an
// item in a cell of its own, drains it again and checks the cube has
// the new cell and the invariants hold: a migrated layout folds items
// out and in as a new one does.
func foldsOutAndIn(t *testing.T, db *DB) {
	t.Helper()
	if _, err := db.Rerun("classify"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Ingest([]pipeline.Record{storetest.Record("z", "bug in a new cell", "z", "2")}); err != nil {
		t.Fatal(err)
	}
	storetest.Finish(t, db)
	if c := storedCube(t, db); len(c.Cells) != 7 {
		t.Fatalf("StoredCube after a rerun and a new cell: %d cells, want 7", len(c.Cells))
	}
	storetest.Invariants(t, db)
}

// TestMigrate_QuotesIntoOutputRows: a pipeline stored at schema 15 (a
// cube_quote row per done item) has each quote moved into its row of
// outputs when a writable open migrates it: cube_quote is gone, the
// quotes are the same (cell, label, confidence), the rows' outputs byte
// for byte, the cube (with the ratings now derived from the facts) and
// the exports as before, Check clean; folds from then on keep it.
func TestMigrate_QuotesIntoOutputRows(t *testing.T) {
	db, u := openNew(t, Options{})
	quoteItems(t, db)
	before := storedCube(t, db)
	exported := exports(t, db)
	quotes := queueQuery(t, u, quotesByItem)
	datas := queueQuery(t, u, `SELECT item_id || ':' || encode(data, 'hex') || ':' || (key_id IS NULL) FROM output ORDER BY item_id`)
	if !slices.ContainsFunc(quotes, func(q string) bool { return strings.HasPrefix(q, ":") }) {
		t.Fatalf("the item with the empty id has no quote: %v", quotes)
	}
	db.Close()
	downgrade(t, u, 15)
	if n := queueQuery(t, u, `SELECT count(*)::text FROM cube_quote`); n[0] != "30" {
		t.Fatalf("the schema-15 fixture holds %s quote rows, want 30", n[0])
	}

	db = openMigrated(t, u)
	for _, rel := range []string{"cube_quote", "cube_quote_best", "output_unquoted"} {
		if got := queueQuery(t, u, `SELECT (to_regclass('`+DefaultSchema+`.`+rel+`') IS NULL)::text`); got[0] != "true" {
			t.Errorf("%s is still there after the migration", rel)
		}
	}
	if got := queueQuery(t, u, `SELECT (indpred IS NOT NULL)::text FROM pg_index WHERE indexrelid = '`+DefaultSchema+`.output_quote'::regclass`); !slices.Equal(got, []string{"true"}) {
		t.Errorf("output_quote partial: %v, want true", got)
	}
	if now := queueQuery(t, u, quotesByItem); !slices.Equal(now, quotes) {
		t.Errorf("quotes after the migration:\n%v\nbefore:\n%v", now, quotes)
	}
	if now := queueQuery(t, u, `SELECT item_id || ':' || encode(data, 'hex') || ':' || (key_id IS NULL) FROM output ORDER BY item_id`); !slices.Equal(now, datas) {
		t.Errorf("rows of outputs after the migration:\n%v\nbefore:\n%v", now, datas)
	}
	if after := storedCube(t, db); !reflect.DeepEqual(after, before) {
		t.Errorf("StoredCube after the migration:\n%+v\nbefore:\n%+v", after, before)
	}
	sameExports(t, db, exported)
	storetest.Invariants(t, db)

	foldsOutAndIn(t, db)
}

// TestMigrate_QuotesIntoOutputRows_damage: a quote row of an item
// without a row of outputs has nowhere to go and is dropped (Check
// reported it before); one of a queued item with a row is moved as it
// is, so Check still reports it.
func TestMigrate_QuotesIntoOutputRows_damage(t *testing.T) {
	db, u := openNew(t, Options{})
	quoteItems(t, db)
	db.Close()
	downgrade(t, u, 15)
	// q is queued at sanitize, with no row; a00 is sent back to classify,
	// keeping its row (and so its sanitize output) and its quote.
	sql(t, u, `INSERT INTO cube_quote (item_id, key_id, conf) VALUES ('q', (SELECT min(id) FROM cube_key), 0.5);
		UPDATE output SET data = substring(data FROM 1 FOR 1 + 2 + get_byte(data, 2)) WHERE item_id = 'a00';
		INSERT INTO todo (seq, item_id, stage) VALUES (1000000, 'a00', 1)`)

	db = openMigrated(t, u)
	if got := queueQuery(t, u, `SELECT item_id FROM output WHERE key_id IS NOT NULL AND item_id IN ('q', 'a00')`); !slices.Equal(got, []string{"a00"}) {
		t.Errorf("quotes of the damaged items after the migration: %v, want a00's alone", got)
	}
	p, err := db.Check()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(p, "\n"), `cube: item "a00" is not done but has a quote`) {
		t.Errorf("Check after the migration = %q, want a line on a00's quote", p)
	}
	// The quote of a00, whose row holds no fact, is no example: the
	// cube is read without it (and report streams it), not failed.
	cube, _, err := db.StoredCube()
	if err != nil {
		t.Fatalf("StoredCube with a00's stray quote: %v", err)
	}
	for _, c := range cube.Cells {
		for _, q := range c.Quotes {
			if q.ID == "a00" {
				t.Errorf("a00's stray quote is an example of %v/%s", c.Groups, c.Label)
			}
		}
	}
}

// TestMigrate_QuoteStepRunsAgain: a pipeline of this version whose
// version alone is set back to 15 (no cube_quote) migrates with its rows
// of outputs, their quotes included, as they were.
func TestMigrate_QuoteStepRunsAgain(t *testing.T) {
	db, u := openNew(t, Options{})
	quoteItems(t, db)
	exported := exports(t, db)
	rows := queueQuery(t, u, rowsWithQuotes)
	db.Close()
	sql(t, u, `UPDATE meta SET value = '15' WHERE key = 'schema'`)

	db = openMigrated(t, u)
	if now := queueQuery(t, u, rowsWithQuotes); !slices.Equal(now, rows) {
		t.Errorf("rows after the step ran again:\n%v\nbefore:\n%v", now, rows)
	}
	sameExports(t, db, exported)
	storetest.Invariants(t, db)
}

// TestMigrate_FailedQuoteStepLeavesSchema15: a migration that fails in
// step 16, after it built the new output (its open is cancelled while
// the step waits to drop cube_quote, which a reader holds), rolls back
// whole: the pipeline is at schema 15 with its cube_quote and its output
// without quote columns, exports the same, and migrates on the next
// open.
func TestMigrate_FailedQuoteStepLeavesSchema15(t *testing.T) {
	ctx := context.Background()
	u, exported, quotes := schema15Pipeline(t)
	gate := holdCubeQuote(t, u)
	openCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	opened := make(chan error, 1)
	go func() {
		db, err := Open(openCtx, u, Options{Stages: storetest.Stages})
		if err == nil {
			db.Close()
		}
		opened <- err
	}()
	waitForALockWait(t, u)
	cancel()
	if err := <-opened; err == nil || !errors.Is(err, context.Canceled) && !strings.Contains(err.Error(), "cancel") {
		t.Fatalf("Open cancelled in step 16 = %v, want a cancellation", err)
	}
	if _, err := gate.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}

	migratesAsBefore(t, u, exported, quotes)
}

// TestDB_QuoteInTheRowOfOutputs: a done item's row of outputs holds its
// quote, and only a done item's: a re-run of any stage clears the quotes
// of the items it sends back (their classify output, the confidence,
// kept when the re-run is of aggregate), an edit of a field aggregate
// reads clears it until the item is done again with its new rating, a
// prune takes the row and the quote. The cube matches a recount and
// Check is clean after each.
func TestDB_QuoteInTheRowOfOutputs(t *testing.T) {
	db, u := openNew(t, Options{})
	quoteItems(t, db)
	// 30 done (29 and the empty id), D03 dead at classify (a row), q
	// queued at sanitize (none).
	quoted := `SELECT count(*) FILTER (WHERE key_id IS NOT NULL)::text || '/' || count(*)::text FROM output`
	if got := queueQuery(t, u, quoted); got[0] != "30/31" {
		t.Fatalf("quoted rows after the drain: %s, want 30 of 31", got[0])
	}
	quotes := queueQuery(t, u, quotesByItem)
	cube := storedCube(t, db)
	storetest.Invariants(t, db)

	for _, stage := range []string{"aggregate", "classify", "sanitize"} {
		if _, err := db.Rerun(stage); err != nil {
			t.Fatal(err)
		}
		if got := queueQuery(t, u, quoted); !strings.HasPrefix(got[0], "0/") {
			t.Errorf("after re-running %s: %s quoted rows, want none", stage, got[0])
		}
		if stage == "aggregate" {
			// The confidences, read again when the items are done.
			if n := classifyOutputs(t, db); n != 30 {
				t.Errorf("after re-running aggregate: %d classify outputs, want 30 kept", n)
			}
		}
		storetest.Invariants(t, db)
		storetest.Finish(t, db)
		if now := queueQuery(t, u, quotesByItem); !sameQuotesBut(now, quotes, "q", "D03") {
			t.Errorf("quotes after re-running %s and finishing:\n%v\nbefore:\n%v", stage, now, quotes)
		}
		storetest.Invariants(t, db)
	}
	if after := storedCube(t, db); len(after.Cells) < len(cube.Cells) {
		t.Errorf("StoredCube after the re-runs: %d cells, %d before", len(after.Cells), len(cube.Cells))
	}

	// An edit of a field aggregate reads sends the item back to it: its
	// quote goes until it is done again, with the new rating.
	if _, err := db.Ingest([]pipeline.Record{storetest.Record("a00", "bug a000", "x", "7")}); err != nil {
		t.Fatal(err)
	}
	if got := queueQuery(t, u, `SELECT (key_id IS NULL)::text FROM output WHERE item_id = 'a00'`); !slices.Equal(got, []string{"true"}) {
		t.Errorf("a00's quote after its rating's edit: key_id IS NULL = %v, want true", got)
	}
	storetest.Invariants(t, db)
	storetest.Finish(t, db)
	if !quoteRated(storedCube(t, db), "a00", 7) {
		t.Error("a00's quote after its edit is done again does not carry its new rating 7")
	}
	storetest.Invariants(t, db)

	// A prune takes the row and its quote, and the cell's count.
	if _, err := db.Prune(func(id string) bool { return id != "a00" }, false); err != nil {
		t.Fatal(err)
	}
	if got := queueQuery(t, u, `SELECT item_id FROM output WHERE item_id = 'a00'`); len(got) != 0 {
		t.Errorf("a00's row after its prune: %v", got)
	}
	storetest.Invariants(t, db)
}

// sameQuotesBut reports whether two lists of quotesByItem are equal but
// for the quotes of items skip (done since), which a may have and b not.
func sameQuotesBut(a, b []string, skip ...string) bool {
	a = slices.DeleteFunc(slices.Clone(a), func(q string) bool {
		return slices.ContainsFunc(skip, func(id string) bool { return strings.HasPrefix(q, id+":") })
	})
	return slices.Equal(a, b)
}

// classifyOutputs counts the rows of outputs with a classify entry.
func classifyOutputs(t *testing.T, db *DB) int {
	t.Helper()
	rows, _ := db.pool.Query(context.Background(), `SELECT data FROM output`)
	n := 0
	var row []byte
	if _, err := pgx.ForEachRow(rows, []any{&row}, func() error {
		out, err := outputAt(row, db.index[confStage])
		if out != nil {
			n++
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// quoteRated reports whether c holds a quote of item id with rating r.
func quoteRated(c pipeline.StoredCube, id string, r float64) bool {
	for _, cell := range c.Cells {
		for _, q := range cell.Quotes {
			if q.ID == id {
				return q.Rating != nil && *q.Rating == r
			}
		}
	}
	return false
}

// TestDB_QuotesReadThroughTheirIndex: StoredCube's read of the best
// quotes walks output_quote, whose predicate (key_id IS NOT NULL) the
// planner must prove from the join; a seq scan of output per cell would
// read every row of a million-item pipeline for each of hundreds of
// cells.
func TestDB_QuotesReadThroughTheirIndex(t *testing.T) {
	ctx := context.Background()
	db, u := openNew(t, Options{})
	quoteItems(t, db)
	conn := connect(t, u)
	defer conn.Close(ctx)
	// A few dozen rows: a seq scan would win on cost alone. With it
	// costed out the planner still takes it when it cannot prove the
	// partial index's predicate, which is what this guards.
	if _, err := conn.Exec(ctx, `SET search_path = `+DefaultSchema+`; ANALYZE; SET enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, `EXPLAIN `+readCubeQuotesSQL, pipeline.CubeQuotes)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(plan, "\n"), "output_quote") {
		t.Errorf("the best quotes are not read through output_quote:\n%s", strings.Join(plan, "\n"))
	}
	_ = db
}

// migrateChildEnv makes the test binary a process that opens the
// pipeline at its URL writable, so migrating it (see TestMain), until
// SIGKILLed.
const migrateChildEnv = "SAWTOOTH_PG_TEST_MIGRATE_URL"

func migrateChild(url string) int {
	db, err := Open(context.Background(), url, Options{Stages: storetest.Stages})
	if err == nil {
		db.Close()
	}
	fmt.Println("opened:", err)
	return 0
}

// TestMigrate_KilledDuringQuoteStep: the process migrating a schema-15
// pipeline is SIGKILLed in step 16, after it built the new output, while
// it waits to drop cube_quote (a reader holds it): while the reader
// still holds it, the server's check of the client ends the backend (a
// killed migration does not keep the schema lock every open waits on),
// and the migration's transaction rolls back whole. The pipeline is at
// schema 15 with its cube_quote and its output without quote columns,
// exports the same, and migrates on the next open.
func TestMigrate_KilledDuringQuoteStep(t *testing.T) {
	ctx := context.Background()
	u, exported, quotes := schema15Pipeline(t)
	gate := holdCubeQuote(t, u)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), migrateChildEnv+"="+u)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Sessions are read on a connection of their own: within the gate's
	// transaction pg_stat_activity is the snapshot of its first read.
	watch := connect(t, u)
	defer watch.Close(ctx)
	var pid int
	for deadline := time.Now().Add(time.Minute); pid == 0; {
		if err := watch.QueryRow(ctx, `SELECT coalesce(max(pid), 0) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%output_unquoted%'`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		if pid == 0 && time.Now().After(deadline) {
			t.Fatal("the migration never waited in step 16")
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if out.Len() > 0 {
		t.Fatalf("the migrating process ended before its kill: %s", out.String())
	}
	waitBackendGone(t, watch, pid, "the killed migration's backend still waits to drop cube_quote, holding the schema lock")
	if _, err := gate.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}

	migratesAsBefore(t, u, exported, quotes)
}

// schema15Pipeline is a drained pipeline of quoteItems set back to
// schema 15 and closed: its url, its exports and its quotes by item.
func schema15Pipeline(t *testing.T) (u, exported string, quotes []string) {
	t.Helper()
	db, u := openNew(t, Options{})
	quoteItems(t, db)
	exported = exports(t, db)
	quotes = queueQuery(t, u, quotesByItem)
	db.Close()
	downgrade(t, u, 15)
	return u, exported, quotes
}

// holdCubeQuote opens a transaction that has read cube_quote, so a
// migration's step 16 waits for its lock to drop the table. Its
// connection closes when t ends.
func holdCubeQuote(t *testing.T, u string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	gate := connect(t, u)
	t.Cleanup(func() { gate.Close(ctx) })
	if _, err := gate.Exec(ctx, `BEGIN; SELECT count(*) FROM `+DefaultSchema+`.cube_quote`); err != nil {
		t.Fatal(err)
	}
	return gate
}

// migratesAsBefore checks that the pipeline at u, left at schema 15 by
// an interrupted migration, migrates on its next open with the quotes
// and exports it had.
func migratesAsBefore(t *testing.T, u, exported string, quotes []string) {
	t.Helper()
	schema15Intact(t, u)
	db := openMigrated(t, u)
	if now := queueQuery(t, u, quotesByItem); !slices.Equal(now, quotes) {
		t.Errorf("quotes after the second migration:\n%v\nbefore:\n%v", now, quotes)
	}
	sameExports(t, db, exported)
	storetest.Invariants(t, db)
}

// schema15Intact fails t unless the pipeline at u is as downgrades[15]
// left it: version 15, its 30 quote rows in cube_quote, output without
// the quote columns, no table left by step 16.
func schema15Intact(t *testing.T, u string) {
	t.Helper()
	if v := storedVersion(t, u); v != "15" {
		t.Errorf("schema version after the failed migration: %s, want 15", v)
	}
	if n := queueQuery(t, u, `SELECT count(*)::text FROM cube_quote`); n[0] != "30" {
		t.Errorf("cube_quote after the failed migration holds %s rows, want 30", n[0])
	}
	if got := queueQuery(t, u, `SELECT attname::text FROM pg_attribute WHERE attrelid = '`+DefaultSchema+`.output'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`); !slices.Equal(got, []string{"item_id", "data"}) {
		t.Errorf("output's columns after the failed migration: %v, want item_id, data", got)
	}
	if got := queueQuery(t, u, `SELECT (to_regclass('`+DefaultSchema+`.output_unquoted') IS NULL)::text`); got[0] != "true" {
		t.Error("output_unquoted is left after the failed migration")
	}
}
