package batch

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/sawtooth-dev/sawtooth/store"
)

// summarySchema is the output of a job-file stage that is not classify.
const summarySchema = `{"type":"object","properties":{"summary":{"type":"string"},"severity":{"type":"integer","minimum":1,"maximum":5}},"required":["summary","severity"]}`

// newSummary is a summarize stage with its own prompt, schema and
// condition, calling url.
func newSummary(t *testing.T, url string) *stages.LLM {
	t.Helper()
	l, err := stages.NewLLM(context.Background(), stages.LLMConfig{
		Name: "summary", Schema: []byte(summarySchema), When: `fields.app == "notes"`,
		PromptTemplate: "Summarize this {{.Fields.app}} review in one sentence: {{.Text}}",
		Endpoint:       stages.Endpoint{Backend: stages.BackendGemini, APIKey: geminisim.DefaultAPIKey, BaseURL: url},
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestDriver_LLMStage runs a summarize stage (its own prompt, JSON
// schema and condition) through the Batch API against the simulator: the
// items its condition leaves out are committed skipped without a request,
// the others are asked once each in shuffled jobs, and each stored answer
// is the one the online call gives for the same item.
func TestDriver_LLMStage(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	sim := geminisim.New(geminisim.Config{Now: clk.Now, Seed: 7,
		Batch: geminisim.BatchConfig{Shuffle: true, Pending: time.Minute, Running: 5 * time.Minute}})
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
	const n = 24
	var recs []pipeline.Record
	for i := range n {
		app := "notes"
		if i%3 == 0 {
			app = "mail"
		}
		recs = append(recs, pipeline.Record{ID: fmt.Sprintf("r%03d", i), Fields: map[string]string{"app": app},
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
	sum, err := New(db, newSummary(t, url), api, Config{Size: 7, Poll: 10 * time.Second, Now: clk.Now, Sleep: clk.Sleep}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if sum.Answered != n || sum.Dead != 0 || sum.Returned != 0 {
		t.Errorf("summary %+v", sum)
	}
	st := sim.Stats()
	if len(st.Items) != 2*n/3 {
		t.Errorf("the simulator saw %d items, want %d (the notes reviews)", len(st.Items), 2*n/3)
	}
	for h, it := range st.Items {
		if it.OK != 1 {
			t.Errorf("item %s answered %d times (calls %d)", h, it.OK, it.Calls)
		}
	}
	ref := geminisim.New(geminisim.Config{})
	refURL, err := ref.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	online := newSummary(t, refURL)
	seen := 0
	err = db.ForEachOutput("summary", func(rec pipeline.Record, out json.RawMessage) error {
		seen++
		it := pipeline.Item{Record: rec}
		if skipped, ok := online.Skip(context.Background(), it); ok {
			if string(out) != string(skipped.Output) {
				t.Errorf("item %s: stored %s, want the skip %s", rec.ID, out, skipped.Output)
			}
			return nil
		}
		want, err := online.Process(context.Background(), it)
		if err != nil {
			return err
		}
		var got map[string]any
		if err := json.Unmarshal(out, &got); err != nil || got["summary"] == nil || got["severity"] == nil {
			t.Errorf("item %s: stored %s, want the schema's fields", rec.ID, out)
		}
		if string(out) != string(want.Output) {
			t.Errorf("item %s: batch %s, online %s", rec.ID, out, want.Output)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != n {
		t.Errorf("%d outputs stored, want %d", seen, n)
	}
}
