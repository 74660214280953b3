package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// TestDB_KilledRun: a run still "running" reads so while its process's
// session lives, and "killed", with the usage its commits recorded,
// once that session is gone.
func TestDB_KilledRun(t *testing.T) {
	worker, u := openNew(t, Options{})
	watcher, err := Open(context.Background(), u, Options{Stages: storetest.Stages, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	// The test decides when the handle looks at its lock.
	worker.runLockEvery = time.Hour
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := worker.SaveRun(pipeline.RunSummary{ID: "r1", Started: start, Status: "running"}); err != nil {
		t.Fatal(err)
	}
	worker.AppendSamples("r1", []pipeline.Sample{{At: start.Add(5 * time.Second), Stage: "classify"}})
	if _, err := worker.Ingest([]pipeline.Record{storetest.Record("a", "bug a", "x", "1")}); err != nil {
		t.Fatal(err)
	}
	qs, _ := worker.Queued("sanitize", 0, 10)
	used := pipeline.Usage{PromptTokens: 3, TotalTokens: 3}
	if err := worker.Commit([]pipeline.Transition{{Stage: "sanitize", ID: "a", Seq: qs[0].Seq, Outcome: pipeline.Succeeded,
		Result: pipeline.Result{Output: []byte(`{}`)}, Usage: used}}); err != nil {
		t.Fatal(err)
	}
	if runs, err := watcher.Runs(10); err != nil || len(runs) != 1 || runs[0].Status != "running" {
		t.Fatalf("Runs while the worker lives = %+v, %v", runs, err)
	}
	// The worker's process dies: the server ends its sessions (and waits
	// up to 5 s for them to be gone, so the lock is released on return).
	sql(t, u, `SELECT pg_terminate_backend(pid, 5000) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::oid
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, runLockClass)
	runs, err := watcher.Runs(10)
	if err != nil || len(runs) != 1 {
		t.Fatalf("Runs = %+v, %v", runs, err)
	}
	r := runs[0]
	if r.Status != RunKilled || !r.Ended.Equal(start.Add(5*time.Second)) || r.Stages["sanitize"] == nil || r.Stages["sanitize"].Usage != used {
		t.Fatalf("the killed run reads %+v (stages %+v)", r, r.Stages)
	}
}

// TestDB_RunLockOutlivesItsSession: the session holding a live run's
// lock ends while the process lives on (the server restarted, the
// connection dropped): the run reads "killed" only until the handle's
// next check, which takes the lock again on a new session, and then
// reads "running"; once the run's end is saved the lock is gone.
func TestDB_RunLockOutlivesItsSession(t *testing.T) {
	worker, u := openNew(t, Options{})
	watcher, err := Open(context.Background(), u, Options{Stages: storetest.Stages, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	// The test decides when the handle looks at its lock.
	worker.runLockEvery = time.Hour
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := worker.SaveRun(pipeline.RunSummary{ID: "r1", Started: start, Status: "running"}); err != nil {
		t.Fatal(err)
	}
	status := func() string {
		t.Helper()
		runs, err := watcher.Runs(10)
		if err != nil || len(runs) != 1 {
			t.Fatalf("Runs = %+v, %v", runs, err)
		}
		return runs[0].Status
	}
	sql(t, u, `SELECT pg_terminate_backend(pid, 5000) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::oid
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, runLockClass)
	if got := status(); got != RunKilled {
		t.Fatalf("with the lock's session gone the run reads %q, want %q (the test did not end the session)", got, RunKilled)
	}
	if err := worker.checkRunLock(); err != nil {
		t.Fatalf("checkRunLock: %v", err)
	}
	if got := status(); got != "running" {
		t.Errorf("after the check the live run reads %q, want running", got)
	}
	if err := worker.checkRunLock(); err != nil {
		t.Fatalf("checkRunLock on a live session: %v", err)
	}
	if err := worker.SaveRun(pipeline.RunSummary{ID: "r1", Started: start, Ended: start.Add(time.Minute), Status: "complete"}); err != nil {
		t.Fatal(err)
	}
	var held int
	if err := watcher.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::oid
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, runLockClass).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Errorf("%d run locks held after the run saved its end (a lock taken twice on one session outlives one unlock)", held)
	}
	if got := status(); got != "complete" {
		t.Errorf("the ended run reads %q", got)
	}
}
