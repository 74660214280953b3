package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"

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
	// ErrCorrupt is returned for a bbolt file whose pages fail their
	// checks (damaged, truncated): restore it from a backup.
	ErrCorrupt = errors.New("database file is corrupt")
	// ErrNotDatabase is returned by Open for a path that holds something
	// other than a bbolt file: an empty file, another kind of file, a
	// directory, a FIFO or a device. Only a path that does not exist gets
	// a new database.
	ErrNotDatabase = errors.New("not a database file")
	// ErrNewerSchema is returned by Open for a file from a newer sawtooth.
	ErrNewerSchema = errors.New("database was written by a newer sawtooth")
	// ErrDefinition is returned by Open when the stage list differs from the file's.
	ErrDefinition = errors.New("pipeline definition differs from the database's")
	// ErrNotFound is pipeline.ErrNotFound: an unknown item or dead letter.
	ErrNotFound = pipeline.ErrNotFound

	// errUpgrade is init's word that the file needs upgradeInto.
	errUpgrade = errors.New("older record format")
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

// StageDef is pipeline.StageDef, kept here so callers of Open compile.
type StageDef = pipeline.StageDef

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
	// Now is the clock for the times the store records (dead-letter
	// history, killed runs); nil means time.Now.
	Now func() time.Time
}

// DB is a sawtooth pipeline database. Safe for concurrent use.
type DB struct {
	bolt   *bolt.DB
	path   string
	stages []StageDef
	index  map[string]int
	// changed lists stages whose stored fingerprint differs from Options.
	changed []string
	// added holds the indexes of the stages Options added to the stored
	// list (see insertStages).
	added []int
	now   func() time.Time
	// run is the run record last saved as running by this handle: Commit
	// adds usage to it, so a killed run's record holds what it paid for.
	run atomic.Pointer[string]
	// dict caches the dict bucket (see codec.go).
	dict *dict
	// released is when the file mapping's pages were last released, in
	// Unix nanoseconds (see releaseMapped).
	released atomic.Int64
	// format is the file's record format (format.go).
	format int
	// settle holds how far this handle has packed each out/<stage>
	// bucket (settle.go).
	settle settleMarks
	// held are the answer tables the reading of field names kept for the
	// walk after it (heldtable.go).
	held heldTables
	// pages reads the answers' B-trees with pread (pread.go); nil reads
	// them through bbolt.
	pages *pageReader
	// writing is what the open write transaction has cached (pread.go).
	writing txAnswers
	// confs holds the confidence of classify outputs this handle wrote,
	// for the cube's folds (confmemo.go).
	confs confMemo
}

// Open opens or creates the pipeline database at path (mode 0600).
func Open(path string, opt Options) (*DB, error) {
	if err := createWhole(path, opt); err != nil {
		return nil, err
	}
	return open(path, opt)
}

