package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A drain leaves space inside the tables that plain VACUUM (autovacuum
// included) marks free for reuse but does not give back: each item's row
// of outputs is written once per stage, the old versions' space stays in
// the heap, index pages split by inserts across the key range stay half
// full, and a drained queue keeps the pages its dead rows held. VACUUM
// FULL writes each table and its indexes anew, holding the table's
// ACCESS EXCLUSIVE lock meanwhile; that is what Compact runs, table by
// table on a connection of its own (VACUUM cannot run in a transaction
// block). Each table's rewrite is a transaction of its own: ended early
// (the process killed, the backend terminated, the connection lost) it
// rolls back, the table stays as it was, and the tables rewritten before
// it stay rewritten. A rewrite needs free disk for a second copy of the
// table and its indexes until it commits; a full disk fails it the same
// way.

// DefaultCompactLockTimeout bounds the wait for each table's lock when
// CompactOptions.LockTimeout is zero: a reader (a `status`, a report, an
// export) holds its lock for as long as its transaction runs, and the
// rewrite waiting behind it would make every statement that comes after
// wait too.
const DefaultCompactLockTimeout = 10 * time.Second

// clientCheckInterval is how often the server looks whether the client
// of a compact or a migration is still there during a statement: a
// killed sawtooth must not leave its backend rewriting a table, holding
// its lock, for minutes.
const clientCheckInterval = "1s"

// clientCheckRefused reports whether err is a server's refusal of
// client_connection_check_interval, which is best effort: a server
// before 14 has no such parameter (42704), and one on a platform that
// cannot see a closed socket (Windows; macOS and the BSDs before 15)
// refuses any value but 0 (22023). There a killed client's backend
// finishes the statement it was running, then ends.
func clientCheckRefused(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "42704" || pe.Code == "22023")
}

// watchClient has the server check for the client during the rest of
// tx, as a compact's session does: a migration rewrites tables for
// minutes at a million items, holding the schema lock every open waits
// on, and a killed sawtooth must not leave it running. The setting is
// tried under a savepoint, so that a server's refusal of it
// (clientCheckRefused) does not abort tx.
func watchClient(ctx context.Context, tx pgx.Tx) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	_, err = sp.Exec(ctx, `SET LOCAL client_connection_check_interval = '`+clientCheckInterval+`'`)
	if err == nil {
		return sp.Commit(ctx)
	}
	if rerr := sp.Rollback(ctx); rerr != nil {
		return errors.Join(err, rerr)
	}
	if clientCheckRefused(err) {
		return nil
	}
	return err
}

// compactLockPrefix names the advisory lock one compact of a schema holds
// for its whole run, so that two do not rewrite the same tables at once.
const compactLockPrefix = "sawtooth compact "

// compactAppName is the compact's connection's application_name, which
// pg_stat_activity shows an operator.
const compactAppName = "sawtooth compact"

// ErrBusy is returned by Compact when the pipeline is in use: a worker is
// live, another compact runs, or a table's lock was not granted in time.
// Nothing was rewritten after the refusal; what was before it stays so.
var ErrBusy = errors.New("pipeline in use")

// CompactOptions configure Compact.
type CompactOptions struct {
	// LockTimeout bounds the wait for each table's lock; zero means
	// DefaultCompactLockTimeout.
	LockTimeout time.Duration
}

// TableSpace is one table's bytes, its indexes and TOAST included, before
// and after Compact rewrote it.
type TableSpace struct {
	Name          string
	Before, After int64
}

// CompactStats is what Compact did: the schema's bytes (its tables with
// their indexes and TOAST) before and after, and each table it rewrote,
// in the order it did.
type CompactStats struct {
	Before, After int64
	Tables        []TableSpace
}

