package postgres

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

var _ pipeline.Database = (*DB)(nil)

// DefaultSchema is the PostgreSQL schema a pipeline lives in when
// Options.Schema is empty.
const DefaultSchema = "sawtooth"

// DefaultIdleInTransaction bounds how long a session may sit idle inside
// a transaction: sawtooth never holds one across a call, so a session
// that does is stuck, and its snapshot would pin the queue's dead rows.
const DefaultIdleInTransaction = time.Minute

// DefaultConnectTimeout bounds each connection attempt when the DSN sets
// no connect_timeout, so an unreachable server is an error, not a hang.
const DefaultConnectTimeout = 10 * time.Second

var (
	// ErrNotSawtooth is returned by Open for a schema sawtooth did not create.
	ErrNotSawtooth = errors.New("not a sawtooth database")
	// ErrNewerSchema is returned by Open for a schema from a newer sawtooth.
	ErrNewerSchema = errors.New("database was written by a newer sawtooth")
	// ErrDefinition is returned by Open when the stage list differs from the stored one.
	ErrDefinition = errors.New("pipeline definition differs from the database's")
	// ErrNotFound is pipeline.ErrNotFound: a missing pipeline, item or
	// dead letter.
	ErrNotFound = pipeline.ErrNotFound
)

// Options configure Open. They mirror store.Options where that makes
// sense; a lock timeout and NoSync do not (PostgreSQL has many writers,
// and durability is the server's setting).
type Options struct {
	// Stages is the pipeline definition, in order. Required.
	Stages []pipeline.StageDef
	// Schema is the PostgreSQL schema holding the pipeline: one pipeline
	// per schema, so one database can hold several. Empty means
	// DefaultSchema.
	Schema string
	// ReadOnly opens every session read-only (status, report, export).
	ReadOnly bool
	// MustExist refuses to create the pipeline: commands that only act on
	// an existing one must not turn a typo into a new empty pipeline.
	MustExist bool
	// Now is the clock for the times the store records on the client side
	// (dead-letter history, creation time); nil means time.Now. Leases and
	// quota slots use the database clock only.
	Now func() time.Time
	// Owner names this process in claimed rows (status shows who holds
	// what); empty means host:pid.
	Owner string
	// MaxConns bounds the connection pool; zero means pgxpool's default
	// (the larger of 4 and the number of CPUs).
	MaxConns int32
}

// DB is a sawtooth pipeline in one PostgreSQL schema. Safe for concurrent
// use, by many goroutines and many processes on many hosts.
type DB struct {
	pool   *pgxpool.Pool
	path   string // the DSN without its password
	schema string
	ident  string // schema, quoted
	stages []pipeline.StageDef
	index  map[string]int
	// changed lists stages whose stored fingerprint differs from Options.
	changed []string
	now     func() time.Time
	owner   string
	// session is the worker session claims record (session.go); 0: none.
	// sessions are those this handle began, for EndSession.
	session   atomic.Int64
	sessionMu sync.Mutex
	sessions  []int64
	ctx       context.Context
	// shard spreads this process's folds over the aggregate rows' shards.
	shard atomic.Uint32
	// batchLease is the lease, in microseconds, of the batch jobs this
	// handle reserves or takes (the last HoldBatches'; see batch.go).
	batchLease atomic.Int64

	runMu sync.Mutex
	// run is the run record last saved as running by this handle: Commit
	// adds usage to it. runConn holds the session whose advisory lock
	// tells other processes that run is alive.
	run     atomic.Pointer[string]
	runConn *pgxpool.Conn
	// runStop ends the watch that re-takes the lock (keepRunLock);
	// runLockEvery is its period, runLockCheck but in tests.
	runStop      chan struct{}
	runLockEvery time.Duration

	// counted is the counts last read, by snapshot (read.go).
	counted countsCache

	// names are the numbers records name their fields by (names.go).
	names *fieldNames
}