// createWhole builds a new database beside path and links it into place
// complete, when path does not exist and opt may create it: built in
// place, a process killed between bbolt's creating the file and its
// first commit left an empty or half-written file that every later run
// refused (a database is only created where nothing is). A kill now
// leaves at most the build's own file, path+".new-PID", and nothing at
// path.
func createWhole(path string, opt Options) error {
	if opt.ReadOnly || opt.MustExist || len(opt.Stages) == 0 {
		return nil
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		return nil // there is something to open, or open says why not
	}
	tmp := fmt.Sprintf("%s.new-%d", path, os.Getpid())
	os.Remove(tmp) // a build this pid left (a pid is reused only after a reboot, or much later)
	defer os.Remove(tmp)
	db, err := open(tmp, opt)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := db.Close(); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	// Link, not rename: a database another process created meanwhile
	// stays, and this one is dropped.
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

// open is Open without the creation step.
func open(path string, opt Options) (*DB, error) {
	if len(opt.Stages) == 0 {
		return nil, errors.New("open store: no stages")
	}
	timeout := opt.LockTimeout
	if timeout <= 0 {
		timeout = DefaultLockTimeout
	}
	if err := checkPath(path, opt.MustExist || opt.ReadOnly); err != nil {
		return nil, err
	}
	if err := checkFile(path); err != nil {
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
	bdb.AllocSize = allocSize
	db := &DB{bolt: bdb, path: path, stages: opt.Stages, index: map[string]int{}, now: opt.Now, dict: newDict()}
	if db.now == nil {
		db.now = time.Now
	}
	for i, s := range opt.Stages {
		db.index[s.Name] = i
	}
	if err := db.init(opt.ReadOnly); err != nil {
		bdb.Close()
		if errors.Is(err, errUpgrade) {
			// A writable open upgrades a file of an older record format
			// first, as `sawtooth compact` does: into a copy that replaces
			// it, so a kill leaves the original.
			if _, err := Compact(path, opt.LockTimeout); err != nil {
				return nil, fmt.Errorf("open %s: upgrade it from record format %d to %d: %w", path, db.format, FormatVersion, err)
			}
			return open(path, opt)
		}
		return nil, err
	}
	if !opt.ReadOnly {
		if err := db.markKilledRuns(); err != nil {
			bdb.Close()
			return nil, err
		}
		if err := db.ensureCube(); err != nil {
			bdb.Close()
			return nil, fmt.Errorf("open %s: build the report cube: %w", path, err)
		}
		if err := db.ensureCounts(); err != nil {
			bdb.Close()
			return nil, fmt.Errorf("open %s: count the items: %w", path, err)
		}
		writePid(lockInfoPath(path))
	}
	db.pages = newPageReader(path, bdb)
	if !opt.ReadOnly {
		db.releaseMapped() // what the opening checks read is not needed again
	}
	return db, nil
}

func lockInfoPath(path string) string { return path + ".pid" }

// writePid records this process's id beside the DB for the "in use"
// message. It is a hint, so failing to write it is not an error. On Unix
// it never follows a symlink (O_NOFOLLOW, pidOpenFlags), so a link
// planted at <db>.pid cannot make sawtooth overwrite the file it points
// at, and never waits for a reader of a FIFO planted there (O_NONBLOCK).
func writePid(path string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|pidOpenFlags, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return // a device planted there: write nothing
	}
	// Truncate only now: O_TRUNC would act on whatever was planted.
	if f.Truncate(0) == nil {
		_, _ = f.WriteString(strconv.Itoa(os.Getpid()))
	}
}

// AnotherDB ends Open's errors for a path that holds no usable
// database: what to do, in the store's words. A front end that knows how
// the path was given words it as its own setting.
const AnotherDB = "choose another database"

// checkPath refuses a path that is not a regular file before bbolt sees
// it: bbolt would silently lay a new database over an empty file, hang on
// a FIFO, and fail obscurely on a directory or a dangling symlink. Only a
// path that does not exist gets a new database, and not when mustExist.
func checkPath(path string, mustExist bool) error {
	const choose = AnotherDB
	lfi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		if mustExist {
			return fmt.Errorf("no database at %s: %w (check the path, or create the database first)", path, ErrNotFound)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) && lfi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("open %s: %w: it is a symlink to a missing file (%s, or create the target first)", path, ErrNotDatabase, choose)
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	switch {
	case fi.IsDir():
		return fmt.Errorf("open %s: %w: it is a directory (give a file path, e.g. %s)", path, ErrNotDatabase, filepath.Join(path, "sawtooth.db"))
	case !fi.Mode().IsRegular():
		return fmt.Errorf("open %s: %w: it is not a regular file (%s; %s)", path, ErrNotDatabase, fi.Mode().Type(), choose)
	case fi.Size() == 0:
		return fmt.Errorf("open %s: %w: the file is empty (0 bytes), not a sawtooth database; a new database is only created at a path that does not exist: remove the file or %s", path, ErrNotDatabase, choose)
	}
	return nil
}
func openError(path string, err error) error {
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		pid := ""
		if b, rerr := os.ReadFile(lockInfoPath(path)); rerr == nil {
			pid = " (pid " + strings.TrimSpace(string(b)) + ")"
		}
		return &inUseError{path: path, pid: pid}
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum),
		errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrInvalidMapping):
		return fmt.Errorf("open %s: %v: %w (restore it from a backup, or %s)", path, err, ErrCorrupt, AnotherDB)
	default:
		// bbolt reports some garbage files as generic errors (e.g. a file
		// too small to hold its meta pages).
		if fi, serr := os.Stat(path); serr == nil && fi.Mode().IsRegular() && !errors.Is(err, os.ErrPermission) && fi.Size() > 0 && fi.Size() < 4096*2 {
			return fmt.Errorf("open %s: %v: %w (restore it from a backup, or %s)", path, err, ErrCorrupt, AnotherDB)
		}
		return fmt.Errorf("open %s: %w", path, err)
	}
}

