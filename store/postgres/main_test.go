package postgres

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/postgres/pgtest"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
	"go.uber.org/goleak"
)

// server is the one throwaway PostgreSQL cluster of this test binary; nil
// when the binaries are missing (the tests then skip, unless required).
var (
	server    *pgtest.Server
	serverErr error
)

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
	server, serverErr = pgtest.Start()
	if serverErr != nil && (pgtest.Required() || !errors.Is(serverErr, pgtest.ErrUnavailable)) {
		fmt.Fprintln(os.Stderr, "start PostgreSQL:", serverErr)
		os.Exit(1)
	}
	code := 0
	func() {
		if server != nil {
			defer server.Stop()
		}
		code = m.Run()
	}()
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
	if server == nil {
		t.Skip(serverErr)
	}
	u, err := server.NewDB(t.Name())
	if err != nil {
		t.Fatal(err)
	}
	return u
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
