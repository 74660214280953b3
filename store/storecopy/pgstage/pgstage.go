// Package pgstage makes a copy into a PostgreSQL pipeline all or nothing
// (storecopy.Copy writes through the store in batches, each its own
// transaction). The copy is written into a pipeline of its own in a
// staging schema, the pipeline's schema with StagingSuffix, which no
// command opens; Target.Publish renames that schema onto the pipeline's
// in one transaction once the copy is whole. Until then the pipeline's
// schema is as it was (absent, or an empty pipeline): status, run and
// report find no copied item there, whatever stopped the copy, and the
// next copy drops what a stopped one staged and starts over. An empty
// pipeline a run is live on is left alone: the run's sessions name the
// schema, and would write into the copy renamed onto it. A session
// advisory lock held from Stage to Close keeps a second copy into the
// same database out meanwhile.
package pgstage

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
)

// StagingSuffix ends the name of the schema a copy into PostgreSQL is
// written in (postgres.DefaultSchema + StagingSuffix): no command opens
// a pipeline there, so a copy stopped halfway is never taken for one.
const StagingSuffix = "_copying"

// copyLockPrefix names the session advisory lock a copy into a schema
// holds from Stage to Close: a second copy into it is refused
// meanwhile rather than dropping the first one's staged schema under it.
const copyLockPrefix = "sawtooth copy "

// ErrCopyUnderWay is returned by Stage while another copy into
// the same pipeline holds its lock.
var ErrCopyUnderWay = errors.New("another sawtooth copy into it is under way")

// NotEmptyError is a copy's target pipeline that holds items already: a
// copy goes into a new, empty pipeline only.
type NotEmptyError struct {
	Path  string
	Items int64
}

func (e *NotEmptyError) Error() string {
	return fmt.Sprintf("copy to %s: it already holds %d items; copy into a new, empty database", e.Path, e.Items)
}

// LiveRunsError is a copy's target pipeline, empty, that runs are live
// on: put in its place, the copy would take their writes (their
// sessions name the schema, not the pipeline there when they opened it),
// and their job and run records would be dropped.
type LiveRunsError struct {
	Path string
	// Runs are the live runs' ids.
	Runs []string
}

func (e *LiveRunsError) Error() string {
	what := "run " + e.Runs[0] + " is"
	if len(e.Runs) > 1 {
		what = fmt.Sprintf("runs %s are", strings.Join(e.Runs, ", "))
	}
	return fmt.Sprintf("copy to %s: %s live on its pipeline; let the run end (or stop it) and copy again, or copy into another, empty database", e.Path, what)
}

// Target is a staged copy into a PostgreSQL pipeline: copy into DB, then
// Publish, then Close. Not safe for concurrent use.
type Target struct {
	// DB is the staged pipeline to copy into (storecopy.Copy).
	DB *postgres.DB
	// conn holds the copy's advisory lock for its life.
	conn            *pgx.Conn
	path            string
	schema, staging string
	published       bool
}

