package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// queueIndexes is the size of the queue's indexes and the file of its
// primary key (a rebuilt index gets a new one).
func queueIndexes(t testing.TB, url string) (size int64, file uint32) {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT pg_indexes_size($1::regclass), pg_relation_filenode($2::regclass)`,
		DefaultSchema+".todo", DefaultSchema+".todo_pkey").Scan(&size, &file); err != nil {
		t.Fatal(err)
	}
	return size, file
}

// drain claims and commits every item through every stage.
func drain(t testing.TB, db *DB) {
	t.Helper()
	for _, st := range []string{"sanitize", "classify", "aggregate"} {
		for {
			cs := claim(t, db, st, 500)
			if len(cs) == 0 {
				break
			}
			var ts []pipeline.FencedTransition
			for _, c := range cs {
				ts = append(ts, fenced(st, c))
			}
			if _, err := db.CommitFenced(context.Background(), ts); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestDB_EndSessionShrinksADrainedQueue: a worker ending its session on
// a drained queue gives back the pages its indexes grew to; one ending
// it while items are queued, or while another worker writes to the
// queue, leaves the queue's indexes as they are.
func TestDB_EndSessionShrinksADrainedQueue(t *testing.T) {
	for _, tc := range []struct {
		name   string
		queued bool // an item is left queued
		writer bool // another transaction holds a queue row
		shrunk bool
	}{
		{"drained", false, false, true},
		{"an item queued", true, false, false},
		{"a writer in the queue", false, true, false},
		{"workers leaving at once", false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, u := openNew(t, Options{Owner: "w"})
			ingestN(t, db, 10000)
			beginSession(t, db)
			drain(t, db)
			if tc.queued {
				if _, err := db.Ingest([]pipeline.Record{storetest.Record("new", "bug new", "x", "1")}); err != nil {
					t.Fatal(err)
				}
			}
			ctx := context.Background()
			if tc.writer {
				conn, err := pgx.Connect(ctx, u)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(ctx)
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(ctx)
				if _, err := tx.Exec(ctx, `UPDATE `+DefaultSchema+`.todo SET attempt = attempt WHERE false`); err != nil {
					t.Fatal(err)
				}
			}
			before, file := queueIndexes(t, u)
			if before <= shrinkFloor {
				t.Fatalf("the drained queue's indexes hold %d bytes, no more than the floor %d", before, shrinkFloor)
			}
			ending := []*DB{db}
			if tc.name == "workers leaving at once" {
				for i := range 3 {
					w := worker(t, u, fmt.Sprint("w", i))
					beginSession(t, w)
					ending = append(ending, w)
				}
			}
			errs := make(chan error, len(ending))
			for _, w := range ending {
				go func() { errs <- w.EndSession(ctx) }()
			}
			for range ending {
				if err := <-errs; err != nil {
					t.Fatalf("EndSession: %v", err)
				}
			}
			after, fileAfter := queueIndexes(t, u)
			if shrunk := fileAfter != file; shrunk != tc.shrunk || tc.shrunk && after > 64<<10 {
				t.Errorf("the queue's indexes: %d -> %d bytes, rebuilt %v; want rebuilt %v", before, after, shrunk, tc.shrunk)
			}
		})
	}
}

// TestDB_EndSessionBesideAReadThenWrite: a worker ending its session on
// a drained queue while a transaction that has read the queue is about
// to write to it (an ingest looks at the queue, then queues its items)
// waits for that transaction, and neither fails: the rebuild held the
// queue's table lock while it waited for the reader's index lock, and
// the reader's write waited for the table: a deadlock, the rebuild its
// victim and EndSession's error.
func TestDB_EndSessionBesideAReadThenWrite(t *testing.T) {
	db, u := openNew(t, Options{Owner: "w"})
	ingestN(t, db, 10000)
	beginSession(t, db)
	drain(t, db)
	_, file := queueIndexes(t, u)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT seq FROM `+DefaultSchema+`.todo WHERE seq = 1`); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- db.EndSession(ctx) }()
	waitForALockWait(t, u)
	if _, err := tx.Exec(ctx, `UPDATE `+DefaultSchema+`.todo SET attempt = attempt WHERE false`); err != nil {
		t.Fatalf("the reader's write: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-ended; err != nil {
		t.Fatalf("EndSession: %v", err)
	}
	if _, fileAfter := queueIndexes(t, u); fileAfter == file {
		t.Error("the drained queue's indexes were not rebuilt once the reader was done")
	}
}

// waitForALockWait returns once a session of the database at url waits
// for a lock.
func waitForALockWait(t testing.TB, url string) {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, url)
	defer conn.Close(ctx)
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
