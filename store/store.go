package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// SchemaVersion is the layout version this package reads and writes.
const SchemaVersion = 1

// DefaultLockTimeout is how long Open waits for another process's lock.
const DefaultLockTimeout = 2 * time.Second

var (
	// ErrInUse is returned by Open when another process holds the file.
	ErrInUse = errors.New("database is in use by another sawtooth process")
	// ErrNotSawtooth is returned by Open for a bbolt file sawtooth did not create.
	ErrNotSawtooth = errors.New("not a sawtooth database")
	// ErrCorrupt is returned by Open for a file bbolt cannot read.
	ErrCorrupt = errors.New("database file is corrupt or not a database")
	// ErrNewerSchema is returned by Open for a file from a newer sawtooth.
	ErrNewerSchema = errors.New("database was written by a newer sawtooth")
	// ErrDefinition is returned by Open when the stage list differs from the file's.
	ErrDefinition = errors.New("pipeline definition differs from the database's")
	// ErrNotFound is returned for an unknown item or dead letter.
	ErrNotFound = errors.New("not found")
)

var (
	bucketMeta  = []byte("meta")
	bucketItems = []byte("items")
	bucketState = []byte("state")
	bucketAgg   = []byte("agg")
	bucketRuns  = []byte("runs")
	keySchema   = []byte("schema")
	keyDef      = []byte("definition")
	keyCreated  = []byte("created")
)

func todoBucket(stage string) []byte { return []byte("todo/" + stage) }
func outBucket(stage string) []byte  { return []byte("out/" + stage) }
func deadBucket(stage string) []byte { return []byte("dead/" + stage) }
func seriesBucket(run string) []byte { return []byte("series/" + run) }
func limitKey(stage string) []byte   { return []byte("limit/" + stage) }

// StageDef names one stage and fingerprints its configuration (model,
// prompt version, label set...): a changed fingerprint means outputs of
// that stage were produced by another configuration.
type StageDef struct {
	Name        string `json:"name"`
	Fingerprint string `json:"fingerprint,omitempty"`
	// Config is the stage's configuration as the run gave it, kept so
	// later commands (verify) can use the same one.
	Config json.RawMessage `json:"config,omitempty"`
}

// Options configure Open.
type Options struct {
	// Stages is the pipeline definition, in order. Required.
	Stages []StageDef
	// LockTimeout bounds the wait for another process's file lock;
	// zero means DefaultLockTimeout.
	LockTimeout time.Duration
	// ReadOnly opens the file without write access (status, report, export).
	ReadOnly bool
	// MustExist refuses to create the file: commands that only act on an
	// existing pipeline (retry, rerun, dlq requeue) must not turn a typo
	// into a new empty database.
	MustExist bool
	// NoSync skips fsync on commit: only for benchmarks of the engine
	// itself; a crash may lose recent commits.
	NoSync bool
}

// DB is a sawtooth pipeline database. Safe for concurrent use.
type DB struct {
	bolt   *bolt.DB
	path   string
	stages []StageDef
	index  map[string]int
	// changed lists stages whose stored fingerprint differs from Options.
	changed []string
}

// Open opens or creates the pipeline database at path (mode 0600).
func Open(path string, opt Options) (*DB, error) {
	if len(opt.Stages) == 0 {
		return nil, errors.New("open store: no stages")
	}
	timeout := opt.LockTimeout
	if timeout <= 0 {
		timeout = DefaultLockTimeout
	}
	if opt.MustExist && !opt.ReadOnly {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no database at %s: %w (check --db, or create it with `sawtooth run --db %s --input FILE`)", path, ErrNotFound, path)
		}
	}
	if opt.ReadOnly {
		fi, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
		// bbolt would try to write a fresh layout into it, and fail with
		// "bad file descriptor".
		if fi.Mode().IsRegular() && fi.Size() == 0 {
			return nil, fmt.Errorf("open %s: %w (it is empty: run `sawtooth run` first)", path, ErrNotSawtooth)
		}
	}
	if err := checkTruncated(path); err != nil {
		return nil, err
	}
	bdb, err := openBolt(path, &bolt.Options{
		Timeout:      timeout,
		ReadOnly:     opt.ReadOnly,
		NoSync:       opt.NoSync,
		FreelistType: bolt.FreelistMapType,
	})
	if errors.Is(err, ErrCorrupt) {
		return nil, err
	}
	if err != nil {
		return nil, openError(path, err)
	}
	db := &DB{bolt: bdb, path: path, stages: opt.Stages, index: map[string]int{}}
	for i, s := range opt.Stages {
		db.index[s.Name] = i
	}
	if err := db.init(opt.ReadOnly); err != nil {
		bdb.Close()
		return nil, err
	}
	if !opt.ReadOnly {
		_ = os.WriteFile(lockInfoPath(path), []byte(strconv.Itoa(os.Getpid())), 0o600)
	}
	return db, nil
}

func lockInfoPath(path string) string { return path + ".pid" }

