package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// SchemaVersion is the newest schema this package creates and reads.
const SchemaVersion = 18

// migrations[v-1] brings a schema at version v-1 to version v. Each runs
// in the transaction that holds the schema's advisory lock, so two
// processes never migrate at once and a failed step leaves the previous
// version intact. Never edit a released step: append one.
var migrations = []string{
	// 1: the first layout (see doc.go).
	`
CREATE TABLE meta (key text PRIMARY KEY, value bytea NOT NULL);
CREATE TABLE item (
	item_id text PRIMARY KEY,
	record bytea NOT NULL,         -- pipeline.Record as JSON
	content_hash text NOT NULL
);
CREATE SEQUENCE todo_seq;
CREATE TABLE todo (
	seq bigint PRIMARY KEY,        -- FIFO key, never changes
	stage smallint NOT NULL CHECK (stage >= 0),
	item_id text NOT NULL UNIQUE,  -- an item is queued at most once
	attempt bigint NOT NULL DEFAULT 0,
	owner text,
	visible_at timestamptz NOT NULL DEFAULT '-infinity'
) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000);
CREATE INDEX todo_stage_seq ON todo (stage, seq);
CREATE TABLE output (
	item_id text NOT NULL,
	stage smallint NOT NULL CHECK (stage >= 0),
	data bytea NOT NULL,
	PRIMARY KEY (item_id, stage)
);
CREATE INDEX output_stage ON output (stage, item_id);
CREATE TABLE dead (
	item_id text PRIMARY KEY,      -- an item is dead at most once
	stage smallint NOT NULL CHECK (stage >= 0),
	letter bytea NOT NULL          -- pipeline.DeadLetter as JSON
);
CREATE TABLE history (
	id bigserial PRIMARY KEY,
	item_id text NOT NULL,
	stage smallint NOT NULL,
	letter bytea NOT NULL,
	retired timestamptz NOT NULL,
	reason text NOT NULL
);
CREATE INDEX history_item ON history (item_id, id);
CREATE TABLE tally_label (label text, shard smallint, n bigint NOT NULL, PRIMARY KEY (label, shard));
CREATE TABLE tally_group (field text, value text, label text, shard smallint, n bigint NOT NULL,
	PRIMARY KEY (field, value, label, shard));
CREATE TABLE tally_rating (label text, shard smallint, n bigint NOT NULL, sum numeric NOT NULL,
	PRIMARY KEY (label, shard));
CREATE TABLE tally_example (item_id text PRIMARY KEY, label text NOT NULL);
CREATE TABLE usage (run_id text, stage text, shard smallint,
	prompt bigint NOT NULL, candidate bigint NOT NULL, total bigint NOT NULL,
	PRIMARY KEY (run_id, stage, shard));
CREATE TABLE run (run_id text PRIMARY KEY, summary bytea NOT NULL);
CREATE TABLE sample (id bigserial PRIMARY KEY, run_id text NOT NULL, samples bytea NOT NULL);
CREATE INDEX sample_run ON sample (run_id, id);
CREATE UNLOGGED TABLE quota (
	key text PRIMARY KEY,
	tat timestamptz NOT NULL DEFAULT '-infinity',
	every_us bigint NOT NULL DEFAULT 0,
	tau_us bigint NOT NULL DEFAULT 0,
	epoch bigint NOT NULL DEFAULT 0,
	cooldown_until timestamptz NOT NULL DEFAULT '-infinity'
);
`,
	// 2: the answer cache and the money ledger (cache.go).
	`
CREATE TABLE answer (
	stage text NOT NULL,
	key text NOT NULL,
	output bytea NOT NULL,
	prompt bigint NOT NULL,        -- what the answer was billed
	candidate bigint NOT NULL,
	total bigint NOT NULL,
	PRIMARY KEY (stage, key)
);
CREATE TABLE ledger (stage text, shard smallint,
	spent bigint NOT NULL,         -- nanodollars
	saved bigint NOT NULL,         -- nanodollars
	paid bigint NOT NULL, cached bigint NOT NULL,
	PRIMARY KEY (stage, shard));
CREATE UNLOGGED TABLE answer_flight (
	stage text NOT NULL,
	key text NOT NULL,
	owner text NOT NULL,           -- the worker buying the answer
	until timestamptz NOT NULL,    -- its flight's end on the database clock
	PRIMARY KEY (stage, key)
);
`,
	// 3: the fleet's learned rate in the quota row (see fleetlaw.go).
	`
ALTER TABLE quota
	ADD COLUMN given_us bigint NOT NULL DEFAULT 0,        -- a rate given (--rpm) or named: every_us no less
	ADD COLUMN safe_rate float8 NOT NULL DEFAULT 0,       -- grants a second
	ADD COLUMN refused_rate float8 NOT NULL DEFAULT 0,
	ADD COLUMN bounded boolean NOT NULL DEFAULT false,    -- an event came at a paced rate
	ADD COLUMN stairs int NOT NULL DEFAULT 0,
	ADD COLUMN held int NOT NULL DEFAULT 0,
	ADD COLUMN calm int NOT NULL DEFAULT 0,
	ADD COLUMN granted bigint NOT NULL DEFAULT 0,
	ADD COLUMN limited bigint NOT NULL DEFAULT 0,
	ADD COLUMN mark_at timestamptz,                       -- NULL until the first grant
	ADD COLUMN mark_sent float8 NOT NULL DEFAULT 0,
	ADD COLUMN mark_limited bigint NOT NULL DEFAULT 0,
	ADD COLUMN window_us bigint NOT NULL DEFAULT 0;
`,
	// 4: the fleet's slow start in the quota row (see fleetlaw.go).
	`
ALTER TABLE quota
	ADD COLUMN stage_at timestamptz,                      -- when the slow start's pace began
	ADD COLUMN stage_sent float8 NOT NULL DEFAULT 0,      -- the calls sent by then
	ADD COLUMN prev_at timestamptz,                       -- the same of the stage before
	ADD COLUMN prev_sent float8 NOT NULL DEFAULT 0;
`,
	// 5: worker sessions, beaten by a heartbeat shorter than the lease
	// (see session.go). Claims record their session; rows claimed
	// before keep NULL and hold for their lease.
	`
CREATE TABLE worker_session (
	id bigserial PRIMARY KEY,
	owner text NOT NULL,
	timeout_us bigint NOT NULL CHECK (timeout_us > 0),
	beat_at timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 50);
ALTER TABLE todo ADD COLUMN session bigint;
ALTER TABLE answer_flight ADD COLUMN session bigint;
`,
	// 6: batch jobs (see batch.go). A queue row a job holds names it in
	// batch: no claim and no other job takes it.
	`
CREATE SEQUENCE batch_job_seq;
CREATE TABLE batch_job (
	num bigint PRIMARY KEY,
	stage text NOT NULL,
	closed boolean NOT NULL DEFAULT false,
	owner text,                                           -- the worker driving the job
	lease_until timestamptz NOT NULL DEFAULT '-infinity', -- its lease, on the database clock
	record bytea NOT NULL                                 -- pipeline.BatchJob as JSON
);
CREATE INDEX batch_job_open ON batch_job (stage, num) WHERE NOT closed;
ALTER TABLE todo ADD COLUMN batch bigint;
CREATE INDEX todo_batch ON todo (batch) WHERE batch IS NOT NULL;
`,
	// 7: room on each queue page for a new version of every row on it.
	// A claim rewrites a row (attempt, owner, session, lease), and the
	// new version, with its owner's name, is longer than the row: at
	// fillfactor 80 most found no room on their page, so the update was
	// not HOT and added an entry to each of the queue's indexes (27% HOT
	// at a million items; at 40 claims took half the time and WAL, and
	// one in ten still moved). It applies to pages written from now on.
	`ALTER TABLE todo SET (fillfactor = 30);`,
	// 8: how many batch jobs asked for a queue row's item at its stage
	// (batchsends.go).
	`ALTER TABLE todo ADD COLUMN batch_sends smallint NOT NULL DEFAULT 0;`,
	// 9: the per-period cube (cube.go), kept by every fold from now on;
	// backfills[12] builds it from a pipeline's done items.
	`
CREATE TABLE cube_cell (cell bytea, label text, shard smallint,
	n bigint NOT NULL,                                    -- items
	rn bigint NOT NULL,                                   -- rated items
	rsum numeric NOT NULL,                                -- their ratings, scaled (pipeline.RatingScale)
	PRIMARY KEY (cell, label, shard)
) WITH (fillfactor = 50);                                 -- room for HOT updates: a commit updates hundreds
CREATE TABLE cube_quote (
	item_id text PRIMARY KEY,
	cell bytea NOT NULL,
	label text NOT NULL,
	conf float8 NOT NULL,
	rating float8
);
CREATE INDEX cube_quote_best ON cube_quote (cell, label, conf DESC, item_id COLLATE "C");
`,
	// 10: outputs indexed once, by their primary key (item_id, stage).
	// The second index, by (stage, item_id), served only the walks of a
	// whole stage (export --stage, the counts, checks), which read most
	// of the table anyway; at a million items it held 0.1 GB, rewritten
	// by every commit.
	`DROP INDEX IF EXISTS output_stage;`,
	// 11: an output that repeats its item's text (what sanitizing a
	// clean text gives) is stored marked, the text cut out (mark.go);
	// backfills[11] marks the outputs stored before. Readers of this
	// version read both forms; an older sawtooth would not.
	`COMMENT ON TABLE output IS 'an output whose first byte is 1 or 2 is stored without its item''s text (mark.go)';`,
	// 12: a quote row names its cube cell and label by a small id
	// (cube_key) instead of the cell's key and the label, stored in the
	// row and again in its index: 4 bytes for about 40 on every done item.
	`
CREATE TABLE cube_key (
	id int GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
	cell bytea NOT NULL,
	label text NOT NULL,
	UNIQUE (cell, label)
);
INSERT INTO cube_key (cell, label) SELECT cell, label FROM cube_quote UNION SELECT cell, label FROM cube_cell ORDER BY 1, 2;
CREATE TABLE cube_quote_by_key (
	item_id text PRIMARY KEY,
	key_id int NOT NULL,                                  -- cube_key.id
	conf float8 NOT NULL,
	rating float8
);
INSERT INTO cube_quote_by_key SELECT q.item_id, k.id, q.conf, q.rating FROM cube_quote q JOIN cube_key k USING (cell, label);
DROP TABLE cube_quote;
ALTER TABLE cube_quote_by_key RENAME TO cube_quote;
ALTER INDEX cube_quote_by_key_pkey RENAME TO cube_quote_pkey;
CREATE INDEX cube_quote_best ON cube_quote (key_id, conf DESC, item_id COLLATE "C");
`,
	// 13: outputs stored packed (pack.go) and records binary
	// (binrecord.go); backfills[13] rewrites the rows stored before.
	// Readers of this version read every form; an older sawtooth would
	// not.
	`
COMMENT ON TABLE output IS 'an output whose first byte is 1 or 2 is stored without its item''s text (mark.go), 3 packed (pack.go)';
COMMENT ON TABLE item IS 'a record whose first byte is 3 is binary (binrecord.go), else JSON';
`,
	// 14: the content hash (pipeline.Record.ContentHash, 16 bytes in
	// hex) stored as its 16 bytes, 17 with the length, not 33: ingest's
	// only use of it is to compare it, as hex through encode and decode in SQL
	// (lockStates, putItemSQL). A hash that is not hex, which no
	// sawtooth wrote, becomes empty, which no hash equals: the next
	// ingest of its item stores the record again and redoes no work
	// unless its content changed. A column already bytea is left as it
	// is: the step may run again on a pipeline whose version alone
	// was set back.
	`
DO $$ BEGIN
	IF (SELECT atttypid FROM pg_attribute WHERE attrelid = 'item'::regclass AND attname = 'content_hash') = 'text'::regtype THEN
		ALTER TABLE item ALTER COLUMN content_hash TYPE bytea
			USING CASE WHEN content_hash ~ '^([0-9a-f]{2})*$' THEN decode(content_hash, 'hex') ELSE ''::bytea END;
	END IF;
END $$;
COMMENT ON TABLE item IS 'a record whose first byte is 3 is binary (binrecord.go), else JSON; content_hash is the hash''s bytes';
`,
	// 15: one row of outputs per item (outrow.go): the rows by (item_id,
	// stage) are renamed output_by_stage and backfills[15] frames them
	// into the new table, then drops them (at once when there are none:
	// a new pipeline). A table output already without a stage column is
	// left as it is: the step may run again on a pipeline whose version
	// alone was set back.
	`
DO $$ BEGIN
	IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'output'::regclass AND attname = 'stage' AND NOT attisdropped) THEN
		ALTER TABLE output RENAME TO output_by_stage;
		ALTER INDEX output_pkey RENAME TO output_by_stage_pkey;
		CREATE TABLE output (
			item_id text PRIMARY KEY,
			data bytea NOT NULL
		);
		IF NOT EXISTS (SELECT 1 FROM output_by_stage) THEN
			DROP TABLE output_by_stage;
		END IF;
	END IF;
END $$;
COMMENT ON TABLE output IS 'an item''s outputs of every stage, framed (outrow.go), each whole, marked (mark.go) or packed (pack.go)';
`,
	// 16: each done item's cube quote (its cube_key id and classify
	// confidence) in its row of outputs, indexed in report's quote order
	// where it has one; the quote's rating is its fact's, read from the
	// last stage's entry of the same row (cube.go). cube_quote (a row, a
	// key and an index entry per done item) goes. output is rebuilt from
	// its rows and cube_quote as fresh rows: an UPDATE of every done row
	// would leave as many dead versions until VACUUM. While the step
	// runs the new output sits beside the old one and cube_quote: it
	// needs free disk about the size of output. A quote of an item
	// without a row of outputs (damage Check reported: "not done but has
	// a quote") has nowhere to go and is dropped. When cube_quote is not
	// there the step ran before (the version alone set back) and output
	// is left as it is; a pipeline set back further gets cube_quote again
	// from steps 9 and 12, and its output's stale key ids are replaced
	// here: only item_id and data are taken from the old table. The
	// columns come after data, so a new pipeline and a migrated one store
	// the same bytes; the primary key is built after the load (leaves 90%
	// full, as compact's) and ANALYZE gives the planner the fresh table's
	// row counts (readCubeQuotes' LATERAL).
	`
DO $$ BEGIN
	IF to_regclass('cube_quote') IS NOT NULL THEN
		ALTER TABLE output RENAME TO output_unquoted;
		ALTER INDEX output_pkey RENAME TO output_unquoted_pkey;
		CREATE TABLE output (
			item_id text NOT NULL,
			data bytea NOT NULL,
			key_id int,                                   -- cube_key.id of a done item's fact
			conf float8,                                  -- its classify confidence (confidenceOf)
			CHECK ((key_id IS NULL) = (conf IS NULL))
		);
		INSERT INTO output (item_id, data, key_id, conf)
			SELECT o.item_id, o.data, q.key_id, q.conf FROM output_unquoted o LEFT JOIN cube_quote q USING (item_id);
		ALTER TABLE output ADD PRIMARY KEY (item_id);
		DROP TABLE output_unquoted, cube_quote;
	END IF;
END $$;
CREATE INDEX IF NOT EXISTS output_quote ON output (key_id, conf DESC, item_id COLLATE "C") WHERE key_id IS NOT NULL;
COMMENT ON TABLE output IS 'an item''s outputs of every stage, framed (outrow.go), each whole, marked (mark.go) or packed (pack.go); key_id, conf: a done item''s cube quote (cube.go)';
ANALYZE output;
`,
	// 17: the content hash is not stored: ingest, its only reader,
	// derives it from the stored record it reads anyway (lockStates),
	// 17 bytes per item. Rows stored before give the bytes back at the
	// next compact (VACUUM FULL writes a dropped column as NULL, which
	// the null bitmap in the header's padding holds); rows written from
	// now on never have them. Step 14 leaves a dropped column alone (its
	// attname no longer matches), so the steps run again on a pipeline
	// whose version alone was set back.
	`
ALTER TABLE item DROP COLUMN IF EXISTS content_hash;
COMMENT ON TABLE item IS 'a record whose first byte is 3 is binary (binrecord.go), else JSON';
`,
	// 18: records name their fields by number and leave out their id,
	// the row's key (names.go, binrecord.go): 30 to 40 bytes a review,
	// more for a wide CSV. backfills[18] rewrites the records stored
	// before (those it cannot stay as they are, and read as before). The
	// step runs again on a pipeline of this version whose version alone
	// was set back.
	`
CREATE TABLE IF NOT EXISTS field_name (
	id integer GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
	name text NOT NULL UNIQUE
);
COMMENT ON TABLE item IS 'a record whose first byte is 4 is binary, its id the row''s and its field names by field_name id, 3 binary with both written out (binrecord.go), else JSON';
`,
}