// Compact rewrites every table of the pipeline's schema (VACUUM FULL: the
// table and its indexes written anew without the free space a drain left
// inside them), one table at a time, and returns the sizes before and
// after. It refuses (ErrBusy) while a worker session is live, checking
// again before each table, and when a table's lock is not granted within
// opt.LockTimeout, naming the table and who holds it. The pipeline's
// rows are not changed. On an error the stats say what was rewritten
// before it; running Compact again finishes the rest.
func (db *DB) Compact(ctx context.Context, opt CompactOptions) (CompactStats, error) {
	var st CompactStats
	if opt.LockTimeout <= 0 {
		opt.LockTimeout = DefaultCompactLockTimeout
	}
	cfg := db.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = compactAppName
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return st, fmt.Errorf("compact %s: connect: %w", db.path, err)
	}
	defer conn.Close(context.Background())
	if err := db.compactSession(ctx, conn, opt.LockTimeout); err != nil {
		return st, err
	}
	tables, err := db.compactTables(ctx, conn)
	if err != nil {
		return st, err
	}
	for _, t := range tables {
		st.Before += t.Before
	}
	st.After = st.Before
	for _, t := range tables {
		if err := db.checkNoLiveSessions(ctx, conn, st); err != nil {
			return st, err
		}
		if _, err := conn.Exec(ctx, `VACUUM (FULL, ANALYZE) `+pgx.Identifier{db.schema, t.Name}.Sanitize()); err != nil {
			return st, db.compactError(ctx, t, opt.LockTimeout, st, err)
		}
		if err := conn.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass)`, pgx.Identifier{db.schema, t.Name}.Sanitize()).Scan(&t.After); err != nil {
			return st, fmt.Errorf("compact %s: read the size of table %s: %w", db.path, t.Name, err)
		}
		st.After += t.After - t.Before
		st.Tables = append(st.Tables, t)
	}
	return st, nil
}

// compactSession sets up the compact's connection: a lock timeout, no
// statement timeout (a large table takes minutes), the client checked
// for during a statement, and the schema's compact lock.
func (db *DB) compactSession(ctx context.Context, conn *pgx.Conn, lockTimeout time.Duration) error {
	sets := []string{
		`SET lock_timeout = ` + strconv.FormatInt(max(lockTimeout.Milliseconds(), 1), 10),
		`SET statement_timeout = 0`,
		`SET client_connection_check_interval = '` + clientCheckInterval + `'`,
	}
	for i, s := range sets {
		if _, err := conn.Exec(ctx, s); err != nil {
			if i == len(sets)-1 && clientCheckRefused(err) {
				continue
			}
			return fmt.Errorf("compact %s: %s: %w", db.path, s, err)
		}
	}
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext($1))`, compactLockPrefix+db.schema).Scan(&got); err != nil {
		return fmt.Errorf("compact %s: %w", db.path, err)
	}
	if !got {
		return fmt.Errorf("compact schema %s of %s: another sawtooth compact is rewriting it: %w (wait for it to end)", db.schema, db.path, ErrBusy)
	}
	// Every open of the pipeline takes the schema lock for its set-up
	// (init): held for the whole compact, it keeps a worker that starts
	// meanwhile waiting in its open, before it claims or pays for
	// anything, rather than behind a table's rewrite with its claims'
	// leases running. Other commands (status, report) wait too. Its wait
	// is bounded by the lock timeout like a table's.
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext($1))`, schemaLockPrefix+db.schema); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "55P03" {
			return fmt.Errorf("compact schema %s of %s: the pipeline is being opened or migrated: its lock was not granted within %v: %w (run compact again when it is done)", db.schema, db.path, lockTimeout, ErrBusy)
		}
		return fmt.Errorf("compact %s: %w", db.path, err)
	}
	return nil
}

// compactTables lists the schema's tables with their sizes, in name
// order, and refuses when the user may not rewrite some of them: VACUUM
// would skip those with a warning, not an error, and Compact would claim
// a rewrite it did not do.
func (db *DB) compactTables(ctx context.Context, conn *pgx.Conn) ([]TableSpace, error) {
	rows, _ := conn.Query(ctx, `SELECT c.relname, pg_total_relation_size(c.oid), pg_has_role(c.relowner, 'USAGE')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY c.relname`, db.schema)
	var tables []TableSpace
	var notOwned []string
	var t TableSpace
	var owned bool
	if _, err := pgx.ForEachRow(rows, []any{&t.Name, &t.Before, &owned}, func() error {
		tables = append(tables, t)
		if !owned {
			notOwned = append(notOwned, t.Name)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("compact %s: list the tables of schema %s: %w", db.path, db.schema, err)
	}
	if len(notOwned) > 0 {
		return nil, fmt.Errorf("compact schema %s of %s: this user does not own table %s, and only a table's owner (or a superuser) may rewrite it (connect as the user that created the pipeline)",
			db.schema, db.path, strings.Join(notOwned, ", "))
	}
	return tables, nil
}

// checkNoLiveSessions refuses (ErrBusy) while a worker session beats
// within its timeout: its worker would wait behind each table's lock.
// A worker opening the pipeline meanwhile waits for the schema lock the
// compact holds (see compactSession); one that had opened it before and
// begins its session after the look is refused at the next table's.
func (db *DB) checkNoLiveSessions(ctx context.Context, conn *pgx.Conn, done CompactStats) error {
	var n int
	var owners string
	var left float64
	err := conn.QueryRow(ctx, `SELECT count(*), coalesce(string_agg(DISTINCT s.owner, ', ' ORDER BY s.owner), ''),
			coalesce(extract(epoch FROM max(s.beat_at + s.timeout_us * interval '1 microsecond') - now()), 0)::float8
		FROM worker_session s WHERE `+aliveSQL).Scan(&n, &owners, &left)
	if err != nil {
		return fmt.Errorf("compact %s: look for live workers: %w", db.path, err)
	}
	if n == 0 {
		return nil
	}
	sessions := "sessions are"
	if n == 1 {
		sessions = "session is"
	}
	// A worker killed a moment ago still counts until its heartbeat
	// timeout has passed: say how long that is.
	wait := time.Duration(max(left, 1) * float64(time.Second)).Round(time.Second)
	return fmt.Errorf("compact schema %s of %s: %d worker %s live (%s)%s: %w (compact locks each table while it rewrites it, and the workers would wait; run it when they have finished or been stopped: a stopped worker counts as live for %v more, its heartbeat timeout)",
		db.schema, db.path, n, sessions, owners, rewrote(done), ErrBusy, wait)
}

// compactError words a failed VACUUM FULL of table: a lock not granted in
// time is ErrBusy, naming the sessions that hold a lock on the table;
// a full disk (53100) says how much room the rewrite needs.
func (db *DB) compactError(ctx context.Context, t TableSpace, lockTimeout time.Duration, done CompactStats, err error) error {
	table := t.Name
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "53100" {
		// disk_full: the rewrite writes the new copy of the table and
		// its indexes beside the old one, which goes only at its commit.
		return fmt.Errorf("compact schema %s of %s: rewrite table %s: the server's disk is full: the rewrite writes a new copy of the table and its indexes beside it, about %.1f MB at most, and its WAL and sort files on top, and table %s is as it was%s: %w (free space on the server's disk, then run compact again)",
			db.schema, db.path, table, float64(t.Before)/1e6, table, rewrote(done), err)
	}
	if pe == nil || pe.Code != "55P03" {
		return fmt.Errorf("compact schema %s of %s: rewrite table %s%s: %w", db.schema, db.path, table, rewrote(done), err)
	}
	holders := db.lockHolders(ctx, table)
	return fmt.Errorf("compact schema %s of %s: table %s is in use: its lock was not granted within %v%s%s: %w (run compact again when it is done)",
		db.schema, db.path, table, lockTimeout, holders, rewrote(done), ErrBusy)
}

// lockHolders names, best effort, the sessions holding a lock on table,
// for a message: "" when none can be read.
func (db *DB) lockHolders(ctx context.Context, table string) string {
	conn, err := pgx.ConnectConfig(ctx, db.pool.Config().ConnConfig.Copy())
	if err != nil {
		return ""
	}
	defer conn.Close(context.Background())
	rows, _ := conn.Query(ctx, `SELECT DISTINCT a.pid, coalesce(nullif(a.application_name, ''), '?'), coalesce(a.state, '?')
		FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.relation = $1::regclass AND l.granted AND a.application_name <> $2 ORDER BY 1`,
		pgx.Identifier{db.schema, table}.Sanitize(), compactAppName)
	var names []string
	var pid int
	var app, state string
	if _, err := pgx.ForEachRow(rows, []any{&pid, &app, &state}, func() error {
		names = append(names, fmt.Sprintf("pid %d (%s, %s)", pid, app, state))
		return nil
	}); err != nil || len(names) == 0 {
		return ""
	}
	return "; held by " + strings.Join(names, ", ")
}

// rewrote says, for a message, which tables were rewritten before it.
func rewrote(done CompactStats) string {
	if len(done.Tables) == 0 {
		return "; nothing was rewritten"
	}
	names := make([]string, len(done.Tables))
	for i, t := range done.Tables {
		names[i] = t.Name
	}
	return "; rewritten before it: " + strings.Join(names, ", ")
}
