package store

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOpen_NewDatabaseAppearsWhole: a new database is built beside its
// path and appears there complete: while bbolt holds the file being
// built, nothing is at the path, so a kill then leaves nothing a later
// run would refuse; and nothing of the build is left beside it.
func TestOpen_NewDatabaseAppearsWhole(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "new.db")
	var builtAside, pathThen int
	lockedHook = func(p string) {
		if p == path {
			return
		}
		builtAside++
		if _, err := os.Lstat(path); err == nil {
			pathThen++
		}
	}
	t.Cleanup(func() { lockedHook = nil })
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if builtAside == 0 || pathThen != 0 {
		t.Fatalf("built aside %d times, the path there during %d of them: want it built aside, the path absent meanwhile", builtAside, pathThen)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "new.db" {
			t.Errorf("left beside the database: %s", e.Name())
		}
	}
	ro, err := Open(path, Options{Stages: testStages, ReadOnly: true})
	if err != nil {
		t.Fatalf("the new database does not open read-only: %v", err)
	}
	ro.Close()
}
