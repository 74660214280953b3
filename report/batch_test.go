package report

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

func TestLoad_BatchJobs(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "b.db"), store.Options{Stages: []store.StageDef{
		{Name: "classify", Config: []byte(`{"model":"gemini-2.5-flash"}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if d, err := Load(db, LoadOptions{}); err != nil || d.Batch != nil {
		t.Fatalf("no jobs: batch %+v %v", d.Batch, err)
	}
	if _, err := db.Ingest([]pipeline.Record{{ID: "a", Text: "x"}, {ID: "b", Text: "y"}}); err != nil {
		t.Fatal(err)
	}
	job, _, err := db.ReserveBatch("classify", 10, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	usage := pipeline.Usage{PromptTokens: 1_000_000, CandidateTokens: 100_000}
	if _, err := db.CommitBatch(job.Num, []pipeline.Transition{{Stage: "classify", ID: "a", Outcome: pipeline.Succeeded,
		Result: pipeline.Result{Output: []byte(`{"label":"bug"}`), Usage: usage}}}); err != nil {
		t.Fatal(err)
	}
	d, err := Load(db, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// gemini-2.5-flash: $0.30 in, $2.50 out per million online; half in a batch.
	if b := d.Batch; b == nil || b.Jobs != 1 || b.Open != 1 || b.Answered != 1 || b.CostUSD != 0.275 || b.SavedUSD != 0.275 {
		t.Fatalf("batch %+v", d.Batch)
	}
	var out bytes.Buffer
	if err := Text(&out, d); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "1 batch jobs (1 open)") || !strings.Contains(out.String(), "saved $0.2750") {
		t.Errorf("text report:\n%s", out.String())
	}
}
