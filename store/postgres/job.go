package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// keyJob is the meta key of the job the pipeline was run with.
const keyJob = "job"

// SaveJob records the job the pipeline is run with (opaque bytes: the
// caller's encoding), replacing the one recorded before.
func (db *DB) SaveJob(job []byte) error {
	if _, err := db.pool.Exec(db.ctx, `INSERT INTO meta (key, value) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`, keyJob, nonNil(job)); err != nil {
		return fmt.Errorf("record the job in %s: %w", db.path, err)
	}
	return nil
}

// Job returns the job SaveJob recorded, nil if none (a pipeline run from
// flags).
func (db *DB) Job() ([]byte, error) {
	return readMeta(db.ctx, db.pool, keyJob, db.path)
}

// ReadStored reads the stage list and the job (nil if none) recorded in
// the pipeline in schema (empty: DefaultSchema) of the database dsn
// names, without knowing its stage list: what a command needs before it
// can Open it (a resume with no job file, `sawtooth job show`). It
// changes nothing, and returns ErrNotFound when there is no pipeline.
func ReadStored(ctx context.Context, dsn, schema string) (stages []pipeline.StageDef, job []byte, err error) {
	if schema == "" {
		schema = DefaultSchema
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w (give a postgres:// URL or key=value connection string)", Redact(dsn), err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	cfg.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	cfg.RuntimeParams["default_transaction_read_only"] = "on"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to %s: %w (is the server running, and are host, user and password right?)", Redact(dsn), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	stages, err = readDefinition(ctx, conn)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table: no pipeline in schema
		return nil, nil, fmt.Errorf("no sawtooth pipeline in schema %s of %s: %w", schema, Redact(dsn), ErrNotFound)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", Redact(dsn), err)
	}
	job, err = readMeta(ctx, conn, keyJob, Redact(dsn))
	return stages, job, err
}

// readMeta is meta's value at key, nil when there is none.
func readMeta(ctx context.Context, q querier, key, path string) ([]byte, error) {
	var v []byte
	err := q.QueryRow(ctx, `SELECT value FROM meta WHERE key = $1`, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s from %s: %w", key, path, err)
	}
	return v, nil
}