func openError(path string, err error) error {
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		pid := ""
		if b, rerr := os.ReadFile(lockInfoPath(path)); rerr == nil {
			pid = " (pid " + strings.TrimSpace(string(b)) + ")"
		}
		return fmt.Errorf("database %s is in use by another sawtooth process%s: wait for it to finish or stop it first: %w", path, pid, ErrInUse)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum),
		errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrInvalidMapping):
		return fmt.Errorf("open %s: %v: %w (restore it from a backup, or choose another --db)", path, err, ErrCorrupt)
	default:
		// bbolt reports some garbage files as generic errors (e.g. a file
		// too small to hold its meta pages).
		if fi, serr := os.Stat(path); serr == nil && fi.Mode().IsRegular() && !errors.Is(err, os.ErrPermission) && fi.Size() > 0 && fi.Size() < 4096*2 {
			return fmt.Errorf("open %s: %v: %w (restore it from a backup, or choose another --db)", path, err, ErrCorrupt)
		}
		return fmt.Errorf("open %s: %w", path, err)
	}
}

type definition struct {
	Stages []StageDef `json:"stages"`
}

func (db *DB) init(readOnly bool) error {
	fresh := false
	err := db.view(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			empty := true
			_ = tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
			if !empty {
				return fmt.Errorf("open %s: %w (it holds other data; choose another --db)", db.path, ErrNotSawtooth)
			}
			fresh = true
			return nil
		}
		v, err := strconv.Atoi(string(meta.Get(keySchema)))
		if err != nil {
			return fmt.Errorf("open %s: bad schema version %q: %w", db.path, meta.Get(keySchema), ErrNotSawtooth)
		}
		if v > SchemaVersion {
			return fmt.Errorf("open %s: schema version %d, this sawtooth reads up to %d: %w (upgrade sawtooth)", db.path, v, SchemaVersion, ErrNewerSchema)
		}
		var def definition
		if err := json.Unmarshal(meta.Get(keyDef), &def); err != nil {
			return fmt.Errorf("open %s: bad pipeline definition: %w", db.path, ErrNotSawtooth)
		}
		if !slices.EqualFunc(def.Stages, db.stages, func(a, b StageDef) bool { return a.Name == b.Name }) {
			return fmt.Errorf("open %s: it holds stages %s, this run has %s: %w (use another --db)",
				db.path, stageNames(def.Stages), stageNames(db.stages), ErrDefinition)
		}
		for i, s := range def.Stages {
			if s.Fingerprint != db.stages[i].Fingerprint {
				db.changed = append(db.changed, s.Name)
			}
		}
		return nil
	})
	if err != nil || !fresh {
		return err
	}
	if readOnly {
		return fmt.Errorf("open %s: %w (it is empty: run `sawtooth run` first)", db.path, ErrNotSawtooth)
	}
	return db.update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		def, _ := json.Marshal(definition{Stages: db.stages})
		for k, v := range map[string][]byte{
			string(keySchema):  []byte(strconv.Itoa(SchemaVersion)),
			string(keyDef):     def,
			string(keyCreated): []byte(time.Now().UTC().Format(time.RFC3339)),
		} {
			if err := meta.Put([]byte(k), v); err != nil {
				return err
			}
		}
		names := [][]byte{bucketItems, bucketState, bucketAgg, bucketRuns}
		for _, s := range db.stages {
			names = append(names, todoBucket(s.Name), outBucket(s.Name), deadBucket(s.Name))
		}
		for _, n := range names {
			if _, err := tx.CreateBucketIfNotExists(n); err != nil {
				return err
			}
		}
		return nil
	})
}

func stageNames(defs []StageDef) string {
	names := make([]string, len(defs))
	for i, d := range defs {
		names[i] = d.Name
	}
	return strings.Join(names, ",")
}

// StoredDefinition is the pipeline definition recorded in the file by the
// last run (or AcceptDefinition).
func (db *DB) StoredDefinition() ([]StageDef, error) {
	var def definition
	err := db.view(func(tx *bolt.Tx) error {
		return json.Unmarshal(tx.Bucket(bucketMeta).Get(keyDef), &def)
	})
	return def.Stages, err
}

// ChangedStages lists the stages whose configuration fingerprint differs
// from the one the database was last run with, in pipeline order.
func (db *DB) ChangedStages() []string { return slices.Clone(db.changed) }

// AcceptDefinition records the current stage fingerprints as the
// database's, after the caller has re-run (or chosen to keep) what changed.
func (db *DB) AcceptDefinition() error {
	err := db.update(func(tx *bolt.Tx) error {
		def, _ := json.Marshal(definition{Stages: db.stages})
		return tx.Bucket(bucketMeta).Put(keyDef, def)
	})
	if err == nil {
		db.changed = nil
	}
	return err
}

// Close releases the file.
func (db *DB) Close() error {
	if !db.bolt.IsReadOnly() {
		os.Remove(lockInfoPath(db.path))
	}
	return db.bolt.Close()
}

// Path is the file's path.
func (db *DB) Path() string { return db.path }

// Stages is the pipeline definition the DB was opened with.
func (db *DB) Stages() []StageDef { return slices.Clone(db.stages) }

// SetLearnedLimit persists a stage's learned concurrency limit.
func (db *DB) SetLearnedLimit(stage string, n int) error {
	return db.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(limitKey(stage), []byte(strconv.Itoa(n)))
	})
}

// LearnedLimit is the limit persisted by the last run, 0 if none.
func (db *DB) LearnedLimit(stage string) int {
	n := 0
	_ = db.view(func(tx *bolt.Tx) error {
		n, _ = strconv.Atoi(string(tx.Bucket(bucketMeta).Get(limitKey(stage))))
		return nil
	})
	return n
}

func u64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}
