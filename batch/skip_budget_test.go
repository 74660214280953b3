package batch

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/sawtooth-dev/sawtooth/store"
)

// Items a stage's condition leaves out cost nothing online (Skip comes
// before any reservation); under a budget too small for one request the
// batch driver must still commit them skipped, not stop with them queued.
func TestDriver_LLMStage_SkippedUnderBudget(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	sim := geminisim.New(geminisim.Config{Now: clk.Now, Seed: 7})
	url, err := sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	db, err := store.Open(filepath.Join(t.TempDir(), "b.db"), store.Options{Stages: []store.StageDef{{Name: "summary"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const n = 6
	var recs []pipeline.Record
	for i := range n {
		recs = append(recs, pipeline.Record{ID: fmt.Sprintf("r%03d", i), Fields: map[string]string{"app": "mail"},
			Text: fmt.Sprintf("review %d: %s", i, reviewTexts[i%len(reviewTexts)])})
	}
	if _, err := db.Ingest(recs); err != nil {
		t.Fatal(err)
	}
	api, err := genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey: geminisim.DefaultAPIKey, Backend: genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: url, RetryOptions: &genai.HTTPRetryOptions{Attempts: genai.Ptr[int32](1)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every item is a "mail" review: the condition skips them all.
	sum, err := New(db, newSummary(t, url), api, Config{Size: 3, Poll: 10 * time.Second, Now: clk.Now, Sleep: clk.Sleep,
		Budget: pipeline.Budget{RunUSD: 1e-7}}).Run(context.Background())
	if err != nil || sum.Answered != n {
		t.Errorf("run: %v; summary %+v; want all %d items committed skipped at no cost", err, sum, n)
	}
}
