package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
	"github.com/sawtooth-dev/sawtooth/store/postgres/pgtest"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// TestFleet_DatabaseLoss: two worker processes of the real binary drain
// one PostgreSQL pipeline against the simulator; a third of the way in
// the server is stopped immediately, as a crash would stop it. Both
// workers stop claiming and exit 3, within StoreRetry + a lease (and a
// generous allowance for a loaded machine), saying which database was
// lost, without its password, and what to do. The server is restarted
// on the same data, each worker is run again with the same command, and
// the drain completes: every item done or dead exactly once, the
// aggregate equal to its recomputation, and the answers billed beyond
// one per item no more than the leases the workers counted lost (their
// calls in flight at the loss, whose results could not be committed).
// CI: 3,000 items; SAWTOOTH_LONG=1: 20,000.
func TestFleet_DatabaseLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, stops and restarts it under real processes")
	}
	start := time.Now()
	srv, url := startPostgresServer(t)
	items := pick(3000, 20000)
	const (
		workers = 2
		lease   = 4 * time.Second
		// password is in the workers' environment (PGPASSWORD), where
		// libpq reads it: it must appear in none of their output. The
		// test server trusts the socket, so it is never asked for.
		password = "s3cret-never-shown"
	)
	dir := t.TempDir()
	input := writeItems(t, dir, items, 5)
	// Slow enough that the loss comes mid-run on a fast machine too.
	sim, simURL := startSim(t, geminisim.Config{
		Latency: geminisim.Latency{Base: 60 * time.Millisecond, Jitter: 60 * time.Millisecond},
		Seed:    23,
	})
	env := append(simEnv(simURL), "PGPASSWORD="+password)
	base := []string{"run", "--db", url, "--json", "--quiet", "--timeout", "20s", "--start", "8", "--ceiling", "8", "--lease", lease.String()}
	// The same command for each worker, before and after the loss: the
	// first one ingests the input (again: only new ids, none).
	commands := [workers][]string{append(append([]string{}, base...), "--input", input), base}
	var all []*worker
	t.Cleanup(func() {
		for _, w := range all {
			if !w.exited() {
				w.cmd.Process.Kill()
				<-w.done
			}
		}
	})
	launch := func(i int) *worker {
		w := startWorker(t, env, commands[i]...)
		all = append(all, w)
		return w
	}

	first := []*worker{launch(0)}
	db := openFleetDB(t, url)
	waitFor(t, func() bool {
		c, err := db.Counts()
		return err == nil && c.Items == items
	}, "the first worker to ingest the input")
	first = append(first, launch(1))
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		c, err := db.Counts()
		if err == nil && c.Done >= items/3 {
			break
		}
		for i, w := range first {
			if w.exited() {
				t.Fatalf("worker %d exited (%v) before a third of the items were done:\n%s", i, w.err, tail(w.stderr.String(), 2000))
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("a third of the items not done after 5 minutes: %+v %v", c, err)
		}
	}

	if err := srv.Shutdown(pgtest.Immediate); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	// A worker gives the database up after failing for StoreRetry, then
	// waits at most a lease for its calls in flight; the rest is
	// allowance for a loaded machine, not a measure.
	bound := pipeline.DefaultStoreRetry + lease + time.Minute
	redacted := postgres.Redact(url)
	var leasesLost int64
	for i, w := range first {
		select {
		case <-w.done:
		case <-time.After(bound - time.Since(lost)):
			t.Fatalf("worker %d still running %s after the database was stopped:\n%s", i, time.Since(lost).Round(time.Second), tail(w.stderr.String(), 2000))
		}
		if !resumable(w.err) {
			t.Fatalf("worker %d exited with %v after the database was stopped, want exit 3 (stopped, resumable):\n%s", i, w.err, tail(w.stderr.String(), 2000))
		}
		msg := w.stderr.String()
		for _, want := range []string{"lost the database " + redacted, "Check that the PostgreSQL server is running", "run the same command again"} {
			if !strings.Contains(msg, want) {
				t.Errorf("worker %d's message lacks %q:\n%s", i, want, tail(msg, 2000))
			}
		}
		leasesLost += classifyLeasesLost(t, i, w)
	}
	t.Logf("both workers exited 3 within %s of the database's loss", time.Since(lost).Round(100*time.Millisecond))
	idle(t, sim)
	if c, err := db.Counts(); err == nil {
		t.Fatalf("the store answered with the server stopped: %+v", c)
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	again := []*worker{launch(0), launch(1)}
	for i, w := range again {
		select {
		case <-w.done:
		case <-time.After(5 * time.Minute):
			t.Fatalf("worker %d run again did not finish within 5 minutes:\n%s", i, tail(w.stderr.String(), 2000))
		}
		if w.err != nil {
			t.Fatalf("worker %d run again exited with %v:\n%s", i, w.err, tail(w.stderr.String(), 2000))
		}
		leasesLost += classifyLeasesLost(t, i, w)
	}
	idle(t, sim)
	for i, w := range all {
		if out := w.stdout.String() + w.stderr.String(); strings.Contains(out, password) {
			t.Errorf("process %d showed the database password", i)
		}
	}

	storetest.Invariants(t, db)
	finalPlaces(t, url, items)
	if hs, err := db.Holders(context.Background()); err != nil || len(hs) != 0 {
		t.Errorf("leases left after the run: %+v %v", hs, err)
	}
	paidTwiceItems, extra := paidTwice(sim)
	if extra > leasesLost {
		t.Errorf("%d answers billed beyond one per item (%d items), but only %d leases counted lost", extra, paidTwiceItems, leasesLost)
	}
	t.Logf("FIGURES | fleet database loss | %d items, %d workers, server stopped immediately at a third, both exited 3 and ran again | %d items paid twice (%d extra answers), %d leases lost counted | %s",
		items, workers, paidTwiceItems, extra, leasesLost, time.Since(start).Round(time.Second))
}

// classifyLeasesLost reads the leases a worker lost at classify from the
// JSON summary it printed, whatever its exit code.
func classifyLeasesLost(t *testing.T, i int, w *worker) int64 {
	t.Helper()
	var sum pipeline.RunSummary
	if err := json.Unmarshal(w.stdout.Bytes(), &sum); err != nil {
		t.Fatalf("worker %d's summary: %v\n%s", i, err, tail(w.stdout.String(), 2000))
	}
	s := sum.Stages["classify"]
	if s == nil {
		return 0
	}
	return s.LeasesLost
}
