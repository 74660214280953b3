package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

var _ pipeline.Claimer = (*DB)(nil)

// errLease is returned for a lease that is not positive.
var errLease = errors.New("lease must be positive")

// leaseSQL is the lease end for $N microseconds from now on the
// database's clock: worker clocks never decide who holds an entry.
func leaseSQL(n int) string { return fmt.Sprintf("now() + $%d * interval '1 microsecond'", n) }

// claimSQL leases up to $2 entries of stage $1 to owner $3 and session
// $5 (NULL: none) for $4 microseconds and returns them with their records and earlier outputs.
// The picked sequences are one array the update looks up in the key's
// index: as a join, the planner hashes the whole queue for any claim
// larger than a few rows.
var claimSQL = `WITH u AS (UPDATE todo t SET attempt = t.attempt + 1, owner = $3, session = $5, visible_at = ` + leaseSQL(4) + `
		WHERE t.seq = ANY(ARRAY(SELECT q.seq FROM todo q WHERE q.stage = $1 AND q.batch IS NULL AND ` + claimableSQL + `
			ORDER BY q.seq LIMIT $2 FOR UPDATE OF q SKIP LOCKED))
		RETURNING t.seq, t.item_id, t.attempt)
	SELECT x.seq, x.attempt, x.item_id, i.record, o.data FROM u x JOIN item i USING (item_id) ` + outputsSQL + `
	ORDER BY x.seq`

// Claim leases up to max entries of stage's queue whose lease has ended
// (or that were never claimed), oldest first, in one statement: the
// rows are picked with FOR UPDATE SKIP LOCKED, so concurrent claims
// never wait on each other and never get the same row, and each claim
// raises the row's attempt (the fencing token).
func (db *DB) Claim(ctx context.Context, stage string, max int, lease time.Duration) ([]pipeline.Claim, error) {
	si, err := db.stageIndex(stage)
	if err != nil {
		return nil, err
	}
	if lease <= 0 {
		return nil, fmt.Errorf("claim %s: %w (got %v)", stage, errLease, lease)
	}
	if max <= 0 {
		return nil, nil
	}
	rows, _ := db.pool.Query(ctx, claimSQL, si, max, db.owner, lease.Microseconds(), db.sessionArg())
	var out []pipeline.Claim
	var seq, attempt int64
	var id string
	var record, row []byte
	_, err = pgx.ForEachRow(rows, []any{&seq, &attempt, &id, &record, &row}, func() error {
		it, err := db.item(id, record, row, si)
		if err != nil {
			return fmt.Errorf("queue %s seq %d: %w", stage, seq, err)
		}
		out = append(out, pipeline.Claim{Queued: pipeline.Queued{Seq: uint64(seq), Item: it}, Attempt: attempt})
		row = nil
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim from %s in %s: %w", stage, db.path, err)
	}
	return out, nil
}

// ensureQueueStats gives the planner statistics on the queue table when
// it has none (a new pipeline, or one analyzed only while empty):
// ANALYZE todo. Without them it guesses that a stage holds a few dozen
// rows, and for a claim of more than that it reads and sorts every row
// of the stage instead of walking the (stage, seq) index to the first
// free ones: a claim then costs in proportion to the queue, and a large
// queue drains quadratically until autovacuum (a minute or more later)
// analyzes it. Statistics that are merely stale do no such harm: a stage
// believed small is walked on the index, a stage believed large on the
// sequence key.
//
// It is called once the items are stored, and it is best effort: a
// failure only leaves the planner as autovacuum leaves it, and must not
// report as failed an ingest that is committed (a lost connection fails
// the next statement anyway, and a role that does not own the table gets
// a warning from ANALYZE, not an error).
func (db *DB) ensureQueueStats(ctx context.Context) {
	var has bool
	err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stats
		WHERE schemaname = current_schema() AND tablename = 'todo' AND attname = 'stage')`).Scan(&has)
	if err == nil && !has {
		_, _ = db.pool.Exec(ctx, `ANALYZE todo`)
	}
}

// leased locks, in sequence order (as every statement that changes
// queue rows does, so they never deadlock), the rows of stage $1 whose
// sequence and attempt are still $2[i], $3[i]. The rows are found
// through the key's index (seq = ANY): as a plain join the planner would
// hash the whole queue for a few hundred leases.
const leasedSQL = `SELECT q.seq FROM todo q JOIN unnest($2::bigint[], $3::bigint[]) AS k(seq, attempt)
	ON q.seq = k.seq AND q.attempt = k.attempt WHERE q.seq = ANY($2::bigint[]) AND q.stage = $1 ORDER BY q.seq FOR UPDATE OF q`

func fences(claims []pipeline.Claim) (seqs, attempts []int64) {
	for _, c := range claims {
		seqs, attempts = append(seqs, int64(c.Seq)), append(attempts, c.Attempt)
	}
	return seqs, attempts
}

// Renew extends the leases of claims to lease from now (database clock)
// and returns the sequences of those it could not: the entry was
// committed, moved, or claimed again by another worker.
func (db *DB) Renew(ctx context.Context, stage string, claims []pipeline.Claim, lease time.Duration) ([]uint64, error) {
	si, err := db.stageIndex(stage)
	if err != nil {
		return nil, err
	}
	if lease <= 0 {
		return nil, fmt.Errorf("renew %s: %w (got %v)", stage, errLease, lease)
	}
	if len(claims) == 0 {
		return nil, nil
	}
	seqs, attempts := fences(claims)
	// The handle's session, if any, holds what it renews: a claim made
	// between a dead session and the next, recording the dead one, is
	// the live worker's again once the next has begun.
	rows, _ := db.pool.Query(ctx, `WITH l AS (`+leasedSQL+`)
		UPDATE todo t SET visible_at = `+leaseSQL(4)+`, session = coalesce($5, t.session) FROM l WHERE t.seq = l.seq RETURNING t.seq`,
		si, seqs, attempts, lease.Microseconds(), db.sessionArg())
	renewed, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("renew leases of %s in %s: %w", stage, db.path, err)
	}
	held := make(map[int64]bool, len(renewed))
	for _, s := range renewed {
		held[s] = true
	}
	var lost []uint64
	for _, s := range seqs {
		if !held[s] {
			lost = append(lost, uint64(s))
		}
	}
	return lost, nil
}

// Release ends the leases of claims still held, so any worker can claim
// the entries at once. The attempts stay raised: a fencing token is
// never reused.
func (db *DB) Release(ctx context.Context, stage string, claims []pipeline.Claim) error {
	si, err := db.stageIndex(stage)
	if err != nil {
		return err
	}
	if len(claims) == 0 {
		return nil
	}
	seqs, attempts := fences(claims)
	if _, err := db.pool.Exec(ctx, `WITH l AS (`+leasedSQL+`)
		UPDATE todo t SET visible_at = now(), owner = NULL FROM l WHERE t.seq = l.seq`, si, seqs, attempts); err != nil {
		return fmt.Errorf("release leases of %s in %s: %w", stage, db.path, err)
	}
	return nil
}

// CommitFenced applies ts in one transaction, as Commit does, each only
// if its entry is still at the claim's attempt: nobody claimed it since,
// whether or not the lease has run out meanwhile. It returns the
// sequences of the transitions not applied.
func (db *DB) CommitFenced(ctx context.Context, ts []pipeline.FencedTransition) ([]uint64, error) {
	plain := make([]pipeline.Transition, len(ts))
	attempts := make([]int64, len(ts))
	for i, t := range ts {
		if t.Attempt < 0 {
			return nil, fmt.Errorf("commit %q at %s: negative attempt %d", t.ID, t.Stage, t.Attempt)
		}
		plain[i], attempts[i] = t.Transition, t.Attempt
	}
	return db.commit(ctx, plain, attempts)
}

// CountQueued counts the entries queued at stages, leased or not: a
// fleet worker whose upstream has ended asks it to know whether any
// worker still holds work for its stage. It reads the queue alone,
// through its stage index, where Counts counts every item.
func (db *DB) CountQueued(ctx context.Context, stages []string) (int, error) {
	idx := make([]int16, len(stages))
	for i, s := range stages {
		si, err := db.stageIndex(s)
		if err != nil {
			return 0, err
		}
		idx[i] = int16(si)
	}
	var n int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM todo WHERE stage = ANY($1::smallint[])`, idx).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the queues of %v in %s: %w", stages, db.path, err)
	}
	return n, nil
}