type definition struct {
	Stages []StageDef `json:"stages"`
}

// init reads the file's meta, then upgrades a file an older sawtooth
// wrote or creates a new one (never read-only).
func (db *DB) init(readOnly bool) error {
	var (
		fresh  bool
		stored []StageDef // the stored list, when this one adds stages to it
	)
	err := db.view(func(tx *bolt.Tx) (err error) {
		fresh, stored, err = db.readMeta(tx, readOnly)
		return err
	})
	if err != nil {
		return err
	}
	switch {
	case !fresh && readOnly:
		return nil
	case !fresh:
		return db.upgrade(stored)
	case readOnly:
		return &pipeline.EmptyDatabaseError{Path: db.path, Err: ErrNotSawtooth}
	}
	return db.create()
}

// readMeta reads the file's schema, record format, dictionary sequence
// (no entry: see dict) and stage list: fresh when the file holds nothing yet; stored is the stored stage
// list when this one adds stages to it (db.added says which).
func (db *DB) readMeta(tx *bolt.Tx, readOnly bool) (fresh bool, stored []StageDef, err error) {
	meta, format, err := metaOf(db.path, tx)
	if err != nil || meta == nil {
		return meta == nil && err == nil, nil, err
	}
	db.format = format
	db.dict.open(tx)
	var def definition
	if err := json.Unmarshal(meta.Get(keyDef), &def); err != nil {
		return false, nil, fmt.Errorf("open %s: bad pipeline definition: %w", db.path, ErrNotSawtooth)
	}
	if !slices.EqualFunc(def.Stages, db.stages, func(a, b StageDef) bool { return a.Name == b.Name }) {
		added, ok := insertedStages(def.Stages, db.stages)
		if !ok || readOnly {
			return false, nil, fmt.Errorf("open %s: it holds stages %s, this run has %s: %w (stages may be added, not removed or reordered; %s)",
				db.path, stageNames(def.Stages), stageNames(db.stages), ErrDefinition, AnotherDB)
		}
		stored, db.added = def.Stages, added
	}
	for _, s := range def.Stages {
		if s.Fingerprint != db.stages[db.index[s.Name]].Fingerprint {
			db.changed = append(db.changed, s.Name)
		}
	}
	return false, stored, nil
}

// metaOf returns the meta bucket of the file at path and its record
// format, once its schema and format are ones this sawtooth reads; a nil
// bucket and no error when the file holds nothing yet.
func metaOf(path string, tx *bolt.Tx) (meta *bolt.Bucket, format int, err error) {
	meta = tx.Bucket(bucketMeta)
	if meta == nil {
		empty := true
		_ = tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
		if !empty {
			return nil, 0, fmt.Errorf("open %s: %w (it holds other data; %s)", path, ErrNotSawtooth, AnotherDB)
		}
		return nil, 0, nil
	}
	v, err := strconv.Atoi(string(meta.Get(keySchema)))
	if err != nil {
		return nil, 0, fmt.Errorf("open %s: bad schema version %q: %w", path, meta.Get(keySchema), ErrNotSawtooth)
	}
	if v > SchemaVersion {
		return nil, 0, fmt.Errorf("open %s: schema version %d, this sawtooth reads up to %d: %w (upgrade sawtooth)", path, v, SchemaVersion, ErrNewerSchema)
	}
	format, err = fileFormat(meta)
	if err != nil {
		return nil, 0, fmt.Errorf("open %s: %v: %w", path, err, ErrNotSawtooth)
	}
	if format > FormatVersion {
		return nil, 0, fmt.Errorf("open %s: record format %d, this sawtooth reads up to %d: %w (upgrade sawtooth)", path, format, FormatVersion, ErrNewerSchema)
	}
	return meta, format, nil
}

