package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// A drained queue keeps its size: every item passed through it once per
// stage, each time as a new row with a new sequence, and VACUUM frees
// the index pages those entries held for reuse without giving them back
// (it truncates only the table's own empty end). At a million items the
// empty queue's indexes held 0.19 GB. When a worker ends its session on
// an empty queue, nothing else can be in it, and rebuilding its indexes
// costs a few milliseconds: shrinkQueue does so, and leaves a queue that
// is in use or not empty alone.

// shrinkFloor is the size of the queue's indexes below which an empty
// queue is left as it is: a few pages per index, not worth a lock.
const shrinkFloor = 1 << 20

// shrinkLockTimeout bounds the wait for the queue's lock. A worker that
// still claims or commits holds it only while the queue is not drained;
// when the last items go, autovacuum is often vacuuming the queue (it
// holds a lock the rebuild's waits for, measured at the end of every
// bench drain), and the server cancels an autovacuum that blocks
// another's lock after deadlock_timeout (1 s by default).
const shrinkLockTimeout = "2s"

// shrinkQueue rebuilds the queue's indexes when the queue is empty and
// they hold more than shrinkFloor, under a lock that keeps every other
// statement on the queue out meanwhile (a few milliseconds). A lock it cannot take within shrinkLockTimeout,
// a user that does not own the table, or the end of ctx leaves the queue
// as it is: the space is reused by the next rows either way.
func (db *DB) shrinkQueue(ctx context.Context) error {
	// The first look is outside the transaction, which then takes the
	// queue's lock before any other: workers leaving at once each held
	// their look's lock on an index another's rebuild waited for, and
	// deadlocked.
	var empty, big bool
	err := db.pool.QueryRow(ctx, emptyAndBigSQL, shrinkFloor).Scan(&empty, &big)
	if err != nil || !empty || !big {
		return notMine(err)
	}
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return notMine(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+shrinkLockTimeout+`'`); err != nil {
		return notMine(err)
	}
	// The rebuild locks each index as access exclusive, which every
	// statement on the queue waits for: the table's lock in that mode,
	// taken first, costs readers nothing more. A weaker one (share row
	// exclusive) was granted beside a transaction that had read the
	// queue, and the rebuild then waited for that reader's index lock
	// while the reader's write (an ingest queueing its items) waited for
	// the table's: a deadlock. A reader that already holds its lock goes
	// ahead of a waiting request; and the mode is its own conflict: one
	// worker rebuilds at a time.
	if _, err := tx.Exec(ctx, `LOCK TABLE todo IN ACCESS EXCLUSIVE MODE`); err != nil {
		return notMine(err)
	}
	// Under the lock: nothing was queued between the look and the lock,
	// and another worker ending its session did not rebuild them first.
	if err := tx.QueryRow(ctx, emptyAndBigSQL, shrinkFloor).Scan(&empty, &big); err != nil || !empty || !big {
		return notMine(err)
	}
	if _, err := tx.Exec(ctx, `REINDEX TABLE todo`); err != nil {
		return notMine(err)
	}
	return notMine(tx.Commit(ctx))
}

// emptyAndBigSQL says whether the queue is empty and whether its
// indexes hold more than $1 bytes.
const emptyAndBigSQL = `SELECT NOT EXISTS (SELECT 1 FROM todo), pg_indexes_size('todo') > $1`

// notMine is nil for the errors that say the queue is not shrinkQueue's
// to rebuild now: a lock held by another (lock_not_available), a table
// the user does not own (insufficient_privilege), or the end of the time
// the caller gave (a worker leaving).
func notMine(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "55P03" || pe.Code == "42501") ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
