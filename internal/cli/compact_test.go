package cli

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCompact(t *testing.T) {
	// A database written by sawtooth at 925bf3a (record format 1).
	old, err := os.ReadFile(filepath.Join("..", "..", "store", "testdata", "format1.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "old.db")
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	var before bytes.Buffer
	if err := runApp([]string{"sawtooth", "export", "--db", path, "--all", "--format", "jsonl"}, &before, io.Discard); err != nil {
		t.Fatalf("export before: %v", err)
	}
	var out bytes.Buffer
	if err := runApp([]string{"sawtooth", "compact", "--db", path}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "upgraded to record format 7") {
		t.Errorf("compact said %q, want the upgrade named", out.String())
	}
	var after bytes.Buffer
	if err := runApp([]string{"sawtooth", "export", "--db", path, "--all", "--format", "jsonl"}, &after, io.Discard); err != nil {
		t.Fatalf("export after: %v", err)
	}
	if before.String() != after.String() || before.Len() == 0 {
		t.Errorf("export after compact differs:\n%s\nwant\n%s", after.String(), before.String())
	}
	if err := runApp([]string{"sawtooth", "verify", "--db", path}, io.Discard, io.Discard); err != nil {
		t.Errorf("verify after compact: %v", err)
	}

	t.Run("usage errors", func(t *testing.T) {
		for _, db := range []string{"postgres://localhost/x", filepath.Join(t.TempDir(), "missing.db")} {
			err := runApp([]string{"sawtooth", "compact", "--db", db}, io.Discard, io.Discard)
			var ue *UsageError
			if err == nil || (strings.HasPrefix(db, "postgres") && !errors.As(err, &ue)) {
				t.Errorf("compact --db %s = %v, want an error", db, err)
			}
			if _, serr := os.Stat(db); !strings.HasPrefix(db, "postgres") && !os.IsNotExist(serr) {
				t.Errorf("compact created %s", db)
			}
		}
	})
}
