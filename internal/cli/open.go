package cli

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
)

// stageNames is the pipeline every sawtooth DB holds, in order.
var stageNames = []string{"sanitize", "classify", "aggregate"}

// namedStages is the stage definition by names only: what a command that
// does not run the stages opens the DB with.
func namedStages() []store.StageDef {
	defs := make([]store.StageDef, len(stageNames))
	for i, n := range stageNames {
		defs[i].Name = n
	}
	return defs
}

// How long a command that only reads waits for another process's lock
// of a bbolt file, to read its stages and to open it: briefly, as it
// then says which process holds the file. Variables so that a test can
// make each wait a single attempt (bbolt tries the lock once when the
// wait is under its 50 ms retry).
var (
	storedStagesLockWait = 200 * time.Millisecond
	readOnlyLockWait     = 500 * time.Millisecond
)

// openReadOnly opens the DB for a command that only reads. Stage
// fingerprints do not matter here, only the names.
func openReadOnly(path string) (pipeline.Database, error) {
	return openReadOnlyFrom(path, "--db")
}

// openReadOnlyFrom is openReadOnly for a path another flag gave (copy's
// --from), which its messages name.
func openReadOnlyFrom(path, flag string) (pipeline.Database, error) {
	if err := checkDBPath(path, true); err != nil {
		return nil, err
	}
	stages, err := storedStages(path)
	if err != nil {
		return nil, err
	}
	return openDatabase(path, dbOpen{Stages: stages, ReadOnly: true, MustExist: true, Flag: flag}, func() (*store.DB, error) {
		return store.Open(path, store.Options{Stages: stages, ReadOnly: true, LockTimeout: readOnlyLockWait})
	})
}

// storedStages is the stage list the DB at path holds (a job's own
// stages), by names only; namedStages when a file's cannot be read, or
// there is no pipeline at a PostgreSQL URL (Open then says why, after its
// own wait for a lock another process holds). A PostgreSQL server that
// cannot be read is the error: connecting again to open it would only
// double the wait before the same message.
func storedStages(path string) ([]store.StageDef, error) {
	defs, err := readStoredStages(path, storedStagesLockWait)
	if err != nil && isPostgres(path) && !errors.Is(err, postgres.ErrNotFound) {
		return nil, err
	}
	if err != nil || len(defs) == 0 {
		return namedStages(), nil
	}
	for i := range defs {
		defs[i] = store.StageDef{Name: defs[i].Name}
	}
	return defs, nil
}

// checkStageOf is checkStage against the stages the DB at path holds
// when it holds a job's own stages.
func checkStageOf(path, flag, name string) error {
	// A database that is not there is the mistake to report, not a
	// stage name it could not be checked against.
	if err := checkDBPath(path, true); err != nil {
		return err
	}
	stored, err := storedStages(path)
	if err != nil {
		return err
	}
	var names []string
	for _, d := range stored {
		names = append(names, d.Name)
	}
	if slices.Contains(names, name) {
		return nil
	}
	if slices.Equal(names, stageNames) {
		return checkStage(flag, name)
	}
	return usagef("--%s %q is not a stage of %s%s (its stages: %s)", flag, name, path, didYouMean(name, names, "%s"), strings.Join(names, ", "))
}

// openWritable opens the DB for a command that changes it without running.
func openWritable(path string) (pipeline.Database, error) {
	if err := checkDBPath(path, true); err != nil {
		return nil, err
	}
	stages, err := storedStages(path)
	if err != nil {
		return nil, err
	}
	return openDatabase(path, dbOpen{Stages: stages, MustExist: true}, func() (*store.DB, error) {
		return store.Open(path, store.Options{Stages: stages, MustExist: true})
	})
}

// urlScheme finds a URL's scheme: a --db like mysql://u@host/db is no
// file path, whatever directories it would name.
var urlScheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)

// redactURL is u without the password its user part may hold.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return urlScheme.FindString(u) + "..."
	}
	if p.User != nil {
		p.User = url.User(p.User.Username())
	}
	return p.String()
}

// boltMagic starts every bbolt meta page (after the 16-byte page header).
const boltMagic = 0xED0CDAED

