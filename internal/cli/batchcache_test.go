package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestRun_BatchAnswersCachedAndBilled: batch answers go into the answer
// cache and the ledger as online ones do: an online run asking the same
// questions for new ids pays nothing, and the lifetime spend that
// --budget-total reads includes what the batch jobs cost.
func TestRun_BatchAnswersCachedAndBilled(t *testing.T) {
	sim, url := batchSim(t, geminisim.BatchConfig{Shuffle: true})
	dir := t.TempDir()
	db, first, again := filepath.Join(dir, "b.db"), filepath.Join(dir, "first.jsonl"), filepath.Join(dir, "again.jsonl")
	if _, err := writeFirstLines(first, testReviews(t), 40); err != nil {
		t.Fatal(err)
	}
	// The same 40 reviews under new ids.
	raw, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	var renamed bytes.Buffer
	for _, line := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatal(err)
		}
		rec["id"] = "again-" + rec["id"].(string)
		b, _ := json.Marshal(rec)
		renamed.Write(append(b, '\n'))
	}
	if err := os.WriteFile(again, renamed.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	if err := runApp([]string{"sawtooth", "run", "--db", db, "--input", first, "--base-url", url, "--quiet",
		"--mode", "batch", "--batch-poll", "20ms"}, io.Discard, &stderr); err != nil {
		t.Fatalf("batch run: %v\n%s", err, stderr.String())
	}
	if calls := sim.Stats().Calls; calls != 0 {
		t.Fatalf("the batch run made %d online calls, want 0", calls)
	}
	var out syncBuffer
	if err := runApp([]string{"sawtooth", "status", "--db", db, "--json"}, &out, &stderr); err != nil {
		t.Fatal(err)
	}
	var st struct {
		Money map[string]struct {
			SpentUSD float64 `json:"spent_usd"`
		} `json:"money"`
		Batch struct {
			CostUSD float64 `json:"cost_usd"`
		} `json:"batch"`
	}
	if err := json.Unmarshal([]byte(out.String()), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out.String())
	}
	if spent, cost := st.Money["classify"].SpentUSD, st.Batch.CostUSD; cost <= 0 || spent < cost*0.999 || spent > cost*1.001 {
		t.Errorf("classify's ledger spent $%g, the batch jobs cost $%g: want them equal\n%s", spent, cost, out.String())
	}
	out = syncBuffer{}
	if err := runApp([]string{"sawtooth", "run", "--db", db, "--input", again, "--base-url", url, "--quiet", "--json"}, &out, &stderr); err != nil {
		t.Fatalf("online run: %v\n%s", err, stderr.String())
	}
	if calls := sim.Stats().Calls; calls != 0 {
		t.Errorf("the online run paid %d calls for questions the batch answered, want 0\n%s", calls, out.String())
	}
}
