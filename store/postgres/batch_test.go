package postgres

import (
	"context"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

var (
	_ storetest.BatchStore  = (*DB)(nil)
	_ storetest.BatchLeaser = (*DB)(nil)
)

// TestDB_BatchContract runs the batch-job contract against PostgreSQL.
func TestDB_BatchContract(t *testing.T) {
	storetest.RunBatch(t, func(t testing.TB) pipeline.Database {
		t.Helper()
		db, _ := openNew(t, Options{})
		return db
	})
}

// TestDB_BatchWorkers runs the contract of batch jobs shared by two
// workers against PostgreSQL.
func TestDB_BatchWorkers(t *testing.T) {
	storetest.RunBatchWorkers(t, func(t testing.TB) (pipeline.Database, pipeline.Database) {
		t.Helper()
		a, u := openNew(t, Options{Owner: "worker-a"})
		b, err := Open(context.Background(), u, Options{Stages: storetest.Stages, Owner: "worker-b"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return a, b
	})
}
