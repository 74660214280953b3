package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

const testHeartbeat = 10 * testLease / 60 // 10 s: well inside testLease

// killSessions ends every session's life on the database's clock, as a
// heartbeat's timeout passing without a beat would: each is last beaten
// a second ago with a timeout of a microsecond (a server restart counts
// as a beat, so aging beat_at alone would not do on a young server).
func killSessions(t testing.TB, url string) {
	t.Helper()
	sql(t, url, `UPDATE worker_session SET timeout_us = 1, beat_at = now() - interval '1 second'`)
}

func beginSession(t testing.TB, db *DB) {
	t.Helper()
	if err := db.BeginSession(context.Background(), testHeartbeat); err != nil {
		t.Fatal(err)
	}
}

// TestSession_DeadWorkersClaimsReturnBeforeTheirLease: a worker's claims
// hold while its session lives, whatever another worker asks; once its
// session is dead they are claimable at the next attempt although their
// leases run on, the new holder commits, and the dead worker (only
// paused) can neither beat, renew nor commit.
func TestSession_DeadWorkersClaimsReturnBeforeTheirLease(t *testing.T) {
	a, u := openNew(t, Options{Owner: "a"})
	b := worker(t, u, "b")
	beginSession(t, a)
	beginSession(t, b)
	ingestN(t, a, 5)
	held := claim(t, a, "sanitize", 3)
	if err := a.Beat(context.Background()); err != nil {
		t.Fatalf("beat of a live session: %v", err)
	}
	if cs := claim(t, b, "sanitize", 10); len(cs) != 2 {
		t.Fatalf("while a's session lives, b claimed %d entries, want the 2 a does not hold", len(cs))
	}
	hs, err := a.Holders(context.Background())
	if err != nil || len(hs) != 2 {
		t.Fatalf("Holders = %+v, %v; want a and b", hs, err)
	}

	killSessions(t, u)
	if hs, err := a.Holders(context.Background()); err != nil || len(hs) != 0 {
		t.Fatalf("Holders after every session died = %+v, %v; want none", hs, err)
	}
	// b's own claims are claimable too (its session is as dead): it
	// begins a new session, as its runner would, and takes all five.
	if err := b.Beat(context.Background()); !errors.Is(err, pipeline.ErrSessionGone) {
		t.Fatalf("beat of a dead session: %v, want ErrSessionGone", err)
	}
	beginSession(t, b)
	again := claim(t, b, "sanitize", 10)
	if len(again) != 5 {
		t.Fatalf("after the sessions died, b claimed %d of 5 (their leases still run)", len(again))
	}
	for _, c := range again {
		if c.Attempt != 2 {
			t.Fatalf("reclaimed %+v: attempt %d, want 2", c.Seq, c.Attempt)
		}
	}

	// a comes back: its session stays dead, its leases are lost, its
	// answers are fenced off; b's commit is applied.
	if err := a.Beat(context.Background()); !errors.Is(err, pipeline.ErrSessionGone) {
		t.Fatalf("a's beat after it was taken for dead: %v, want ErrSessionGone", err)
	}
	if lost, err := a.Renew(context.Background(), "sanitize", held, testLease); err != nil || len(lost) != 3 {
		t.Fatalf("a's renewal: lost %v, %v; want its 3", lost, err)
	}
	var late, fresh []pipeline.FencedTransition
	for _, c := range held {
		late = append(late, fenced("sanitize", c))
	}
	for _, c := range again {
		fresh = append(fresh, fenced("sanitize", c))
	}
	if rej, err := a.CommitFenced(context.Background(), late); err != nil || len(rej) != 3 {
		t.Fatalf("a's late commit: rejected %v, %v; want all 3 fenced off", rej, err)
	}
	if rej, err := b.CommitFenced(context.Background(), fresh); err != nil || len(rej) != 0 {
		t.Fatalf("b's commit: rejected %v, %v", rej, err)
	}
	storetest.Invariants(t, a)
}

