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

// An input file given as --db gets the same hint (pass it as --input)
// and exit 2 from run as from status, and is left as it was.
func TestRun_InputFileAsDB(t *testing.T) {
	for _, name := range []string{"data.csv", "reviews.jsonl"} {
		for _, cmd := range [][]string{{"run"}, {"status"}, {"job", "show"}} {
			t.Run(strings.Join(cmd, " ")+" --db "+name, func(t *testing.T) {
				path := filepath.Join(t.TempDir(), name)
				body := []byte("id,text\n1,Great app\n")
				if err := os.WriteFile(path, body, 0o600); err != nil {
					t.Fatal(err)
				}
				err := runApp(append(append([]string{"sawtooth"}, cmd...), "--db", path), io.Discard, io.Discard)
				var ue *UsageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), "pass it as --input "+path) {
					t.Fatalf("error %v, want a usage error saying to pass it as --input", err)
				}
				if got, _ := os.ReadFile(path); !bytes.Equal(got, body) {
					t.Errorf("the input file was changed: %q", got)
				}
			})
		}
	}
}

// A --db URL of another database than PostgreSQL is named as such (exit
// 2), never taken for a file path, and its password is not repeated.
func TestDB_UnsupportedURLScheme(t *testing.T) {
	for _, cmd := range [][]string{{"run"}, {"status"}, {"dlq", "list"}, {"report"}, {"job", "show"}} {
		for _, db := range []string{"mysql://u@x/db", "sqlite:///tmp/x.db", "mysql://u:secret@x/db"} {
			t.Run(strings.Join(cmd, " ")+" "+db, func(t *testing.T) {
				err := runApp(append(append([]string{"sawtooth"}, cmd...), "--db", db), io.Discard, io.Discard)
				var ue *UsageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), "unsupported database URL scheme") ||
					!strings.Contains(err.Error(), "a bbolt file path, or a postgres:// URL") {
					t.Fatalf("error %v, want a usage error naming the unsupported scheme and what --db takes", err)
				}
				if strings.Contains(err.Error(), "secret") {
					t.Errorf("the error repeats the password: %v", err)
				}
			})
		}
	}
}

// A command given a database that does not exist says so, naming the
// path, even when its --stage is misspelt too.
func TestDB_MissingBeforeStage(t *testing.T) {
	for _, cmd := range [][]string{
		{"dlq", "list", "--stage", "clasify"},
		{"dlq", "list", "--stage", "classify"},
		{"dlq", "requeue", "--stage", "clasify", "--all"},
		{"export", "--stage", "clasify"},
		{"retry", "--stage", "clasify"},
	} {
		t.Run(strings.Join(cmd, " "), func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "missing.db")
			err := runApp(append(append([]string{"sawtooth"}, cmd...), "--db", db), io.Discard, io.Discard)
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--db "+db+": no such database") || strings.Contains(strings.ReplaceAll(err.Error(), db, ""), "--stage") {
				t.Fatalf("error %v, want a usage error saying the database %s does not exist, not blaming --stage", err, db)
			}
			if _, err := os.Stat(db); err == nil {
				t.Errorf("%s was created", db)
			}
		})
	}
}
