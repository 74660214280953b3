package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// explain returns the plan PostgreSQL chooses for stmt with args in the
// pipeline at url.
func explain(t *testing.T, url, stmt string, args ...any) string {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET search_path = "+DefaultSchema); err != nil {
		t.Fatal(err)
	}
	rows, _ := conn.Query(ctx, "EXPLAIN "+stmt, args...)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", stmt, err)
	}
	return strings.Join(lines, "\n")
}

// TestDB_QueuePlansWalkTheIndexes: the statements a fleet runs for every
// batch find their queue rows through an index whatever the queue's
// size, on a queue just ingested (its statistics are taken at ingest)
// and on one whose entries moved on since: a plan that reads the whole
// queue (a sequential or bitmap scan of todo, to sort it or hash it)
// makes each claim or commit cost in proportion to the backlog.
func TestDB_QueuePlansWalkTheIndexes(t *testing.T) {
	db, u := openNew(t, Options{Owner: "a"})
	const n = 5000
	ingestN(t, db, n)
	// Half the items move on to the next stage, as a run would leave them.
	var ts []pipeline.FencedTransition
	for _, c := range claim(t, db, "sanitize", n/2) {
		ts = append(ts, fenced("sanitize", c))
	}
	if rej, err := db.CommitFenced(context.Background(), ts); err != nil || len(rej) > 0 {
		t.Fatalf("commit: %d rejected, %v", len(rej), err)
	}
	seqs, stages, ids, attempts := make([]int64, 256), make([]int16, 256), make([]string, 256), make([]int64, 256)
	for i := range seqs {
		seqs[i], ids[i], attempts[i] = int64(n+i), "i00000", 1
	}
	tests := []struct {
		name string
		stmt string
		args []any
	}{
		{"claim at the first stage", claimSQL, []any{0, 256, "a", testLease.Microseconds(), int64(1)}},
		{"claim at the second stage", claimSQL, []any{1, 256, "a", testLease.Microseconds(), int64(1)}},
		{"renew", `WITH l AS (` + leasedSQL + `) UPDATE todo t SET visible_at = ` + leaseSQL(4) + ` FROM l WHERE t.seq = l.seq RETURNING t.seq`,
			[]any{0, seqs, attempts, testLease.Microseconds()}},
		{"fenced delete of a commit", deleteClaimedSQL, []any{seqs, stages, ids, attempts}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := explain(t, u, tt.stmt, tt.args...)
			for _, bad := range []string{"Seq Scan on todo", "Bitmap Heap Scan on todo"} {
				if strings.Contains(plan, bad) {
					t.Errorf("plan reads the whole queue (%s):\n%s", bad, plan)
				}
			}
		})
	}
}

// TestDB_CountQueued counts the entries queued at the stages asked,
// leased or not, and refuses an unknown stage.
func TestDB_CountQueued(t *testing.T) {
	db, _ := openNew(t, Options{Owner: "a"})
	ingestN(t, db, 10)
	cs := claim(t, db, "sanitize", 4)
	ts := []pipeline.FencedTransition{fenced("sanitize", cs[0]), fenced("sanitize", cs[1])}
	if rej, err := db.CommitFenced(context.Background(), ts); err != nil || len(rej) > 0 {
		t.Fatalf("commit: %d rejected, %v", len(rej), err)
	}
	// 8 at sanitize (2 of them leased), 2 at classify.
	tests := []struct {
		stages []string
		want   int
	}{
		{[]string{"sanitize"}, 8},
		{[]string{"classify"}, 2},
		{[]string{"sanitize", "classify"}, 10},
		{[]string{"aggregate"}, 0},
		{nil, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.stages), func(t *testing.T) {
			got, err := db.CountQueued(context.Background(), tt.stages)
			if err != nil || got != tt.want {
				t.Errorf("CountQueued(%v) = %d, %v; want %d", tt.stages, got, err, tt.want)
			}
		})
	}
	if _, err := db.CountQueued(context.Background(), []string{"classfy"}); err == nil || !strings.Contains(err.Error(), "classfy") {
		t.Errorf("CountQueued of an unknown stage: %v, want an error naming it", err)
	}
}

// TestDB_ClaimsStayOnTheirPage: a claim's new row version finds room on
// its page (a HOT update: no index entry added), in a new pipeline and in
// one migrated from schema 6, whose queue pages were filled to 80% and
// where most claims wrote their rows to other pages and every index.
func TestDB_ClaimsStayOnTheirPage(t *testing.T) {
	for _, migrated := range []bool{false, true} {
		t.Run(fmt.Sprintf("migrated=%v", migrated), func(t *testing.T) {
			db, u := openNew(t, Options{Owner: "a"})
			if migrated {
				db.Close()
				sql(t, u, downgradeRows+downgradeHash+`DROP TABLE cube_cell, cube_quote, cube_key; ALTER TABLE todo SET (fillfactor = 80); ALTER TABLE todo DROP COLUMN batch_sends; UPDATE meta SET value = '6' WHERE key = 'schema'`)
			}
			// A long owner name (a host:pid) makes each claimed version
			// longer than the row it replaces.
			db = worker(t, u, "worker-17.eu-west-1.compute.internal:4194304")
			if got := queueQuery(t, u, `SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = 'todo'::regclass`); !strings.Contains(got[0], "fillfactor=30") {
				t.Fatalf("queue table options %q: want fillfactor=30", got[0])
			}
			const n = 2000
			ingestN(t, db, n)
			const pages = `SELECT seq || ':' || (ctid::text::point)[0] FROM todo ORDER BY seq`
			before := queueQuery(t, u, pages)
			if len(claim(t, db, "sanitize", n)) != n {
				t.Fatalf("claimed fewer than %d", n)
			}
			after := queueQuery(t, u, pages)
			moved := 0
			for i := range before {
				if before[i] != after[i] {
					moved++
				}
			}
			if len(after) != n || moved > 0 {
				t.Errorf("%d of %d claimed rows left their page (%d rows after): their claims added an entry to every index of the queue", moved, n, len(after))
			}
		})
	}
}

// queueQuery runs query in the pipeline at url and returns its one
// text column.
func queueQuery(t *testing.T, url, query string) []string {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET search_path = "+DefaultSchema); err != nil {
		t.Fatal(err)
	}
	rows, _ := conn.Query(ctx, query)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return out
}
