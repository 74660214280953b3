package store

import (
	"path/filepath"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// TestDB_Contract runs the store contract against the bbolt store.
func TestDB_Contract(t *testing.T) {
	storetest.Run(t, func(t testing.TB) pipeline.Database {
		t.Helper()
		db, err := Open(filepath.Join(t.TempDir(), "contract.db"), Options{Stages: storetest.Stages})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	})
}

// TestDB_BatchContract runs the batch-job contract against the bbolt store.
func TestDB_BatchContract(t *testing.T) {
	storetest.RunBatch(t, func(t testing.TB) pipeline.Database {
		t.Helper()
		db, err := Open(filepath.Join(t.TempDir(), "batch.db"), Options{Stages: storetest.Stages})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	})
}