// TestSession_EndedAndMissingSessions: a clean shutdown deletes every
// session its handle began, and their claims are claimable at once; a handle without a session claims for its lease
// alone, as before sessions.
func TestSession_EndedAndMissingSessions(t *testing.T) {
	a, u := openNew(t, Options{Owner: "a"})
	b := worker(t, u, "b")
	ingestN(t, a, 4)
	claim(t, a, "sanitize", 2) // no session: the lease holds
	beginSession(t, b)
	killSessions(t, u)
	beginSession(t, b) // the dead one is b's too
	if cs := claim(t, b, "sanitize", 10); len(cs) != 2 {
		t.Fatalf("claimed %d beside claims made without a session, want 2", len(cs))
	}
	if err := b.EndSession(context.Background()); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := a.pool.QueryRow(context.Background(), `SELECT count(*) FROM worker_session`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d sessions left after b ended its own, dead and live (%v)", left, err)
	}
	if err := b.EndSession(context.Background()); err != nil {
		t.Fatalf("a second EndSession: %v", err)
	}
	if cs := claim(t, a, "sanitize", 10); len(cs) != 2 {
		t.Fatalf("after b's session ended, a claimed %d of its 2", len(cs))
	}
	if err := b.Beat(context.Background()); !errors.Is(err, pipeline.ErrSessionGone) {
		t.Fatalf("beat after EndSession: %v, want ErrSessionGone", err)
	}
	if err := b.BeginSession(context.Background(), 0); err == nil {
		t.Fatal("a session with no timeout was begun")
	}
}

// TestSession_DeadWorkersFlightIsTakenOver: the answer flight of a dead
// worker ends with its session, so the worker that reclaims its item
// buys the answer without waiting for the flight's lease.
func TestSession_DeadWorkersFlightIsTakenOver(t *testing.T) {
	a, u := openNew(t, Options{Owner: "a"})
	b := worker(t, u, "b")
	beginSession(t, a)
	beginSession(t, b)
	ctx := context.Background()
	if ok, err := a.TakeFlight(ctx, "classify", "k", testLease); err != nil || !ok {
		t.Fatalf("a's flight: %v, %v", ok, err)
	}
	if ok, err := b.TakeFlight(ctx, "classify", "k", testLease); err != nil || ok {
		t.Fatalf("b took a live worker's flight: %v, %v", ok, err)
	}
	sql(t, u, `UPDATE worker_session SET timeout_us = 1, beat_at = now() - interval '1 second' WHERE owner = 'a'`)
	if ok, err := b.TakeFlight(ctx, "classify", "k", testLease); err != nil || !ok {
		t.Fatalf("b could not take a dead worker's flight: %v, %v", ok, err)
	}
}

// TestSession_MigratesASchemaFromBeforeSessions: a pipeline written by
// a sawtooth at schema 4 (no sessions) is not migrated while a claim of
// its old worker holds (ErrLiveWorkers); once its lease ends it opens,
// and sessions work from then on.
func TestSession_MigratesASchemaFromBeforeSessions(t *testing.T) {
	old, u := openNew(t, Options{Owner: "old"})
	ingestN(t, old, 3)
	claim(t, old, "sanitize", 1)
	old.Close()
	sql(t, u, downgradeRows+downgradeHash+`DROP TABLE cube_cell, cube_quote, cube_key; DROP TABLE batch_job; DROP SEQUENCE batch_job_seq; ALTER TABLE todo DROP COLUMN batch, DROP COLUMN batch_sends; DROP TABLE worker_session; ALTER TABLE todo DROP COLUMN session; ALTER TABLE answer_flight DROP COLUMN session;
		UPDATE meta SET value = '4' WHERE key = 'schema'`)

	if _, err := Open(context.Background(), u, Options{Stages: storetest.Stages, Owner: "new"}); !errors.Is(err, ErrLiveWorkers) {
		t.Fatalf("open a schema-4 pipeline while the old worker's lease lasts: %v; want ErrLiveWorkers", err)
	}
	expireLeases(t, u)
	db, err := Open(context.Background(), u, Options{Stages: storetest.Stages, Owner: "new"})
	if err != nil {
		t.Fatalf("open a schema-4 pipeline: %v", err)
	}
	defer db.Close()
	beginSession(t, db)
	if cs := claim(t, db, "sanitize", 10); len(cs) != 3 {
		t.Fatalf("claimed %d once every lease ended, want 3", len(cs))
	}
	if err := db.Beat(context.Background()); err != nil {
		t.Fatal(err)
	}
	storetest.Invariants(t, db)
}

