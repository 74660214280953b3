package store

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCompact(t *testing.T) {
	t.Run("a format 1 file is migrated and shrinks", func(t *testing.T) {
		path := copyFixture(t)
		want := readFormat1(t, path)
		st, err := Compact(path, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Migrated || st.After >= st.Before || st.After == 0 {
			t.Errorf("Compact = %+v, want migrated and smaller", st)
		}
		if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
			t.Errorf("the temporary copy is left: %v", err)
		}
		db, err := Open(path, Options{Stages: testStages})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		checkMigrated(t, db, want)
	})
	t.Run("a format 2 file keeps everything", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "p.db")
		db, err := Open(path, Options{Stages: testStages})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Ingest(recs("a", "b", "c")); err != nil {
			t.Fatal(err)
		}
		advance(t, db, "sanitize", jsonOut)
		before, _ := db.Locate("b")
		db.Close()
		if _, err := Compact(path, 0); err != nil {
			t.Fatal(err)
		}
		db, err = Open(path, Options{Stages: testStages})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		after, err := db.Locate("b")
		if err != nil || after.Status != before.Status || string(after.Output["sanitize"]) != string(before.Output["sanitize"]) {
			t.Errorf("after compact %+v %v, want %+v", after, err, before)
		}
		if p, err := db.Check(); err != nil || len(p) > 0 {
			t.Errorf("Check: %v %v", p, err)
		}
	})
	t.Run("a missing file is not created", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "none.db")
		if _, err := Compact(path, 0); err == nil {
			t.Error("Compact of a missing file succeeded")
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Errorf("Compact created %s", path)
		}
	})
}

// TestCompact_killed kills a real process with SIGKILL after its compact
// copy is written and before it replaces the original: the original
// must open with everything in it, and the next compact must succeed.
func TestCompact_killed(t *testing.T) {
	path := copyFixture(t)
	want := readFormat1(t, path)
	killInHook(t, "^TestHelperCompact$", path)
	if _, err := os.Stat(path + ".compact"); err != nil {
		t.Fatalf("the kill came before the copy was written: %v", err)
	}
	db, err := Open(path, Options{Stages: testStages, ReadOnly: true})
	if err != nil {
		t.Fatalf("open after a kill mid-compact: %v", err)
	}
	checkMigrated(t, db, want)
	db.Close()
	if _, err := Compact(path, 0); err != nil {
		t.Fatalf("compact after a killed one: %v", err)
	}
	db, err = Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkMigrated(t, db, want)
}

// TestHelperCompact is the child of TestCompact_killed.
func TestHelperCompact(t *testing.T) {
	path := os.Getenv("SAWTOOTH_HELPER_DB")
	if path == "" {
		t.Skip("a helper process of TestCompact_killed")
	}
	compactHook = blockInHook
	_, _ = Compact(path, 0)
}
