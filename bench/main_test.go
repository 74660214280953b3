package bench

import (
	"fmt"
	"os"
	"testing"

	"github.com/sawtooth-dev/sawtooth/store/postgres/pgtest"
	"go.uber.org/goleak"
)

// pg is the throwaway PostgreSQL server of this test binary, started by
// the first test that asks for one (most of the package's tests need
// none).
var pg pgtest.Shared

// postgresURL returns a fresh database on the throwaway server, skipping
// the test when the server binaries are missing (failing it when CI
// requires them).
func postgresURL(t *testing.T) string { return pg.NewDB(t) }

// TestMain stops the server, if a test started one, and checks that no
// goroutine outlives the tests (but the one opencensus worker the genai
// SDK's dependencies start at init, for the life of the process).
func TestMain(m *testing.M) {
	code := m.Run()
	pg.Stop()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
