package postgres

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/postgres/pgtest"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
	"go.uber.org/goleak"
)

// pg is the one throwaway PostgreSQL cluster of this test binary,
// started by the first test that needs one (the tests skip without the
// binaries, unless pgtest.Required).
var pg pgtest.Shared

func TestMain(m *testing.M) {
	if url := os.Getenv(childURLEnv); url != "" {
		os.Exit(claimAndHang(url))
	}
	if url := os.Getenv(compactChildEnv); url != "" {
		os.Exit(compactChild(url))
	}
	if url := os.Getenv(migrateChildEnv); url != "" {
		os.Exit(migrateChild(url))
	}
	code := m.Run()
	pg.Stop()
	if code == 0 {
		// The export tests import report, and through it the genai SDK,
		// whose dependencies start one opencensus worker at init.
		if err := goleak.Find(goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// newURL returns the URL of a fresh, empty database, skipping the test
// when no server could be started.
func newURL(t testing.TB) string {
	t.Helper()
	return pg.NewDB(t)
}

// openNew opens a new pipeline defined by storetest.Stages in a fresh
// database, closed when the test ends.
func openNew(t testing.TB, opt Options) (*DB, string) {
	t.Helper()
	u := newURL(t)
	if opt.Stages == nil {
		opt.Stages = storetest.Stages
	}
	db, err := Open(context.Background(), u, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, u
}

// TestDB_Contract runs the store contract against PostgreSQL.
func TestDB_Contract(t *testing.T) {
	storetest.Run(t, func(t testing.TB) pipeline.Database {
		t.Helper()
		db, _ := openNew(t, Options{})
		return db
	})
}

// connect opens a connection of its own to the pipeline's server at url,
// to read or shape what the store wrote; the caller closes it.
func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	return conn
}
