package store

import (
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// TestCube_DamagedOutputLeavesItUnbuilt: a database whose cube is due
// to be built holds a damaged classify output: the writable open still
// succeeds (the cube is derived; it is left unbuilt) so that prune can
// drop the damaged item, as it could before the cube.
func TestCube_DamagedOutputLeavesItUnbuilt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "st.db")
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Ingest(cubeRecs(20, "")); err != nil {
		t.Fatal(err)
	}
	drainCube(t, db, 0)
	db.Close()
	dropCube(t, path)
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(outBucket("classify")).Put([]byte("i007"), []byte{tagAnswer, 'g', 'o', 'n', 'e'})
	}); err != nil {
		t.Fatal(err)
	}
	bdb.Close()

	db, err = Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatalf("writable open with one damaged output: %v", err)
	}
	defer db.Close()
	if n, err := db.Prune(func(id string) bool { return id != "i007" }, false); err != nil || n != 1 {
		t.Fatalf("prune the damaged item: %d, %v", n, err)
	}
}