// checkDBPath refuses a --db that cannot be a sawtooth database before
// anything opens or creates it, each case with its own message: nothing
// there (when mustExist; with the nearest .db file in that directory), a
// missing directory, a directory, a device or pipe, and a file without a
// database header (an input file given as --db, say). A file with the
// header is left to the store, which tells a damaged database apart.
//
// A path that names nothing, or an input file, is a usage error (the
// value typed is wrong); a directory, a device or a file that is no
// database is an error of the place (exit 1), as a store failure is.
func checkDBPath(path string, mustExist bool) error {
	return checkDBFlag("--db", path, mustExist)
}

// checkDBFlag is checkDBPath for a database given by flag (copy's --from
// and --to as well as --db), so that each message names the flag typed.
func checkDBFlag(flag, path string, mustExist bool) error {
	if isPostgres(path) {
		return checkPostgresDSN(path)
	}
	if m := urlScheme.FindStringSubmatch(path); m != nil {
		return usagef("%s %s: unsupported database URL scheme %q: give a bbolt file path, or a postgres:// URL for PostgreSQL", flag, redactURL(path), m[1])
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		dir := filepath.Dir(path)
		if di, derr := os.Stat(dir); derr != nil || !di.IsDir() {
			return usagef("%s %s: the directory %s does not exist", flag, path, dir)
		}
		if !mustExist {
			return nil
		}
		return usagef("%s %s: no such database%s (a database is created by `sawtooth run --db %s --input FILE`)", flag, path, nearestDB(path), path)
	case err != nil:
		return fmt.Errorf("%s %s: %w", flag, path, err)
	case fi.IsDir():
		return fmt.Errorf("%s %s is a directory, not a database file%s", flag, path, dbFilesIn(path))
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s %s is not a regular file (%s): give a database file", flag, path, fi.Mode().Type())
	case fi.Size() == 0:
		return nil // the store decides (a run killed as it created the file leaves one)
	}
	ok, err := hasBoltHeader(path)
	if err != nil {
		return fmt.Errorf("%s %s: %w", flag, path, err)
	}
	if ok {
		return nil
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".csv", ".tsv", ".jsonl", ".ndjson", ".json", ".txt":
		return usagef("%s %s is not a database but looks like an input file: pass it as --input %s and name the database with --db, e.g. --db %s",
			flag, path, path, strings.TrimSuffix(path, filepath.Ext(path))+".db")
	}
	return fmt.Errorf("%s %s is not a database file: it has no database header; check the path, or give another %s (only a path that does not exist gets a new database)", flag, path, flag)
}

// hasBoltHeader reports whether either meta page of the file at path
// starts with bbolt's magic number.
func hasBoltHeader(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	buf := make([]byte, 20)
	for _, off := range []int64{0, 4096, 8192, 16384, 65536} {
		if _, err := f.ReadAt(buf, off); err != nil {
			if errors.Is(err, io.EOF) {
				return false, nil
			}
			return false, err
		}
		if binary.LittleEndian.Uint32(buf[16:]) == boltMagic || binary.BigEndian.Uint32(buf[16:]) == boltMagic {
			return true, nil
		}
	}
	return false, nil
}

// dbFiles lists the .db files in dir.
func dbFiles(dir string) []string {
	matches, _ := filepath.Glob(filepath.Join(dir, "*.db"))
	return matches
}

// nearestDB suggests the existing .db file beside path whose name is
// closest to path's, or "".
func nearestDB(path string) string {
	best, bestD := "", -1
	for _, m := range dbFiles(filepath.Dir(path)) {
		if d := editDistance(filepath.Base(path), filepath.Base(m)); bestD < 0 || d < bestD {
			best, bestD = m, d
		}
	}
	if best == "" {
		return ""
	}
	return ": did you mean " + best + "?"
}

// dbFilesIn suggests the .db files in dir, or "".
func dbFilesIn(dir string) string {
	m := dbFiles(dir)
	switch {
	case len(m) == 0:
		return ""
	case len(m) > 3:
		m = append(m[:3], "...")
	}
	return ": give the database file in it, e.g. " + strings.Join(m, ", ")
}