// backfills[v], when set, runs right after migrations[v-1] on a schema
// that held a pipeline before (not on a new one), in the same
// transaction: what a step needs computed in Go from the stored rows.
// It is given the version the migration began at.
var backfills = map[int]func(db *DB, ctx context.Context, tx pgx.Tx, from int) error{
	11: func(db *DB, ctx context.Context, tx pgx.Tx, _ int) error { return db.backfillMarks(ctx, tx) },
	13: func(db *DB, ctx context.Context, tx pgx.Tx, _ int) error { return db.backfillPacked(ctx, tx) },
	15: func(db *DB, ctx context.Context, tx pgx.Tx, _ int) error { return backfillOutputRows(ctx, tx) },
	18: func(db *DB, ctx context.Context, tx pgx.Tx, _ int) error { return backfillNames(ctx, tx) },
	// The cube is built in its layout of step 12, once that layout is
	// there (queueLegacyQuotes); step 16 moves its quotes into output.
	12: func(db *DB, ctx context.Context, tx pgx.Tx, from int) error {
		if from >= 9 {
			return nil
		}
		return db.backfillCube(ctx, tx)
	},
}

// Meta keys.
const (
	keySchema  = "schema"
	keyDef     = "definition"
	keyCreated = "created"
)

func limitKey(stage string) string { return "limit/" + stage }

