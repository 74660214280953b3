package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

var _ pipeline.Sessions = (*DB)(nil)

// aliveSQL holds for a worker_session row s whose worker beat it within
// its timeout, on the database's clock. A server restart counts as a
// beat for the sessions alive when it went down: their workers could not
// beat while it was away, and they are given a whole timeout after it to
// beat again before their claims go to others. A session dead before
// the restart stays dead: its claims may be another worker's by now.
const aliveSQL = `(s.beat_at > now() - s.timeout_us * interval '1 microsecond' OR
	(s.beat_at > pg_postmaster_start_time() - s.timeout_us * interval '1 microsecond' AND
	 pg_postmaster_start_time() > now() - s.timeout_us * interval '1 microsecond'))`

// claimableSQL holds for a queue row q that no live claim holds: never
// claimed, lease ended, or claimed by a session that is dead (not beaten
// within its timeout) or gone (ended, or cleaned up). A row claimed
// without a session (by a handle that began none, or by a sawtooth from
// before sessions) is held for its lease alone.
const claimableSQL = `(q.visible_at <= now() OR (q.session IS NOT NULL AND NOT EXISTS (
	SELECT FROM worker_session s WHERE s.id = q.session AND ` + aliveSQL + `)))`

// sessionKeep is how long a dead session's row is kept (its claims are
// claimable all the same), so that its worker, if only paused, is told
// it was taken for dead rather than that it never existed.
const sessionKeep = time.Hour

// BeginSession registers a new worker session, dead once not beaten for
// timeout on the database's clock: the claims this handle makes from
// now on record it, and other workers may claim them once it is dead,
// even while their leases last. Sessions dead for an hour are deleted
// on the way.
func (db *DB) BeginSession(ctx context.Context, timeout time.Duration) error {
	if timeout <= 0 {
		return fmt.Errorf("begin a worker session: timeout must be positive (got %v)", timeout)
	}
	var id int64
	err := db.pool.QueryRow(ctx, `WITH old AS (DELETE FROM worker_session s
			WHERE s.beat_at < now() - $3 * interval '1 microsecond' AND NOT (`+aliveSQL+`))
		INSERT INTO worker_session (owner, timeout_us) VALUES ($1, $2) RETURNING id`,
		db.owner, timeout.Microseconds(), sessionKeep.Microseconds()).Scan(&id)
	if err != nil {
		return fmt.Errorf("begin a worker session in %s: %w", db.path, err)
	}
	db.sessionMu.Lock()
	db.sessions = append(db.sessions, id)
	db.sessionMu.Unlock()
	db.session.Store(id)
	return nil
}

// Beat records that this handle's worker is alive. It returns
// pipeline.ErrSessionGone when the session is already dead or gone (the
// worker was paused or cut off for its timeout): a dead session never
// beats again, so a claim is held only while its session beat without a
// gap. The claims this handle makes until it begins another session
// record the dead one, so other workers may take them at once: the
// worker drops what it holds when told, and a claim recorded without a
// session would be held for its whole lease by nobody. What it still
// holds it renews, and Renew records the handle's next session then.
func (db *DB) Beat(ctx context.Context) error {
	id := db.session.Load()
	if id == 0 {
		return fmt.Errorf("beat in %s: %w", db.path, pipeline.ErrSessionGone)
	}
	tag, err := db.pool.Exec(ctx, `UPDATE worker_session s SET beat_at = now() WHERE s.id = $1 AND `+aliveSQL, id)
	if err != nil {
		return fmt.Errorf("beat worker session %d in %s: %w", id, db.path, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("worker session %d in %s: %w", id, db.path, pipeline.ErrSessionGone)
	}
	return nil
}

// EndSession deletes the sessions this handle began, the dead ones
// with the current: what they still hold is claimable at once. Then,
// when the queue is empty, it gives back the space its indexes kept
// (shrinkQueue). Without a session it does nothing.
func (db *DB) EndSession(ctx context.Context) error {
	db.sessionMu.Lock()
	defer db.sessionMu.Unlock()
	db.session.Store(0)
	if len(db.sessions) == 0 {
		return nil
	}
	if _, err := db.pool.Exec(ctx, `DELETE FROM worker_session WHERE id = ANY($1)`, db.sessions); err != nil {
		return fmt.Errorf("end the worker sessions %v in %s: %w", db.sessions, db.path, err)
	}
	db.sessions = nil
	if err := db.shrinkQueue(ctx); err != nil {
		return fmt.Errorf("sessions ended; shrink the drained queue of %s: %w", db.path, err)
	}
	return nil
}

// sessionArg is the session claims record now: NULL without one.
func (db *DB) sessionArg() any {
	if id := db.session.Load(); id != 0 {
		return id
	}
	return nil
}