// TestSession_RestartGraceOnlyForTheLiving: a server restart counts as a
// beat only for the sessions alive when it went down. A session already
// dead before it (its claims maybe taken by another worker) never beats
// again, and its claims stay claimable, whatever the server's age. With a
// one-hour timeout the test server, started minutes ago, is within the
// grace a restart gives, so no restart is needed to see it.
func TestSession_RestartGraceOnlyForTheLiving(t *testing.T) {
	a, u := openNew(t, Options{Owner: "a"})
	b := worker(t, u, "b")
	ctx := context.Background()
	var age float64
	if err := a.pool.QueryRow(ctx, `SELECT extract(epoch FROM now() - pg_postmaster_start_time())`).Scan(&age); err != nil {
		t.Fatal(err)
	}
	if age > 50*60 {
		t.Skipf("the test server is %.0f s old: the restart's grace of an hour is over", age)
	}
	if err := a.BeginSession(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	ingestN(t, a, 2)
	claim(t, a, "sanitize", 2)
	// Dead for an hour before the server started.
	sql(t, u, `UPDATE worker_session SET beat_at = pg_postmaster_start_time() - interval '2 hours'`)
	if got := claim(t, b, "sanitize", 10); len(got) != 2 {
		t.Errorf("b claimed %d of a dead worker's 2 claims", len(got))
	}
	if err := a.Beat(ctx); !errors.Is(err, pipeline.ErrSessionGone) {
		t.Errorf("a session dead before the restart beat again: %v", err)
	}
	// Alive when the server went down (beaten 10 min before it started):
	// it keeps the restart's grace.
	c := worker(t, u, "c")
	if err := c.BeginSession(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	sql(t, u, `UPDATE worker_session SET beat_at = pg_postmaster_start_time() - interval '10 minutes' WHERE owner = 'c'`)
	if err := c.Beat(ctx); err != nil {
		t.Errorf("a session alive at the restart lost its grace: %v", err)
	}
}

// TestSession_ClaimsBetweenSessions: a worker told its session is dead
// drops what it held and begins another; a claim it makes in between
// (its dispatcher does not wait for the heartbeat) is held no longer
// than the dead session's: another worker may take it at once. It used
// to be recorded without a session and held for its whole lease, and if
// the worker dropped it too (lost with the rest, or died before its next
// session), nobody could claim it until that lease ended.
func TestSession_ClaimsBetweenSessions(t *testing.T) {
	a, u := openNew(t, Options{Owner: "a"})
	b := worker(t, u, "b")
	ingestN(t, a, 3)
	beginSession(t, a)
	killSessions(t, u)
	if err := a.Beat(context.Background()); !errors.Is(err, pipeline.ErrSessionGone) {
		t.Fatalf("beat of a dead session: %v, want ErrSessionGone", err)
	}
	if cs := claim(t, a, "sanitize", 2); len(cs) != 2 {
		t.Fatalf("a claimed %d, want 2", len(cs))
	}
	beginSession(t, b)
	if cs := claim(t, b, "sanitize", 10); len(cs) != 3 {
		t.Fatalf("b claimed %d of 3: what a claimed between its sessions holds for its lease", len(cs))
	}
	if err := a.Beat(context.Background()); !errors.Is(err, pipeline.ErrSessionGone) {
		t.Fatalf("a's second beat before a new session: %v, want ErrSessionGone", err)
	}
}

// TestSession_RenewedClaimsJoinTheNewSession: what a worker claimed
// between a dead session and its next (recording the dead one) and
// still works on, renewed once the next session has begun, is held by
// that session: other workers no longer take it from a live worker,
// paying for its item twice, for as long as it is queued.
func TestSession_RenewedClaimsJoinTheNewSession(t *testing.T) {
	a, u := openNew(t, Options{Owner: "a"})
	b := worker(t, u, "b")
	ingestN(t, a, 3)
	beginSession(t, a)
	killSessions(t, u)
	if err := a.Beat(context.Background()); !errors.Is(err, pipeline.ErrSessionGone) {
		t.Fatalf("beat of a dead session: %v, want ErrSessionGone", err)
	}
	cs := claim(t, a, "sanitize", 2)
	beginSession(t, a)
	lost, err := a.Renew(context.Background(), "sanitize", cs, time.Hour)
	if err != nil || len(lost) != 0 {
		t.Fatalf("renew: lost %v, %v", lost, err)
	}
	beginSession(t, b)
	if got := claim(t, b, "sanitize", 10); len(got) != 1 {
		t.Fatalf("b claimed %d of 3; want 1: a's renewed claims are its live session's", len(got))
	}
}