type definition struct {
	Stages []pipeline.StageDef `json:"stages"`
}

// OldSchemaError is a read-only open's refusal of a schema an older
// sawtooth wrote: a writable open (a run, or a migration) upgrades it.
type OldSchemaError struct {
	// Path is the database, without its password; Version its schema
	// version and Want this sawtooth's.
	Path          string
	Version, Want int
}

// Error names the database and both schema versions.
func (e *OldSchemaError) Error() string {
	return fmt.Sprintf("open %s: schema version %d is older than this sawtooth's %d", e.Path, e.Version, e.Want)
}

// schemaLockKey is the advisory lock two first opens of one schema
// serialise on (hashtext of this prefix and the schema name).
const schemaLockPrefix = "sawtooth schema "

// init creates or migrates the schema and checks the stored definition,
// in one transaction under a transaction-level advisory lock: two
// processes opening a new database at once do not race, and the lock
// goes with the transaction whatever happens to the connection.
func (db *DB) init(ctx context.Context, opt Options) error {
	return db.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, schemaLockPrefix+db.schema); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, db.ident+".meta").Scan(&exists); err != nil {
			return err
		}
		version := 0
		if exists {
			var raw []byte
			err := tx.QueryRow(ctx, `SELECT value FROM meta WHERE key = $1`, keySchema).Scan(&raw)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("open %s: schema %s has a meta table without a version: %w (choose another schema or database)", db.path, db.schema, ErrNotSawtooth)
			}
			if err != nil {
				return err
			}
			if version, err = strconv.Atoi(string(raw)); err != nil {
				return fmt.Errorf("open %s: bad schema version %q: %w", db.path, raw, ErrNotSawtooth)
			}
			if version > SchemaVersion {
				return fmt.Errorf("open %s: schema version %d, this sawtooth reads up to %d: %w (upgrade sawtooth)", db.path, version, SchemaVersion, ErrNewerSchema)
			}
		}
		if version == 0 && (opt.ReadOnly || opt.MustExist) {
			return fmt.Errorf("no sawtooth pipeline in schema %s of %s: %w (check the URL, or create the pipeline first)", db.schema, db.path, ErrNotFound)
		}
		if version < SchemaVersion && opt.ReadOnly {
			return &OldSchemaError{Path: db.path, Version: version, Want: SchemaVersion}
		}
		if version < SchemaVersion {
			if version > 0 {
				// Under the schema lock: a worker opening meanwhile waits
				// for the migration and then sees the new schema.
				if err := db.checkNoLiveWorkers(ctx, tx, version); err != nil {
					return err
				}
			}
			if err := db.migrate(ctx, tx, version); err != nil {
				return err
			}
		}
		if version == 0 {
			def, _ := json.Marshal(definition{Stages: db.stages})
			_, err := tx.Exec(ctx, `INSERT INTO meta (key, value) VALUES ($1, $2), ($3, $4)`,
				keyDef, def, keyCreated, []byte(db.now().UTC().Format(time.RFC3339)))
			return err
		}
		return db.checkDefinition(ctx, tx)
	})
}

