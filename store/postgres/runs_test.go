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
