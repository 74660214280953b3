package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// statusOf is `status --json` of db, decoded.
func statusOf(t *testing.T, db string) (v struct {
	CostUSD  float64                    `json:"cost_usd"`
	Usage    pipeline.Usage             `json:"usage"`
	LastRuns []pipeline.RunSummary      `json:"last_runs"`
	Money    map[string]pipeline.Ledger `json:"money"`
}) {
	t.Helper()
	var out, errs syncBuffer
	if err := runApp([]string{"sawtooth", "status", "--db", db, "--json"}, &out, &errs); err != nil {
		t.Fatalf("status: %v\n%s", err, errs.String())
	}
	if err := json.Unmarshal([]byte(out.String()), &v); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out.String())
	}
	return v
}

// TestStatus_CostIsTheLedger: a run killed before it saved its end priced
// nothing in its record, but its committed results were billed: status
// shows the ledger's cost, the one every other command reads, not the
// ended runs' alone.
func TestStatus_CostIsTheLedger(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "k.db")
	s, err := store.Open(path, store.Options{Stages: namedStages()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ingest([]pipeline.Record{{ID: "a", Text: "the app crashes"}}); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := s.SaveRun(pipeline.RunSummary{ID: "r1", Started: start, Status: "running"}); err != nil {
		t.Fatal(err)
	}
	first := namedStages()[0].Name
	qs, err := s.Queued(first, 0, 1)
	if err != nil || len(qs) != 1 {
		t.Fatalf("Queued: %v %v", qs, err)
	}
	used := pipeline.Usage{PromptTokens: 300, CandidateTokens: 40, TotalTokens: 340}
	if err := s.Commit([]pipeline.Transition{{Stage: first, ID: "a", Seq: qs[0].Seq, Outcome: pipeline.Succeeded,
		Result: pipeline.Result{Output: []byte(`{}`), Usage: used}, Usage: used, CostUSD: 0.0424}}); err != nil {
		t.Fatal(err)
	}
	// Killed: the handle goes without the run's end.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st := statusOf(t, path)
	if len(st.LastRuns) != 1 || st.LastRuns[0].Status != store.RunKilled {
		t.Fatalf("runs %+v, want one killed", st.LastRuns)
	}
	if st.CostUSD != 0.0424 || st.Usage.PromptTokens != 300 {
		t.Errorf("status: cost $%v, %d tokens in; want the ledger's $0.0424 and the killed run's 300", st.CostUSD, st.Usage.PromptTokens)
	}
	var out, errs syncBuffer
	if err := runApp([]string{"sawtooth", "status", "--db", path}, &out, &errs); err != nil {
		t.Fatal(err)
	}
	if want := "cost $0.0424"; !strings.Contains(out.String(), want) || strings.Contains(out.String(), "saved no price") {
		t.Errorf("status text lacks %q, or still calls the killed run's tokens unpriced:\n%s", want, out.String())
	}
	// It recorded no sample: how long it lived is unknown, not 0 s.
	if want := "r1  killed    ?"; !strings.Contains(out.String(), want) {
		t.Errorf("status text lacks %q:\n%s", want, out.String())
	}
}