// ErrLiveWorkers is returned by a writable Open that would migrate a
// pipeline some workers still hold: they check the schema only when they
// open, and would go on committing by the old version's rules.
var ErrLiveWorkers = errors.New("workers of an older sawtooth are live")

// OpenAgain ends what ErrLiveWorkers's message says to do; a command
// line says what to run instead.
const OpenAgain = "open it again"

// liveWorker is a worker checkNoLiveWorkers found: the items it holds
// under a live claim and whether its session is alive.
type liveWorker struct {
	owner string
	held  int
	until float64 // seconds until its last lease ends
	alive bool
}

// maxNamed is how many live workers a refusal names.
const maxNamed = 10

// checkNoLiveWorkers refuses to migrate a schema at version from while a
// worker holds a claim whose lease lasts or beats a live session (schema
// 5 on). A claim of a dead session counts until its lease ends, though
// other workers may take it: its worker learns of its session only at
// its next beat, and commits the answers it had sent until then.
func (db *DB) checkNoLiveWorkers(ctx context.Context, tx pgx.Tx, from int) error {
	claimed, sessions := `q.visible_at > now()`, `SELECT NULL::text, 0 WHERE false`
	if from >= 5 {
		sessions = `SELECT s.owner, 1 FROM worker_session s WHERE ` + aliveSQL
	}
	rows, _ := tx.Query(ctx, `SELECT owner, count(*) FILTER (WHERE kind = 0),
			extract(epoch FROM coalesce(max(until) FILTER (WHERE kind = 0), now()) - now())::float8, bool_or(kind = 1)
		FROM (SELECT q.owner, 0 AS kind, q.visible_at AS until FROM todo q WHERE q.owner IS NOT NULL AND `+claimed+`
			UNION ALL SELECT owner, kind, NULL FROM (`+sessions+`) AS s (owner, kind)) AS w
		GROUP BY owner ORDER BY owner`)
	var live []liveWorker
	var w liveWorker
	_, err := pgx.ForEachRow(rows, []any{&w.owner, &w.held, &w.until, &w.alive}, func() error {
		live = append(live, w)
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate schema %s of %s: look for live workers: %w", db.schema, db.path, err)
	}
	if len(live) == 0 {
		return nil
	}
	names := make([]string, len(live))
	for i, w := range live {
		var what []string
		if w.held > 0 {
			items := "items"
			if w.held == 1 {
				items = "item"
			}
			what = append(what, fmt.Sprintf("%d %s claimed, leases end in %v", w.held, items, time.Duration(w.until*float64(time.Second)).Round(time.Second)))
		}
		if w.alive {
			what = append(what, "a live session")
		}
		names[i] = fmt.Sprintf("%s (%s)", w.owner, strings.Join(what, "; "))
	}
	if len(names) > maxNamed {
		names = append(names[:maxNamed], fmt.Sprintf("and %d more", len(live)-maxNamed))
	}
	verb := "work"
	if len(live) == 1 {
		verb = "works"
	}
	return fmt.Errorf("migrate schema %s of %s from version %d to %d: %s still %s on it by the old version's rules: %w (stop those workers, or wait for their leases and sessions to end, then %s)",
		db.schema, db.path, from, SchemaVersion, strings.Join(names, ", "), verb, ErrLiveWorkers, OpenAgain)
}

func (db *DB) migrate(ctx context.Context, tx pgx.Tx, from int) error {
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+db.ident); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42501" {
			return fmt.Errorf("create schema %s in %s: %w (grant this user CREATE on the database, or have the schema created for it)", db.schema, db.path, err)
		}
		return fmt.Errorf("create schema %s in %s: %w", db.schema, db.path, err)
	}
	// The connection's search_path may have named the schema before it
	// existed; set it again now that it does.
	if _, err := tx.Exec(ctx, `SET LOCAL search_path = `+db.ident); err != nil {
		return err
	}
	if from > 0 {
		if err := watchClient(ctx, tx); err != nil {
			return fmt.Errorf("migrate schema %s of %s: %w", db.schema, db.path, err)
		}
	}
	for v := from + 1; v <= SchemaVersion; v++ {
		if _, err := tx.Exec(ctx, migrations[v-1]); err != nil {
			return fmt.Errorf("migrate schema %s to version %d: %w", db.schema, v, err)
		}
		if fill := backfills[v]; fill != nil && from > 0 {
			if err := fill(db, ctx, tx, from); err != nil {
				return fmt.Errorf("migrate schema %s to version %d: %w", db.schema, v, err)
			}
		}
	}
	_, err := tx.Exec(ctx, `INSERT INTO meta (key, value) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`, keySchema, []byte(strconv.Itoa(SchemaVersion)))
	return err
}

func (db *DB) checkDefinition(ctx context.Context, tx pgx.Tx) error {
	stored, err := readDefinition(ctx, tx)
	if err != nil {
		return fmt.Errorf("open %s: %w", db.path, err)
	}
	if !slices.EqualFunc(stored, db.stages, func(a, b pipeline.StageDef) bool { return a.Name == b.Name }) {
		return fmt.Errorf("open %s: it holds stages %s, this run has %s: %w (choose another database or schema)",
			db.path, stageNames(stored), stageNames(db.stages), ErrDefinition)
	}
	for i, s := range stored {
		if s.Fingerprint != db.stages[i].Fingerprint {
			db.changed = append(db.changed, s.Name)
		}
	}
	return nil
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func readDefinition(ctx context.Context, q querier) ([]pipeline.StageDef, error) {
	var raw []byte
	if err := q.QueryRow(ctx, `SELECT value FROM meta WHERE key = $1`, keyDef).Scan(&raw); err != nil {
		return nil, fmt.Errorf("read pipeline definition: %w", err)
	}
	var def definition
	if err := json.Unmarshal(raw, &def); err != nil {
		return nil, fmt.Errorf("bad pipeline definition: %w", ErrNotSawtooth)
	}
	return def.Stages, nil
}
