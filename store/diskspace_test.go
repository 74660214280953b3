package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestCompactFailed(t *testing.T) {
	full := &os.PathError{Op: "write", Path: "/d/p.db.compact", Err: syscall.ENOSPC}
	for _, tc := range []struct {
		name  string
		err   error
		free  int64
		want  []string
		avoid []string
	}{
		{"a full disk, its free space known", full, 14e6,
			[]string{"compact /d/p.db: write /d/p.db.compact: no space left on device", "in /d, which had 14.0 MB free,", "takes up to 28.5 MB", "the database is unchanged: free some space there"}, nil},
		{"a full disk, its free space not known", full, -1,
			[]string{"in /d and takes up to 28.5 MB", "move the file to a larger disk"}, []string{"had"}},
		{"a spent disk quota", &os.PathError{Op: "write", Path: "/d/p.db.compact", Err: quotaExceeded}, 14e6,
			[]string{"takes up to 28.5 MB", "free some space there (or have the disk quota raised)"}, nil},
		{"another failure", &os.PathError{Op: "write", Path: "/d/p.db.compact", Err: syscall.EIO}, 14e6,
			[]string{"compact /d/p.db: write /d/p.db.compact: input/output error (the database is unchanged)"}, []string{"free", "28.5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := compactFailed("/d/p.db", "/d", tc.err, 28.5e6, tc.free)
			if !errors.Is(err, tc.err.(*os.PathError).Err) {
				t.Errorf("%v does not wrap %v", err, tc.err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
			for _, a := range tc.avoid {
				if strings.Contains(err.Error(), a) {
					t.Errorf("%q has %q", err, a)
				}
			}
		})
	}
}

// TestNoRoom: every error this system gives for a full disk or a spent
// quota gets compact's advice and marks a failed commit ErrDiskFull,
// wrapped as os and bbolt wrap it or formatted into bbolt's text (its
// grow's truncate, which on Windows comes from its mmap step).
func TestNoRoom(t *testing.T) {
	for _, e := range noRoomErrors {
		for _, err := range []error{
			&os.PathError{Op: "write", Path: "/d/p.db.compact", Err: e},
			fmt.Errorf("file resize error: %s", e),
			// bbolt on Windows: the grow's truncate, formatted twice.
			fmt.Errorf("mmap allocate error: %s", fmt.Errorf("truncate: %s", &os.PathError{Op: "truncate", Path: "/d/p.db.compact", Err: e})),
		} {
			if !errors.Is(diskError("x.db", err), ErrDiskFull) {
				t.Errorf("diskError(%v) is not ErrDiskFull", err)
			}
			if msg := compactFailed("/d/p.db", "/d", err, 1e6, -1).Error(); !strings.Contains(msg, "free some space there") {
				t.Errorf("compact's error for %v gives no advice: %s", err, msg)
			}
		}
	}
	if noRoom(syscall.EIO) || noRoom(nil) {
		t.Error("noRoom is true for EIO or nil")
	}
}

// TestPagesInUse: the pages a drain freed are not counted, so the bound
// a full disk's message gives falls when a file is mostly free space.
func TestPagesInUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.db")
	update := func(fn func(b *bolt.Bucket) error) (inUse, size int64) {
		t.Helper()
		opt := &bolt.Options{FreelistType: bolt.FreelistMapType, Timeout: time.Minute}
		db, err := bolt.Open(path, 0o600, opt)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte("b"))
			if err != nil {
				return err
			}
			return fn(b)
		}); err != nil {
			db.Close()
			t.Fatal(err)
		}
		db.Close()
		// A fresh open reads the free list as Compact's does.
		if db, err = bolt.Open(path, 0o600, opt); err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil })
		return pagesInUse(db), size
	}
	value := make([]byte, 1000)
	full, size := update(func(b *bolt.Bucket) error {
		for i := range 4000 {
			if err := b.Put([]byte{byte(i >> 8), byte(i)}, value); err != nil {
				return err
			}
		}
		return nil
	})
	if full < 4e6 || full > size {
		t.Fatalf("with 4 MB of values: %d bytes in use of %d, want at least 4 MB and at most the file's pages", full, size)
	}
	drained, size := update(func(b *bolt.Bucket) error {
		for i := range 4000 {
			if err := b.Delete([]byte{byte(i >> 8), byte(i)}); err != nil {
				return err
			}
		}
		return nil
	})
	if drained > size/4 || drained <= 0 {
		t.Errorf("with the values deleted: %d bytes in use of a file of %d, want under a quarter of it", drained, size)
	}
}
