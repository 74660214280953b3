package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
)

// compactTxMax bounds one transaction of the copy, so its memory does not
// grow with the file.
const compactTxMax = 4 << 20

// compactHook, when set (tests only), runs after the copy is written and
// synced and before it replaces the original.
var compactHook func()

// CompactStats is what Compact did.
type CompactStats struct {
	// Before and After are the file's sizes in bytes.
	Before, After int64
	// Migrated is true when the file was in an older record format.
	Migrated bool
}

// Compact rewrites the database at path into a fresh file with bbolt's
// Compact (every page full, no free pages), upgrading a file of an older
// record format on the way (upgradeInto), then puts it in place of the
// original: the copy is written beside it as path + ".compact", synced,
// and renamed over it, the directory synced. The original is locked
// throughout and never written, so a crash or a kill at any point leaves
// a usable database; a leftover ".compact" file is removed by the next
// Compact. Memory stays bounded: the copy commits every compactTxMax
// bytes. lockTimeout is as Options.LockTimeout.
func Compact(path string, lockTimeout time.Duration) (CompactStats, error) {
	var st CompactStats
	if err := checkPath(path, true); err != nil {
		return st, err
	}
	if err := checkFile(path); err != nil {
		return st, err
	}
	if lockTimeout <= 0 {
		lockTimeout = DefaultLockTimeout
	}
	// The copy replaces the file itself, never a symlink to it: the link
	// is the user's layout, and the file behind it what others open.
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	src, err := openBolt(path, &bolt.Options{Timeout: lockTimeout, FreelistType: bolt.FreelistMapType})
	if errors.Is(err, ErrCorrupt) {
		return st, err
	}
	if err != nil {
		return st, openError(path, err)
	}
	defer src.Close()
	stages, format, err := storedDefinition(src, path)
	if err != nil {
		return st, err
	}
	st.Migrated = format < FormatVersion
	fi, err := os.Stat(path)
	if err != nil {
		return st, err
	}
	st.Before = fi.Size()
	tmp := path + ".compact"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return st, fmt.Errorf("compact %s: remove the leftover %s: %w", path, tmp, err)
	}
	dir := filepath.Dir(path)
	free := freeSpace(dir)
	if err := compactInto(tmp, fi.Mode().Perm(), src, stages, format); err != nil {
		os.Remove(tmp)
		return st, compactFailed(path, dir, err, pagesInUse(src), free)
	}
	if compactHook != nil {
		compactHook()
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return st, fmt.Errorf("compact %s: %w (the database is unchanged)", path, err)
	}
	_ = syncDir(dir) // the rename reaches the disk
	if fi, err := os.Stat(path); err == nil {
		st.After = fi.Size()
	}
	return st, nil
}

// compactInto writes a compacted copy of db to tmp and syncs it. bbolt
// grows a file in steps of up to 16 MB ahead of its pages; the copy is
// cut back to its last page, or a small database would come out larger.
func compactInto(tmp string, mode os.FileMode, src *bolt.DB, stages []StageDef, format int) error {
	dst, err := bolt.Open(tmp, mode, &bolt.Options{NoSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return err
	}
	var size int64
	if format < sharedFormat-1 {
		err = upgradeInto(dst, src, stages)
	} else {
		err = bolt.Compact(dst, src, compactTxMax)
		if err == nil && format < FormatVersion {
			// Format 2 to 6 records are format 7 records (sharedFormat, editFormat, longFormat, shortRefFormat, usageInFormat).
			err = dst.Update(func(tx *bolt.Tx) error {
				return tx.Bucket(bucketMeta).Put(keyFormat, []byte(strconv.Itoa(FormatVersion)))
			})
		}
	}
	if err == nil {
		err = dst.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil })
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if fi, serr := f.Stat(); serr == nil && fi.Size() > size {
		err = f.Truncate(size)
	}
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// storedDefinition reads the stage list and record format a file holds.
func storedDefinition(bdb *bolt.DB, path string) ([]StageDef, int, error) {
	var (
		def    definition
		format int
	)
	err := bdb.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			return fmt.Errorf("open %s: %w", path, ErrNotSawtooth)
		}
		var err error
		if format, err = fileFormat(meta); err != nil {
			return fmt.Errorf("open %s: %v: %w", path, err, ErrNotSawtooth)
		}
		if format > FormatVersion {
			return fmt.Errorf("open %s: record format %d, this sawtooth reads up to %d: %w (upgrade sawtooth)", path, format, FormatVersion, ErrNewerSchema)
		}
		if err := json.Unmarshal(meta.Get(keyDef), &def); err != nil || len(def.Stages) == 0 {
			return fmt.Errorf("open %s: bad pipeline definition: %w", path, ErrNotSawtooth)
		}
		return nil
	})
	return def.Stages, format, err
}

// Space is the bytes of pages each top-level bucket holds (branch and
// leaf pages, whatever their fill), by bucket name, and the file's size
// under "file": where a database's bytes go.
func (db *DB) Space() (map[string]int64, error) {
	out := map[string]int64{}
	err := db.view(func(tx *bolt.Tx) error {
		out["file"] = tx.Size()
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			s := b.Stats()
			out[string(name)] = int64(s.BranchAlloc + s.LeafAlloc)
			return nil
		})
	})
	return out, err
}

// SyncDir flushes dir's entries, so that a file renamed or linked into
// it is there after a power loss.
func SyncDir(dir string) error { return syncDir(dir) }

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
