package store

import (
	"os"
	"path/filepath"
	"testing"
)

// Compact of a --db that is a symlink must compact the file it points at,
// not replace the link with a copy and leave the target stale.
func TestCompact_symlinkKeepsLink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real.db")
	link := filepath.Join(dir, "link.db")
	db, err := Open(target, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Ingest(recs("a")); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Compact(link, 0); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("after Compact(%s) the symlink is gone (%v): the target %s is left behind", link, err, target)
	}
}
