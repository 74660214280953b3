package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
	"github.com/sawtooth-dev/sawtooth/store/postgres/pgtest"
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
	unchangedByCompact(t, path, before.String())

	t.Run("in use", func(t *testing.T) {
		held, err := store.Open(path, store.Options{Stages: namedStages()})
		if err != nil {
			t.Fatal(err)
		}
		defer held.Close()
		err = runApp([]string{"sawtooth", "compact", "--db", path, "--lock-timeout", "50ms"}, io.Discard, io.Discard)
		if !errors.Is(err, store.ErrInUse) {
			t.Errorf("compact --lock-timeout 50ms of a file in use = %v, want %v", err, store.ErrInUse)
		}
	})

	t.Run("usage errors", func(t *testing.T) {
		err := runApp([]string{"sawtooth", "compact", "--db", path, "--lock-timeout", "-1s"}, io.Discard, io.Discard)
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--lock-timeout") {
			t.Errorf("compact --lock-timeout -1s = %v, want a usage error naming the flag", err)
		}
		for _, db := range []string{"postgres://sawtooth:secret@localhost/x", filepath.Join(t.TempDir(), "missing.db")} {
			err := runApp([]string{"sawtooth", "compact", "--db", db}, io.Discard, io.Discard)
			var ue *UsageError
			if err == nil || !errors.As(err, &ue) {
				t.Errorf("compact --db %s = %v, want a usage error", db, err)
			}
			if _, serr := os.Stat(db); !strings.HasPrefix(db, "postgres") && !os.IsNotExist(serr) {
				t.Errorf("compact created %s", db)
			}
		}
	})
}

// TestCompact_postgres: `compact --db postgres://...` rewrites the
// pipeline's tables and prints the schema's size before and after, and
// `export --all` is the same after it; with a worker live it refuses,
// naming the worker, as a fatal error (exit 1), not a usage error.
func TestCompact_postgres(t *testing.T) {
	srv := pgtest.StartOrSkip(t)
	old, err := os.ReadFile(filepath.Join("..", "..", "store", "testdata", "format1.db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		live   bool // a worker session is live
		reader bool // a transaction holds a lock on output
		want   string
	}{
		{"idle", false, false, ": schema sawtooth compacted "},
		{"worker live", true, false, "1 worker session is live (host-b:42)"},
		{"reader", false, true, "table output is in use: its lock was not granted within 300ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := srv.NewDB(strings.ReplaceAll(tc.name, " ", "_"))
			if err != nil {
				t.Fatal(err)
			}
			from := filepath.Join(t.TempDir(), "old.db")
			if err := os.WriteFile(from, old, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := runApp([]string{"sawtooth", "copy", "--from", from, "--to", u}, io.Discard, io.Discard); err != nil {
				t.Fatalf("copy into PostgreSQL: %v", err)
			}
			if tc.live {
				w, err := postgres.Open(context.Background(), u, postgres.Options{Stages: namedStages(), Owner: "host-b:42"})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				if err := w.BeginSession(context.Background(), time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			if tc.reader {
				tx := holdOutput(t, u)
				defer tx.Rollback(context.Background())
			}
			var before bytes.Buffer
			if err := runApp([]string{"sawtooth", "export", "--db", u, "--all", "--format", "jsonl"}, &before, io.Discard); err != nil {
				t.Fatalf("export before: %v", err)
			}
			var out bytes.Buffer
			err = runApp([]string{"sawtooth", "compact", "--db", u, "--lock-timeout", "300ms"}, &out, io.Discard)
			var ue *UsageError
			switch {
			case (tc.live || tc.reader) && (err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("compact = %v, want a fatal error saying %q", err, tc.want)
			case !tc.live && !tc.reader && (err != nil || !strings.Contains(out.String(), tc.want) || !strings.Contains(out.String(), "  output ")):
				t.Fatalf("compact = %v, said %q; want %q and the output table's sizes", err, out.String(), tc.want)
			}
			unchangedByCompact(t, u, before.String())
		})
	}
}

// unchangedByCompact checks that the pipeline at db exports what it
// exported before compact (before, not empty) and verifies clean.
func unchangedByCompact(t *testing.T, db, before string) {
	t.Helper()
	var after bytes.Buffer
	if err := runApp([]string{"sawtooth", "export", "--db", db, "--all", "--format", "jsonl"}, &after, io.Discard); err != nil {
		t.Fatalf("export after: %v", err)
	}
	if before != after.String() || before == "" {
		t.Errorf("export after compact differs:\n%s\nwant\n%s", after.String(), before)
	}
	if err := runApp([]string{"sawtooth", "verify", "--db", db}, io.Discard, io.Discard); err != nil {
		t.Errorf("verify after compact: %v", err)
	}
}

// holdOutput begins a transaction on the pipeline at u that holds a read
// lock on its output table, as a long export would.
func holdOutput(t *testing.T, u string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE sawtooth.output IN ACCESS SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	return tx
}