// Open connects to the database named by dsn (a libpq URL or key=value
// string; the password comes from PGPASSWORD or ~/.pgpass as libpq
// reads them, or from the DSN) and opens or creates the pipeline in
// Options.Schema.
func Open(ctx context.Context, dsn string, opt Options) (*DB, error) {
	if len(opt.Stages) == 0 {
		return nil, errors.New("open store: no stages")
	}
	schema := opt.Schema
	if schema == "" {
		schema = DefaultSchema
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w (give a postgres:// URL or key=value connection string)", Redact(dsn), err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	cfg.ConnConfig.BuildFrontend = bufferedFrontend
	ident := pgx.Identifier{schema}.Sanitize()
	rp := cfg.ConnConfig.RuntimeParams
	rp["search_path"] = ident
	rp["idle_in_transaction_session_timeout"] = strconv.FormatInt(DefaultIdleInTransaction.Milliseconds(), 10)
	if rp["application_name"] == "" {
		rp["application_name"] = "sawtooth"
	}
	if opt.ReadOnly {
		rp["default_transaction_read_only"] = "on"
	}
	if opt.MaxConns > 0 {
		cfg.MaxConns = opt.MaxConns
	}
	db := &DB{
		path: Redact(dsn), schema: schema, ident: ident, stages: slices.Clone(opt.Stages),
		index: map[string]int{}, now: opt.Now, owner: opt.Owner, ctx: context.Background(), runLockEvery: runLockCheck,
	}
	if db.now == nil {
		db.now = time.Now
	}
	if db.owner == "" {
		host, _ := os.Hostname()
		db.owner = host + ":" + strconv.Itoa(os.Getpid())
	}
	for i, s := range opt.Stages {
		db.index[s.Name] = i
	}
	db.names = newFieldNames(cfg.ConnConfig.Copy())
	db.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", db.path, err)
	}
	if err := db.pool.Ping(ctx); err != nil {
		db.pool.Close()
		return nil, fmt.Errorf("connect to %s: %w (is the server running, and are host, user and password right?)", db.path, err)
	}
	if err := db.init(ctx, opt); err != nil {
		db.pool.Close()
		return nil, err
	}
	if err := db.names.load(ctx, db.pool); err != nil {
		db.pool.Close()
		return nil, fmt.Errorf("open %s: %w", db.path, err)
	}
	return db, nil
}

// Redact returns dsn without its password, for messages: the URL's
// user password and any password parameter are dropped.
func Redact(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "(an unparsable postgres URL)"
		}
		if u.User != nil {
			u.User = url.User(u.User.Username())
		}
		q := u.Query()
		if q.Has("password") {
			q.Del("password")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	var kept []string
	for _, kv := range splitKeywords(dsn) {
		k, _, _ := strings.Cut(kv, "=")
		if strings.TrimSpace(k) != "password" {
			kept = append(kept, kv)
		}
	}
	return strings.Join(kept, " ")
}

// splitKeywords splits a key=value connection string into its pairs,
// keeping single-quoted values (which may hold spaces and \' escapes)
// whole.
func splitKeywords(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, escaped := false, false
	for _, r := range s {
		switch {
		case escaped:
			escaped = false
		case r == '\\':
			escaped = true
		case r == '\'':
			quoted = !quoted
		case !quoted && (r == ' ' || r == '\t' || r == '\n'):
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
			continue
		}
		cur.WriteRune(r)
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	// "key = value" with spaces around = is legal: join the pieces.
	var joined []string
	for i := 0; i < len(out); i++ {
		p := out[i]
		for (strings.HasSuffix(p, "=") || (i+1 < len(out) && strings.HasPrefix(out[i+1], "="))) && i+1 < len(out) {
			i++
			p += out[i]
		}
		joined = append(joined, p)
	}
	return joined
}

// retryable reports errors after which a whole transaction may simply be
// run again: a deadlock or serialization failure rolled it back.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// tx runs fn in a read-committed transaction, again (up to a few times)
// when the server aborted it as a deadlock victim. fn must not keep
// results across runs.
func (db *DB) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	var err error
	for range 5 {
		err = pgx.BeginFunc(ctx, db.pool, fn)
		if !retryable(err) {
			return err
		}
	}
	return err
}

// snapshot runs fn in a read-only repeatable-read transaction: several
// statements see one state, as a bbolt read transaction does.
func (db *DB) snapshot(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

func stageNames(defs []pipeline.StageDef) string { return strings.Join(pipeline.StageNames(defs), ",") }

func (db *DB) stageIndex(stage string) (int, error) {
	si, ok := db.index[stage]
	if !ok {
		return 0, fmt.Errorf("unknown stage %q (stages: %s)", stage, stageNames(db.stages))
	}
	return si, nil
}

// StoredDefinition is the pipeline definition recorded by the last run
// (or AcceptDefinition).
func (db *DB) StoredDefinition() ([]pipeline.StageDef, error) {
	return readDefinition(db.ctx, db.pool)
}

// ChangedStages lists the stages whose configuration fingerprint differs
// from the stored one, in pipeline order.
func (db *DB) ChangedStages() []string { return slices.Clone(db.changed) }

// AcceptDefinition records the current stage fingerprints as the
// pipeline's.
func (db *DB) AcceptDefinition() error {
	def, err := jsonBytes(definition{Stages: db.stages})
	if err != nil {
		return err
	}
	if _, err := db.pool.Exec(db.ctx, `UPDATE meta SET value = $2 WHERE key = $1`, keyDef, def); err != nil {
		return fmt.Errorf("accept definition in %s: %w", db.path, err)
	}
	db.changed = nil
	return nil
}

// Stages is the pipeline definition the DB was opened with.
func (db *DB) Stages() []pipeline.StageDef { return slices.Clone(db.stages) }

// Path is the DSN without its password.
func (db *DB) Path() string { return db.path }

// Schema is the PostgreSQL schema holding the pipeline.
func (db *DB) Schema() string { return db.schema }

// SetLearnedLimit persists a stage's learned concurrency limit.
func (db *DB) SetLearnedLimit(stage string, n int) error {
	_, err := db.pool.Exec(db.ctx, `INSERT INTO meta (key, value) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`, limitKey(stage), []byte(strconv.Itoa(n)))
	return err
}

// LearnedLimit is the limit persisted by the last run, 0 if none (or
// if the database cannot be read).
func (db *DB) LearnedLimit(stage string) int {
	var raw []byte
	if err := db.pool.QueryRow(db.ctx, `SELECT value FROM meta WHERE key = $1`, limitKey(stage)).Scan(&raw); err != nil {
		return 0
	}
	n, _ := strconv.Atoi(string(raw))
	return n
}

// Close ends this handle's running run (its record then reads "killed"
// unless saved with an end status first) and closes the connections.
func (db *DB) Close() error {
	db.releaseRun()
	db.names.close()
	db.pool.Close()
	return nil
}

// bufferedFrontend reads the server's messages through a 256 KiB
// buffer: pgx's own reads at most 8 KiB at a time, a system call for
// each 8 KiB of a whole-table read's rows.
func bufferedFrontend(r io.Reader, w io.Writer) *pgproto3.Frontend {
	return pgproto3.NewFrontend(bufio.NewReaderSize(r, 256<<10), w)
}