// upgrade brings a file an older sawtooth wrote up to this one: the
// buckets it lacks, the record format and the stages added.
func (db *DB) upgrade(stored []StageDef) error {
	if err := db.addBuckets(); err != nil {
		return err
	}
	if db.format < sharedFormat-1 {
		return errUpgrade
	}
	if db.format < FormatVersion {
		if err := db.raiseFormat(); err != nil {
			return err
		}
	}
	if len(db.added) > 0 {
		return db.insertStages(stored, db.added)
	}
	return nil
}

// create writes a new file's meta and buckets.
func (db *DB) create() error {
	db.format = FormatVersion
	return db.update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		def, _ := json.Marshal(definition{Stages: db.stages})
		for k, v := range map[string][]byte{
			string(keySchema):  []byte(strconv.Itoa(SchemaVersion)),
			string(keyFormat):  []byte(strconv.Itoa(FormatVersion)),
			string(keyDef):     def,
			string(keyCreated): []byte(time.Now().UTC().Format(time.RFC3339)),
		} {
			if err := meta.Put([]byte(k), v); err != nil {
				return err
			}
		}
		names := [][]byte{bucketItems, bucketState, bucketAgg, bucketRuns, bucketHistory, bucketUsage, bucketDict}
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

// raiseFormat marks a format 2 to 6 file as format 7 in place, in one
// transaction that puts one key: its records are all valid format 7
// records (see sharedFormat, editFormat, longFormat, shortRefFormat,
// usageInFormat).
func (db *DB) raiseFormat() error {
	err := db.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyFormat, []byte(strconv.Itoa(FormatVersion)))
	})
	if err == nil {
		db.format = FormatVersion
	}
	return err
}

// addBuckets creates, in a file written by an older sawtooth, the buckets
// added since; it writes nothing when they exist.
func (db *DB) addBuckets() error {
	missing := false
	_ = db.view(func(tx *bolt.Tx) error {
		missing = tx.Bucket(bucketHistory) == nil || tx.Bucket(bucketUsage) == nil
		return nil
	})
	if !missing {
		return nil
	}
	return db.update(func(tx *bolt.Tx) error {
		for _, n := range [][]byte{bucketHistory, bucketUsage} {
			if _, err := tx.CreateBucketIfNotExists(n); err != nil {
				return err
			}
		}
		return nil
	})
}

func stageNames(defs []StageDef) string { return strings.Join(pipeline.StageNames(defs), ",") }

// StoredDefinition is the pipeline definition recorded in the file by the
// last run (or AcceptDefinition).
func (db *DB) StoredDefinition() ([]StageDef, error) {
	var def definition
	err := db.view(func(tx *bolt.Tx) error {
		return json.Unmarshal(tx.Bucket(bucketMeta).Get(keyDef), &def)
	})
	return def.Stages, err
}

// AddedStages lists the stages this open added to the stored stage list,
// in pipeline order; the items that had passed the first of them were
// sent back to its queue.
func (db *DB) AddedStages() []string {
	names := make([]string, len(db.added))
	for i, a := range db.added {
		names[i] = db.stages[a].Name
	}
	return names
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
	db.held.drop()
	db.pages.close()
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

// inUseError is ErrInUse for one file, naming the process that holds it
// when its pid file says; it words the sentence once (wrapping ErrInUse
// repeated it).
type inUseError struct{ path, pid string }

func (e *inUseError) Error() string {
	return fmt.Sprintf("database %s is in use by another sawtooth process%s: wait for it to finish or stop it first", e.path, e.pid)
}

// Is makes errors.Is(err, ErrInUse) hold.
func (e *inUseError) Is(target error) bool { return target == ErrInUse }
