package store

import (
	"os"
	"path/filepath"
	"testing"
)

// A writer that waited for the lock while a compact or an upgrade renamed
// its copy over the path must write into that copy, not into the replaced
// file nobody will open again: everything it did would be lost.
func TestOpen_fileReplacedWhileWaitingForTheLock(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.db")
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Ingest(recs("a")); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Compact(path, 0); err != nil { // a first copy, to rename over the path below
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	replacement := filepath.Join(dir, "copy.db")
	if err := os.WriteFile(replacement, data, 0o600); err != nil {
		t.Fatal(err)
	}
	// The lock granted is the old file's; by then the copy has replaced it.
	replaced := false
	lockedHook = func(p string) {
		if !replaced {
			replaced = true
			if err := os.Rename(replacement, p); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(func() { lockedHook = nil })
	w, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Ingest(recs("b")); err != nil {
		t.Fatal(err)
	}
	w.Close()
	lockedHook = nil
	r, err := Open(path, Options{Stages: testStages, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Locate("b"); err != nil {
		t.Errorf("item b, ingested by the writer that waited for the lock, is lost: %v", err)
	}
}
