package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/sawtooth-dev/sawtooth/store/postgres/pgtest"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// TestFleet_DatabaseRestartPaysNothingTwice: two worker processes of the
// real binary drain one PostgreSQL pipeline against the simulator; a
// third of the way in the server is stopped immediately and restarted
// 8 s later on the same data (the outage), well within three
// quarters of the 30 s lease that the guarantee covers. The workers
// start no call while it is away and keep the answers of their calls in
// flight until it is back; a worker that gave it up meanwhile (exit 3)
// is run again, as its unit's Restart= would. At the end every item is
// done or dead once, nothing is leased, and the simulator answered no
// item twice.
func TestFleet_DatabaseRestartPaysNothingTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, stops and restarts it under real processes")
	}
	start := time.Now()
	srv, url := startPostgresServer(t)
	items := pick(1500, 10000)
	const (
		workers = 2
		lease   = 30 * time.Second
		down    = 8 * time.Second
	)
	dir := t.TempDir()
	input := writeItems(t, dir, items, 7)
	sim, simURL := startSim(t, geminisim.Config{
		Latency: geminisim.Latency{Base: 60 * time.Millisecond, Jitter: 60 * time.Millisecond},
		Seed:    29,
	})
	env := simEnv(simURL)
	base := []string{"run", "--db", url, "--quiet", "--timeout", "20s", "--start", "8", "--ceiling", "8", "--lease", lease.String()}
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

	fleet := []*worker{launch(0)}
	db := openFleetDB(t, url)
	waitFor(t, func() bool {
		c, err := db.Counts()
		return err == nil && c.Items == items
	}, "the first worker to ingest the input")
	fleet = append(fleet, launch(1))
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		c, err := db.Counts()
		if err == nil && c.Done >= items/3 {
			break
		}
		for i, w := range fleet {
			if w.exited() {
				t.Fatalf("worker %d exited (%v) before a third of the items were done:\n%s", i, w.err, tail(w.stderr.String(), 2000))
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("a third of the items not done after 5 minutes: %+v %v", c, err)
		}
	}

	stopped := time.Now()
	if err := srv.Shutdown(pgtest.Immediate); err != nil {
		t.Fatal(err)
	}
	time.Sleep(down)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	outage := time.Since(stopped)
	if outage >= 3*lease/4 {
		t.Skipf("the server was away %s, beyond the three quarters of a lease the guarantee covers: the machine is too loaded for this test", outage.Round(time.Second))
	}

	// Workers that gave the database up (exit 3) are run again until the
	// queues are empty; each must end with 0 or 3.
	restarts := 0
	for i, w := range fleet {
		for {
			select {
			case <-w.done:
			case <-time.After(5 * time.Minute):
				t.Fatalf("worker %d still running 5 minutes after the restart:\n%s", i, tail(w.stderr.String(), 2000))
			}
			if w.err == nil {
				break
			}
			if !resumable(w.err) {
				t.Fatalf("worker %d exited with %v, want 0 or 3:\n%s", i, w.err, tail(w.stderr.String(), 2000))
			}
			restarts++
			w = launch(i)
		}
	}
	idle(t, sim)

	storetest.Invariants(t, db)
	finalPlaces(t, url, items)
	if hs, err := db.Holders(context.Background()); err != nil || len(hs) != 0 {
		t.Errorf("leases left after the run: %+v %v", hs, err)
	}
	if n, extra := paidTwice(sim); n != 0 {
		t.Errorf("%d items answered twice (%d extra answers) with the database away %s, a lease of %s", n, extra, outage.Round(100*time.Millisecond), lease)
	}
	t.Logf("FIGURES | fleet database restart | %d items, %d workers, server away %s at a third, lease %s, %d resumable stops run again | %s",
		items, workers, outage.Round(100*time.Millisecond), lease, restarts, time.Since(start).Round(time.Second))
}

