package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sawtooth-dev/sawtooth/report"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// compactItems fills a pipeline as a night leaves it: most items done,
// a few dead, a few still queued, every done item's row of outputs
// written once per stage.
func compactItems(t testing.TB, db *DB) {
	t.Helper()
	ingestN(t, db, 600)
	storetest.Advance(t, db, "sanitize", "i00007", "i00100")
	storetest.Advance(t, db, "classify", "i00011")
	storetest.Advance(t, db, "aggregate")
	ingestN(t, db, 620) // 20 new ones, queued at sanitize
}

// exportAll is `export --all` as JSON Lines.
func exportAll(t testing.TB, db *DB) string {
	t.Helper()
	var b bytes.Buffer
	if err := report.Export(&b, db, report.ExportOptions{Format: report.FormatJSONL}); err != nil {
		t.Fatalf("export: %v", err)
	}
	if b.Len() == 0 {
		t.Fatal("export wrote nothing")
	}
	return b.String()
}

// filenode is where table's rows are on disk: a rewrite gives it a new one.
func filenode(t testing.TB, url, table string) int64 {
	t.Helper()
	conn := connect(t, url)
	defer conn.Close(context.Background())
	var n int64
	if err := conn.QueryRow(context.Background(), `SELECT pg_relation_filenode($1::regclass)::int8`, DefaultSchema+"."+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDB_Compact: every table of the schema is rewritten, the schema is
// smaller after a drain, and what the pipeline holds is what it held.
func TestDB_Compact(t *testing.T) {
	db, u := openNew(t, Options{})
	compactItems(t, db)
	before := exportAll(t, db)
	outputNode := filenode(t, u, "output")
	st, err := db.Compact(context.Background(), CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.After >= st.Before || st.After <= 0 {
		t.Errorf("schema %d -> %d bytes: want smaller after a drain", st.Before, st.After)
	}
	seen := map[string]TableSpace{}
	var sum int64
	for _, ts := range st.Tables {
		seen[ts.Name] = ts
		sum += ts.After
	}
	for _, table := range []string{"output", "item", "todo", "cube_key", "dead", "history", "meta", "worker_session"} {
		if _, ok := seen[table]; !ok {
			t.Errorf("table %s not rewritten (rewrote %v)", table, st.Tables)
		}
	}
	if sum != st.After {
		t.Errorf("tables sum to %d bytes after, the schema %d", sum, st.After)
	}
	if o := seen["output"]; o.After >= o.Before {
		t.Errorf("output %d -> %d bytes: its rows were written three times each, want smaller", o.Before, o.After)
	}
	if filenode(t, u, "output") == outputNode {
		t.Error("output was not rewritten: same file node")
	}
	if after := exportAll(t, db); after != before {
		t.Errorf("export --all after compact differs:\n%s\nwant\n%s", after, before)
	}
	storetest.Invariants(t, db)
	// The queue still works after its rewrite.
	storetest.Finish(t, db)
	storetest.Invariants(t, db)
}

// TestDB_CompactRefusesWhenBusy: a live worker, another compact, or a
// reader holding a table past the lock timeout make Compact stop with
// ErrBusy and a message that names them, rewriting nothing after it.
func TestDB_CompactRefusesWhenBusy(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// busy makes the pipeline at url busy until the test ends.
		busy func(t *testing.T, url string)
		// want is in the message; wantTables is what was rewritten first.
		want       []string
		wantTables int
		refused    bool
	}{
		{
			name: "live worker",
			busy: func(t *testing.T, url string) {
				if err := worker(t, url, "host-b:42").BeginSession(ctx, time.Minute); err != nil {
					t.Fatal(err)
				}
			},
			want:    []string{"1 worker session is live (host-b:42)", "nothing was rewritten", "when they have finished or been stopped"},
			refused: true,
		},
		{
			name: "dead worker",
			busy: func(t *testing.T, url string) {
				if err := worker(t, url, "host-c:7").BeginSession(ctx, time.Minute); err != nil {
					t.Fatal(err)
				}
				sql(t, url, `UPDATE worker_session SET beat_at = now() - interval '2 hours'`)
			},
		},
		{
			name: "another compact",
			busy: func(t *testing.T, url string) {
				conn := connect(t, url)
				t.Cleanup(func() { conn.Close(ctx) })
				if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext($1))`, compactLockPrefix+DefaultSchema); err != nil {
					t.Fatal(err)
				}
			},
			want:    []string{"another sawtooth compact is rewriting it"},
			refused: true,
		},
		{
			name: "reader holds a table",
			busy: func(t *testing.T, url string) {
				conn := connect(t, url)
				t.Cleanup(func() { conn.Close(ctx) })
				if _, err := conn.Exec(ctx, `SET application_name = 'status reader'`); err != nil {
					t.Fatal(err)
				}
				if _, err := conn.Exec(ctx, `BEGIN; SELECT count(*) FROM `+DefaultSchema+`.item`); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"table item is in use", "not granted within 200ms", "(status reader, idle in transaction)",
				"rewritten before it: answer, answer_flight, batch_job", "run compact again"},
			wantTables: 8, // answer .. history, by name (cube_quote went at schema step 16, field_name came at 18)
			refused:    true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, u := openNew(t, Options{})
			compactItems(t, db)
			before := exportAll(t, db)
			itemNode := filenode(t, u, "item")
			tc.busy(t, u)
			st, err := db.Compact(ctx, CompactOptions{LockTimeout: 200 * time.Millisecond})
			if !tc.refused {
				if err != nil || len(st.Tables) == 0 {
					t.Fatalf("Compact = %+v, %v; want it done", st, err)
				}
				return
			}
			if !errors.Is(err, ErrBusy) {
				t.Fatalf("Compact = %v, want ErrBusy", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if len(st.Tables) != tc.wantTables {
				t.Errorf("rewrote %v before the refusal, want %d tables", st.Tables, tc.wantTables)
			}
			if filenode(t, u, "item") != itemNode {
				t.Error("item was rewritten though Compact refused before it")
			}
			if after := exportAll(t, db); after != before {
				t.Errorf("export --all after a refused compact differs")
			}
			storetest.Invariants(t, db)
		})
	}
}

// gateKey is the advisory lock the tests that end a compact half way
// hold to stop its rewrite of output there.
const gateKey = 31031

// gateOutput adds to output an index whose expression waits for gateKey:
// a rewrite of output builds it after writing the new heap, and waits
// there while the returned connection holds the key.
func gateOutput(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	sql(t, url, `CREATE FUNCTION public.compact_gate(id text) RETURNS text LANGUAGE plpgsql IMMUTABLE AS
		$$BEGIN PERFORM pg_catalog.pg_advisory_xact_lock_shared(`+strconv.Itoa(gateKey)+`); RETURN id; END$$;
		CREATE INDEX output_gate ON output (public.compact_gate(item_id))`)
	gate := connect(t, url)
	t.Cleanup(func() { gate.Close(context.Background()) })
	if _, err := gate.Exec(context.Background(), `SELECT pg_advisory_lock(`+strconv.Itoa(gateKey)+`)`); err != nil {
		t.Fatal(err)
	}
	return gate
}

// gatedCompact waits for a compact's backend to wait at the gate in its
// rewrite of output, and returns its pid.
func gatedCompact(t *testing.T, gate *pgx.Conn) int {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		var pid int
		err := gate.QueryRow(context.Background(), `SELECT coalesce(max(pid), 0) FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event = 'advisory' AND query LIKE 'VACUUM (FULL, ANALYZE) %"output"'`, compactAppName).Scan(&pid)
		if err != nil {
			t.Fatal(err)
		}
		if pid != 0 {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatal("the compact never reached the rewrite of output")
		}
	}
}

// TestDB_CompactTerminated: the server ends the compact's backend while it
// rewrites output (its new heap written, its indexes being built): the
// table stays as it was, the pipeline checks clean and exports the same,
// and a second compact completes.
func TestDB_CompactTerminated(t *testing.T) {
	ctx := context.Background()
	db, u, gate, outputNode, before := gatedPipeline(t)
	done := make(chan error, 1)
	var st CompactStats
	go func() {
		var err error
		st, err = db.Compact(ctx, CompactOptions{})
		done <- err
	}()
	pid := gatedCompact(t, gate)
	if _, err := gate.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "rewrite table output") {
		t.Fatalf("Compact of a terminated backend = %v, want the failed rewrite of output", err)
	}
	if len(st.Tables) == 0 || st.Tables[len(st.Tables)-1].Name >= "output" {
		t.Errorf("rewrote %v before output, want the tables before it by name", st.Tables)
	}
	afterInterruptedCompact(t, db, u, gate, outputNode, before, "terminated")
}

// gatedPipeline opens a pipeline of compactItems whose output's rewrite
// will wait at gate (gateOutput), with output's file node and export
// --all before any compact.
func gatedPipeline(t *testing.T) (db *DB, u string, gate *pgx.Conn, outputNode int64, before string) {
	t.Helper()
	db, u = openNew(t, Options{})
	compactItems(t, db)
	before = exportAll(t, db)
	gate = gateOutput(t, u)
	return db, u, gate, filenode(t, u, "output"), before
}

// afterInterruptedCompact checks what a compact ended in its rewrite of
// output (held there by gate) left: output as it was (the same file
// node), Check clean, export --all as before; and that once the gate
// opens a second compact rewrites output and changes nothing exported.
func afterInterruptedCompact(t *testing.T, db *DB, u string, gate *pgx.Conn, outputNode int64, before, how string) {
	t.Helper()
	ctx := context.Background()
	if filenode(t, u, "output") != outputNode {
		t.Error("output's rewrite was not rolled back: a new file node")
	}
	if problems, err := db.Check(); err != nil || len(problems) > 0 {
		t.Fatalf("Check after the %s compact: %v, %v", how, problems, err)
	}
	if after := exportAll(t, db); after != before {
		t.Errorf("export --all after a %s compact differs", how)
	}
	storetest.Invariants(t, db)
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_unlock(`+strconv.Itoa(gateKey)+`)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Compact(ctx, CompactOptions{}); err != nil {
		t.Fatalf("a second compact: %v", err)
	}
	if filenode(t, u, "output") == outputNode {
		t.Error("the second compact did not rewrite output")
	}
	if after := exportAll(t, db); after != before {
		t.Errorf("export --all after the second compact differs")
	}
	storetest.Invariants(t, db)
}

// compactChildEnv makes the test binary a process that compacts the
// pipeline at its URL (see TestMain), until SIGKILLed.
const compactChildEnv = "SAWTOOTH_PG_TEST_COMPACT_URL"

func compactChild(url string) int {
	db, err := Open(context.Background(), url, Options{Stages: storetest.Stages})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	// The gate is a lock, which the lock timeout would end: an hour
	// leaves the server's check of the client alone to end the backend.
	_, err = db.Compact(context.Background(), CompactOptions{LockTimeout: time.Hour})
	fmt.Println("compacted:", err)
	return 0
}

// TestDB_CompactKilled: the process running Compact is SIGKILLed while
// its backend rewrites output: the server notices the client gone and
// ends the backend on its own (a killed compact does not keep a table
// locked), the rewrite rolls back, the pipeline checks clean and exports
// the same, and a second compact completes.
func TestDB_CompactKilled(t *testing.T) {
	db, u, gate, outputNode, before := gatedPipeline(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), compactChildEnv+"="+u)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := gatedCompact(t, gate)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if out.Len() > 0 {
		t.Fatalf("the compact process ended before its kill: %s", out.String())
	}
	// The gate is still held: only the server's check of the client ends
	// the backend.
	waitBackendGone(t, gate, pid, "the killed compact's backend still waits in its rewrite of output, holding the table's lock")
	afterInterruptedCompact(t, db, u, gate, outputNode, before, "killed")
}

// TestDB_CompactKeepsWorkersOut: while a compact rewrites output, a worker
// that opens the pipeline waits in its open for the compact to end,
// before it could claim anything; and a worker already open that begins
// a session meanwhile makes the compact stop before its next table.
func TestDB_CompactKeepsWorkersOut(t *testing.T) {
	ctx := context.Background()
	db, u := openNew(t, Options{})
	compactItems(t, db)
	before := exportAll(t, db)
	early := worker(t, u, "host-d:1") // opened before the compact, no session yet
	gate := gateOutput(t, u)
	done := make(chan error, 1)
	var st CompactStats
	go func() {
		var err error
		st, err = db.Compact(ctx, CompactOptions{LockTimeout: time.Hour})
		done <- err
	}()
	gatedCompact(t, gate)

	opened := make(chan error, 1)
	var late *DB
	go func() {
		var err error
		late, err = Open(ctx, u, Options{Stages: storetest.Stages, Owner: "host-e:2"})
		opened <- err
	}()
	// The late open waits on the schema lock the compact holds.
	for deadline := time.Now().Add(time.Minute); ; {
		var n int
		if err := gate.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event = 'advisory' AND query LIKE '%pg_advisory_xact_lock%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case err := <-opened:
			t.Fatalf("a worker opened the pipeline during the compact (err %v); want it to wait", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the late open never waited on the schema lock")
		}
	}
	if err := early.BeginSession(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_unlock(`+strconv.Itoa(gateKey)+`)`); err != nil {
		t.Fatal(err)
	}
	err := <-done
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "1 worker session is live (host-d:1)") {
		t.Fatalf("Compact with a session begun during it = %v, want ErrBusy naming host-d:1", err)
	}
	if n := len(st.Tables); n == 0 || st.Tables[n-1].Name != "output" {
		t.Errorf("rewrote %v, want the tables up to output and none after", st.Tables)
	}
	if err := <-opened; err != nil {
		t.Fatalf("the late open after the compact: %v", err)
	}
	late.Close()
	if after := exportAll(t, db); after != before {
		t.Errorf("export --all after the compact differs")
	}
	storetest.Invariants(t, db)
}

// waitBackendGone waits up to a minute, reading on conn, for the server
// backend pid to end, and fails t with stuck if it does not.
func waitBackendGone(t *testing.T, conn *pgx.Conn, pid int, stuck string) {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(time.Minute); ; {
		var alive bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive); err != nil {
			t.Fatal(err)
		}
		if !alive {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(stuck)
		}
	}
}

// TestCompactError_diskFull: a rewrite the server's disk had no room for
// says how much it needed and that its table is as it was, and keeps the
// server's error.
func TestCompactError_diskFull(t *testing.T) {
	db := &DB{schema: "sawtooth", path: "postgres://h/d"}
	full := &pgconn.PgError{Code: "53100", Message: `could not extend file "base/16384/16500": No space left on device`}
	done := CompactStats{Tables: []TableSpace{{Name: "answer", Before: 3e6, After: 1e6}}}
	err := db.compactError(context.Background(), TableSpace{Name: "item", Before: 199.7e6}, time.Second, done, full)
	for _, want := range []string{"rewrite table item: the server's disk is full", "about 199.7 MB at most, and its WAL and sort files on top", "table item is as it was; rewritten before it: answer",
		"No space left on device", "free space on the server's disk, then run compact again"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	if !errors.Is(err, full) || errors.Is(err, ErrBusy) {
		t.Errorf("%v: want the server's error, not ErrBusy", err)
	}
}