// Stage opens a staged pipeline of stages in the database at dsn
// to copy into, after checking that the pipeline's schema holds no item
// (a *NotEmptyError) nor a live run (a *LiveRunsError), that no other
// copy into it is under way (ErrCopyUnderWay), and dropping what a
// killed copy staged.
func Stage(ctx context.Context, dsn string, stages []pipeline.StageDef) (*Target, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", postgres.Redact(dsn), err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = postgres.DefaultConnectTimeout
	}
	t := &Target{path: postgres.Redact(dsn), schema: postgres.DefaultSchema, staging: postgres.DefaultSchema + StagingSuffix}
	if t.conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("connect to %s: %w (is the server running, and are host, user and password right?)", t.path, err)
	}
	var locked bool
	if err = t.conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext($1))`, copyLockPrefix+t.schema).Scan(&locked); err == nil && !locked {
		err = ErrCopyUnderWay
	}
	if err == nil {
		err = t.checkTarget(ctx, t.conn)
	}
	if err == nil {
		_, err = t.conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{t.staging}.Sanitize()+` CASCADE`)
	}
	if err == nil {
		t.DB, err = postgres.Open(ctx, dsn, postgres.Options{Stages: stages, Schema: t.staging})
	}
	if err != nil {
		t.conn.Close(ctx)
		return nil, err
	}
	return t, nil
}

// querier is a connection or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// checkTarget refuses a pipeline schema that holds items, that a run is
// live on (a *LiveRunsError), or that holds tables but no sawtooth
// pipeline. An absent schema, an empty one and a pipeline of no items
// and no live run pass: Publish puts the copy in their place.
func (t *Target) checkTarget(ctx context.Context, q querier) error {
	ident := pgx.Identifier{t.schema}.Sanitize()
	var tables int
	var meta, item bool
	err := q.QueryRow(ctx, `SELECT count(c.oid), to_regclass($2) IS NOT NULL, to_regclass($3) IS NOT NULL
		FROM pg_namespace n LEFT JOIN pg_class c ON c.relnamespace = n.oid WHERE n.nspname = $1`,
		t.schema, ident+".meta", ident+".item").Scan(&tables, &meta, &item)
	if err != nil {
		return fmt.Errorf("copy to %s: look at schema %s: %w", t.path, t.schema, err)
	}
	if tables > 0 && !(meta && item) {
		return fmt.Errorf("copy to %s: schema %s holds tables of no sawtooth pipeline: %w (copy into another database)", t.path, t.schema, postgres.ErrNotSawtooth)
	}
	if !item {
		return nil
	}
	var n int64
	if err := q.QueryRow(ctx, `SELECT count(*) FROM `+ident+`.item`).Scan(&n); err != nil {
		return fmt.Errorf("copy to %s: count its items: %w", t.path, err)
	}
	if n > 0 {
		return &NotEmptyError{Path: t.path, Items: n}
	}
	live, err := postgres.LiveRuns(ctx, q, t.schema)
	if err != nil {
		return fmt.Errorf("copy to %s: look for live runs: %w", t.path, err)
	}
	if len(live) > 0 {
		return &LiveRunsError{Path: t.path, Runs: live}
	}
	return nil
}

// Publish closes DB and puts the staged pipeline in the place of the
// pipeline's schema, in one transaction: the schema is renamed, an empty
// pipeline (or empty schema) there before it is dropped, and one that
// gained items meanwhile (a *NotEmptyError) or a live run (a
// *LiveRunsError) refuses the copy.
func (t *Target) Publish(ctx context.Context) error {
	if err := t.DB.Close(); err != nil {
		return err
	}
	ident := pgx.Identifier{t.schema}.Sanitize()
	err := pgx.BeginFunc(ctx, t.conn, func(tx pgx.Tx) error {
		// Held to the commit: no ingest can add an item to the
		// pipeline, nor a run record itself, between the check and the
		// drop.
		rows, _ := tx.Query(ctx, `SELECT t FROM unnest($1::text[]) AS t WHERE to_regclass(t) IS NOT NULL`, []string{ident + ".item", ident + ".run"})
		held, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if len(held) > 0 {
			if _, err := tx.Exec(ctx, `LOCK TABLE `+strings.Join(held, ", ")+` IN ACCESS EXCLUSIVE MODE`); err != nil {
				return err
			}
		}
		if err := t.checkTarget(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DROP SCHEMA IF EXISTS `+ident+` CASCADE`); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `ALTER SCHEMA `+pgx.Identifier{t.staging}.Sanitize()+` RENAME TO `+ident)
		return err
	})
	if err != nil {
		return fmt.Errorf("put the copy in place in %s: %w", t.path, err)
	}
	t.published = true
	return nil
}

// Close drops the staged schema unless Publish put it in place, and
// releases the copy's lock. It closes DB if Publish did not.
func (t *Target) Close() error {
	ctx := context.Background()
	var err error
	if !t.published {
		t.DB.Close()
		_, err = t.conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{t.staging}.Sanitize()+` CASCADE`)
		if err != nil {
			err = fmt.Errorf("drop the unfinished copy (schema %s) in %s: %w", t.staging, t.path, err)
		}
	}
	return errors.Join(err, t.conn.Close(ctx))
}

// Unfinished says whether the database at dsn holds the staged schema
// of a copy that has not finished, and whether that copy is still under
// way (its process holds the copy's lock) rather than stopped halfway.
func Unfinished(ctx context.Context, dsn string) (staged, underWay bool, err error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return false, false, err
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = postgres.DefaultConnectTimeout
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, false, err
	}
	defer conn.Close(ctx)
	// A lock on one bigint key shows in pg_locks as its high and low
	// 32 bits (classid, objid), objsubid 1.
	err = conn.QueryRow(ctx, `WITH k AS (SELECT hashtext($2)::bigint AS key)
		SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1),
			EXISTS (SELECT 1 FROM pg_locks l, k WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
				AND l.classid = ((k.key >> 32) & 4294967295)::oid AND l.objid = (k.key & 4294967295)::oid
				AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))`,
		postgres.DefaultSchema+StagingSuffix, copyLockPrefix+postgres.DefaultSchema).Scan(&staged, &underWay)
	return staged, staged && underWay, err
}