// Holder is what one worker holds at one stage, for status.
type Holder struct {
	// Owner is the worker's Options.Owner (host:pid by default).
	Owner string `json:"owner"`
	Stage string `json:"stage"`
	// Held counts the entries under a live claim (lease not ended,
	// session, if any, alive); LeaseEnd is the latest
	// of their lease ends on the database clock (a worker that renews
	// keeps it about one lease ahead of now).
	Held     int       `json:"held"`
	LeaseEnd time.Time `json:"lease_end"`
}

// Holders lists, per worker and stage, the entries under a live claim:
// a dead worker's are not, even while their leases last.
func (db *DB) Holders(ctx context.Context) ([]Holder, error) {
	rows, _ := db.pool.Query(ctx, `SELECT q.owner, q.stage, count(*), max(q.visible_at) FROM todo q
		WHERE q.owner IS NOT NULL AND NOT `+claimableSQL+` GROUP BY q.owner, q.stage ORDER BY q.owner, q.stage`)
	var out []Holder
	var h Holder
	var si int16
	_, err := pgx.ForEachRow(rows, []any{&h.Owner, &si, &h.Held, &h.LeaseEnd}, func() error {
		if int(si) >= len(db.stages) {
			return pipeline.Damaged("", "", nil, "queue rows at unknown stage %d", si)
		}
		h.Stage = db.stages[si].Name
		out = append(out, h)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list lease holders in %s: %w", db.path, err)
	}
	return out, nil
}
