package stages

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// A condition that fails on an item (here: comparing a text field with a
// number) dead-letters it online without a call; the batch path must not
// build a paid request for it either.
func TestLLM_BatchRequest_WhenFails(t *testing.T) {
	l := newTestLLM(t, LLMConfig{Name: "summary", Labels: []string{"bug", "other"}, When: `fields.app > 3`,
		Endpoint: Endpoint{Backend: BackendGemini, APIKey: testKey, BaseURL: "http://127.0.0.1:1"}})
	it := testItem("r1", "It crashes")
	if _, skip := l.Skip(context.Background(), it); skip {
		t.Fatal("skipped")
	}
	_, perr := l.Process(context.Background(), it)
	if c := pipeline.ClassOf(context.Background(), perr); c != pipeline.ClassPermanent {
		t.Fatalf("Process: %v (%s), want a permanent error without a call", perr, c)
	}
	r, err := l.BatchRequest(it)
	if err == nil {
		b, _ := json.Marshal(r.Contents)
		t.Errorf("BatchRequest built a paid request %s for an item Process dead-letters without a call (%v)", b, perr)
	}
}