// TestFleet_LiveWorkersReadRunningAfterDatabaseRestart: the server is
// restarted under two live workers, quickly enough that they ride it
// out. A restart ends the session whose lock tells other processes a
// run is alive; the workers take it again, so their runs read
// "running" while they work (not "killed"), and "complete" once they
// are done. A worker's failing window also spans its reconnect after
// the restart, which a loaded machine can push past StoreRetry: a
// worker that gives the database up then (exit 3) is run again, as its
// unit's Restart= would, and nothing may be paid twice either way.
func TestFleet_LiveWorkersReadRunningAfterDatabaseRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL, restarts it under real processes")
	}
	srv, url := startPostgresServer(t)
	items := pick(4000, 20000)
	const workers = 2
	dir := t.TempDir()
	input := writeItems(t, dir, items, 9)
	sim, simURL := startSim(t, geminisim.Config{
		Latency: geminisim.Latency{Base: 60 * time.Millisecond, Jitter: 60 * time.Millisecond},
		Seed:    31,
	})
	env := simEnv(simURL)
	base := []string{"run", "--db", url, "--quiet", "--timeout", "20s", "--start", "8", "--ceiling", "8", "--lease", "30s"}
	commands := [workers][]string{append(append([]string{}, base...), "--input", input), base}
	var fleet, all []*worker
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
	fleet = append(fleet, launch(0))
	db := openFleetDB(t, url)
	waitFor(t, func() bool {
		c, err := db.Counts()
		return err == nil && c.Items == items
	}, "the first worker to ingest the input")
	fleet = append(fleet, launch(1))
	alive := func() {
		t.Helper()
		for i, w := range fleet {
			if w.exited() {
				t.Fatalf("worker %d exited (%v) before its run read running again:\n%s", i, w.err, tail(w.stderr.String(), 2000))
			}
		}
	}
	running := func() int {
		runs, err := db.Runs(10)
		if err != nil {
			return -1
		}
		n := 0
		for _, r := range runs {
			if r.Status == "running" {
				n++
			}
		}
		return n
	}
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		alive()
		if c, err := db.Counts(); err == nil && c.Done >= items/4 && running() == workers {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a quarter of the items not done, with both runs running, after 5 minutes")
		}
	}

	stopped := time.Now()
	if err := srv.Shutdown(pgtest.Immediate); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if away := time.Since(stopped); away >= pipeline.DefaultStoreRetry {
		t.Skipf("the restart took %s, past the %s a worker rides out: the machine is too loaded for this test", away.Round(100*time.Millisecond), pipeline.DefaultStoreRetry)
	}
	// From here a worker may have given the database up (exit 3, see
	// the doc comment): it is run again; any other exit fails the test.
	restarts := 0
	rerun := func(i int) {
		t.Helper()
		w := fleet[i]
		if !resumable(w.err) {
			t.Fatalf("worker %d exited with %v after the restart, want 0 or 3:\n%s", i, w.err, tail(w.stderr.String(), 2000))
		}
		restarts++
		fleet[i] = launch(i)
	}
	// The runs read killed until each worker's next look at its lock.
	for deadline := time.Now().Add(time.Minute); running() != workers; time.Sleep(50 * time.Millisecond) {
		for i, w := range fleet {
			if w.exited() {
				rerun(i)
			}
		}
		if time.Now().After(deadline) {
			runs, err := db.Runs(10)
			t.Fatalf("a minute after the restart, with both workers alive, the runs read %+v (%v); want both running", runStatuses(runs), err)
		}
	}
	for i := range fleet {
		for {
			w := fleet[i]
			select {
			case <-w.done:
			case <-time.After(5 * time.Minute):
				t.Fatalf("worker %d still running 5 minutes after the restart:\n%s", i, tail(w.stderr.String(), 2000))
			}
			if w.err == nil {
				break
			}
			rerun(i)
		}
	}
	idle(t, sim)
	finalPlaces(t, url, items)
	if n, extra := paidTwice(sim); n != 0 {
		t.Errorf("%d items answered twice (%d extra answers) after a database restart, %d workers run again", n, extra, restarts)
	}
	runs, err := db.Runs(10)
	if err != nil {
		t.Fatal(err)
	}
	// Each worker's last run completed; a run whose worker gave the
	// database up is over (stopped, or killed if it could not record
	// that), never still running.
	complete := 0
	for _, r := range runs {
		switch {
		case r.Status == "complete":
			complete++
		case r.Status == "running" || restarts == 0:
			t.Errorf("run %s reads %s after its worker finished (runs: %v)", r.ID, r.Status, runStatuses(runs))
		}
	}
	if complete != workers || len(runs) != workers+restarts {
		t.Errorf("runs %v: want %d complete of %d (%d workers run again)", runStatuses(runs), workers, workers+restarts, restarts)
	}
	t.Logf("%d items, %d workers, %d gave the database up after the restart and ran again", items, workers, restarts)
	if restarts >= workers {
		t.Skipf("every worker gave the database up after the restart (%d runs again): the machine is too loaded to show a live worker's run reading running", restarts)
	}
}

// runStatuses is each run's id and status, for messages.
func runStatuses(runs []pipeline.RunSummary) []string {
	var out []string
	for _, r := range runs {
		out = append(out, r.ID+" "+r.Status)
	}
	return out
}
