package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// filledDB writes a closed DB of n ingested items and returns its path and
// the byte size of its pages in use.
func filledDB(t *testing.T, n int) (string, int64) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f.db")
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	var rs []pipeline.Record
	for i := 0; i < n; i++ {
		rs = append(rs, pipeline.Record{ID: fmt.Sprintf("id%05d", i), Text: strings.Repeat("some review text ", 10)})
	}
	if _, err := db.Ingest(rs); err != nil {
		t.Fatal(err)
	}
	var used int64
	db.bolt.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil })
	db.Close()
	return path, used
}

func TestOpen_Truncated(t *testing.T) {
	path, used := filledDB(t, 2000)
	for _, size := range []int64{used - 4096, used / 2, 3 * 4096} {
		if err := os.Truncate(path, size); err != nil {
			t.Fatal(err)
		}
		for _, ro := range []bool{true, false} {
			db, err := Open(path, Options{Stages: testStages, ReadOnly: ro})
			if err == nil {
				db.Close()
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "truncated") || !strings.Contains(err.Error(), path) {
				t.Errorf("size %d, read-only %v: err = %v, want ErrCorrupt saying the file is truncated", size, ro, err)
			}
		}
	}
}

// A file longer than its pages (bbolt grows files ahead of use) is fine.
func TestOpen_LongerThanUsed(t *testing.T) {
	path, used := filledDB(t, 2000)
	if err := os.Truncate(path, used); err != nil {
		t.Fatal(err)
	}
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if c := counts(t, db); c.Items != 2000 {
		t.Fatalf("items = %d", c.Items)
	}
}

// A damaged page makes bbolt panic when it is read: the store turns that
// into ErrCorrupt, in Open or in the call that reads it.
func TestDB_DamagedPages(t *testing.T) {
	path, used := filledDB(t, 2000)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	junk := []byte(strings.Repeat("\xa5", int(used)-4*4096))
	if _, err := f.WriteAt(junk, 4*4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	db, err := Open(path, Options{Stages: testStages, ReadOnly: true})
	if err == nil {
		defer db.Close()
		_, err = db.Counts()
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
}

func TestOpen_EmptyFileReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.db")
	os.WriteFile(path, nil, 0o600)
	_, err := Open(path, Options{Stages: testStages, ReadOnly: true})
	if !errors.Is(err, ErrNotDatabase) || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("err = %v, want ErrNotDatabase saying it is empty", err)
	}
	if fi, _ := os.Stat(path); fi.Size() != 0 {
		t.Errorf("a read-only open wrote %d bytes", fi.Size())
	}
}

func TestDiskError(t *testing.T) {
	other := errors.New("bucket not found")
	for _, tc := range []struct {
		name string
		err  error
		full bool
	}{
		{"EFBIG from a write", &fs.PathError{Op: "write", Path: "x.db", Err: syscall.EFBIG}, true},
		{"ENOSPC from a write", &fs.PathError{Op: "write", Path: "x.db", Err: syscall.ENOSPC}, true},
		{"bbolt's grow, formatted with %s", fmt.Errorf("file resize error: %s", syscall.ENOSPC), true},
		{"quota", fmt.Errorf("sync: %w", syscall.EDQUOT), true},
		{"anything else", other, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := diskError("x.db", tc.err)
			if got := errors.Is(err, ErrDiskFull); got != tc.full {
				t.Fatalf("diskError(%v) = %v; ErrDiskFull %v, want %v", tc.err, err, got, tc.full)
			}
			if !errors.Is(err, tc.err) && !tc.full {
				t.Errorf("the cause is lost: %v", err)
			}
			if tc.full && !strings.Contains(err.Error(), "free space") {
				t.Errorf("no hint: %v", err)
			}
		})
	}
	if diskError("x.db", nil) != nil {
		t.Error("diskError(nil) != nil")
	}
}

// TestReadDefinition_DamagedPages: the commands that read a database's
// stages before opening it (status, export, dlq) read them through the
// same protection as every read: a damaged page under the root is
// ErrCorrupt, not a bbolt panic with a stack trace. Every page but the
// meta pages, the root's and the free list's is overwritten, so the
// file opens and the first look into a bucket reads junk (bbolt's
// layout: a 16-byte page header ending in the overflow count, then in a
// meta page magic, version, page size and flags, the root bucket's page
// id, its sequence, the free list's page id, the page count, the txid).
func TestReadDefinition_DamagedPages(t *testing.T) {
	path, _ := filledDB(t, 2000)
	// A meta bucket too big to live inline in the root's page, as a long
	// stored job makes it: its own pages are then read, and damaged.
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	if err := bdb.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put([]byte("padding"), bytes.Repeat([]byte("x"), 8192))
	}); err != nil {
		t.Fatal(err)
	}
	bdb.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil })
	bdb.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const pageSize = 4096
	meta := func(i int) (root, freelist, txid uint64) {
		p := data[i*pageSize:]
		return binary.LittleEndian.Uint64(p[32:]), binary.LittleEndian.Uint64(p[48:]), binary.LittleEndian.Uint64(p[64:])
	}
	root, freelist, txid := meta(0)
	if r, fl, tx := meta(1); tx > txid {
		root, freelist = r, fl
	}
	keep := map[uint64]bool{0: true, 1: true}
	for _, id := range []uint64{root, freelist} {
		if int(id+1)*pageSize > len(data) {
			t.Fatalf("page %d past the end of a %d-byte file: not bbolt's layout", id, len(data))
		}
		overflow := binary.LittleEndian.Uint32(data[int(id)*pageSize+12:])
		for p := id; p <= id+uint64(overflow); p++ {
			keep[p] = true
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	junk := bytes.Repeat([]byte{0xa5}, pageSize)
	for p := uint64(2); int64(p+1)*pageSize <= used; p++ {
		if !keep[p] {
			if _, err := f.WriteAt(junk, int64(p)*pageSize); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.Close()
	_, err = ReadDefinition(path, 0)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("ReadDefinition on damaged pages: %v, want ErrCorrupt", err)
	}
}
