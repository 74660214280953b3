package stages

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// TestClassify_RepairServedAtAnotherTierPricedPerCall: a priority call
// whose answer is off-schema is billed at priority; its repair, served as
// standard (x-gemini-service-tier: standard), must be priced at standard.
// The Result carries each call's usage for that (its one Usage sums both
// at the dearer tier).
func TestClassify_RepairServedAtAnotherTierPricedPerCall(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		text, tier := `not json`, "priority"
		if n.Add(1) > 1 {
			text, tier = `{\"label\":\"bug\",\"confidence\":0.9,\"reason\":\"crash\"}`, "standard"
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(TierHeader, tier)
		fmt.Fprintf(w, `{"candidates":[{"content":{"role":"model","parts":[{"text":"%s"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1000000,"candidatesTokenCount":0,"totalTokenCount":1000000}}`, text)
	}))
	defer srv.Close()
	c := tierClassify(t, srv.URL, TierConfig{Tier: TierPriority})
	res, err := c.Process(context.Background(), testItem("r1", "the app crashes on start"))
	if err != nil {
		t.Fatalf("process: %v (calls %d)", err, n.Load())
	}
	if len(res.PerCall) != 2 || res.PerCall[0].Tier != pipeline.TierPriority || res.PerCall[1].Tier != "" {
		t.Fatalf("per-call usage %+v, want the priority call, then the standard one", res.PerCall)
	}
	price := pipeline.Price{InputPerM: 1, PriorityFactor: 1.8}
	want := 1.8 + 1.0 // one million tokens at priority, one million at standard
	var got float64
	for _, u := range res.PerCall {
		got += price.Cost(u)
	}
	if math.Abs(got-want) > 1e-9 {
		t.Errorf("two calls (priority, then standard) priced $%.2f, want $%.2f (per call %+v)", got, want, res.PerCall)
	}
}
