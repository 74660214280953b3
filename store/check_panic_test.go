package store

import (
	"errors"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"
)

// TestDB_CheckOfDamagedFileStopsReleasing: a panic in Check's read of
// the buckets (a damaged file: the items bucket is gone) is recovered
// into ErrCorrupt, and the goroutine that released the pages meanwhile
// has stopped by then: left running, it read the closed transaction and
// crashed the process.
func TestDB_CheckOfDamagedFileStopsReleasing(t *testing.T) {
	path, _ := filledDB(t, 50)
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketItems) }); err != nil {
		t.Fatal(err)
	}
	bdb.Close()
	db, err := Open(path, Options{Stages: testStages, ReadOnly: true})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer db.Close()
	if _, err := db.Check(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Check of a file without its items bucket: %v, want ErrCorrupt", err)
	}
	goleak.VerifyNone(t, goleak.IgnoreCurrent())
}
