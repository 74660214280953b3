package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/sawtooth-dev/sawtooth/store"
)

// TestRun_OnlineLeavesOpenBatchJobs: an online run on a database whose
// open batch jobs hold items drains everything else, then stops early
// (exit 3) saying how to collect them, instead of calling the run
// complete with items it never saw.
func TestRun_OnlineLeavesOpenBatchJobs(t *testing.T) {
	_, url := batchSim(t, geminisim.BatchConfig{})
	dir := t.TempDir()
	db, input := filepath.Join(dir, "b.db"), filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 20); err != nil {
		t.Fatal(err)
	}
	// A first run with a refused key leaves every item queued at classify.
	t.Setenv("GEMINI_API_KEY", "wrong")
	var stderr syncBuffer
	if err := runApp([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--quiet"}, &syncBuffer{}, &stderr); err == nil {
		t.Fatalf("run with a wrong key succeeded\n%s", stderr.String())
	}
	// An interrupted batch run left a job holding up to 5 of them (the
	// fatal stop may come before sanitize has passed all 20 on, so the
	// job holds what classify's queue had: at least the item refused).
	defs, err := store.ReadDefinition(db, 0)
	if err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(db, store.Options{Stages: defs})
	if err != nil {
		t.Fatal(err)
	}
	job, ok, err := s.ReserveBatch("classify", 5, time.Now())
	if err != nil || !ok || len(job.Items) == 0 {
		t.Fatalf("ReserveBatch: %v, %v", ok, err)
	}
	want := fmt.Sprintf("%s still held by open batch jobs", plural(len(job.Items), "item"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GEMINI_API_KEY", geminisim.DefaultAPIKey)
	for _, args := range [][]string{
		{"run", "--db", db, "--base-url", url},
		{"run", "--db", db, "--base-url", url}, // and again: still held, still said
	} {
		var stderr syncBuffer
		err = runApp(append([]string{"sawtooth"}, append(args, "--quiet")...), &syncBuffer{}, &stderr)
		if !errors.Is(err, pipeline.ErrStopped) || !strings.Contains(err.Error(), want) {
			t.Fatalf("online run: %v, want a stop saying %q\n%s", err, want, stderr.String())
		}
	}
}
