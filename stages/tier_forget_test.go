package stages

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestLLM_AutoForgetsItemsThatLeaveUnbilled: an auto stage remembers each
// item's first flex call until the tier answers it; an item that leaves
// without a billed answer (a permanent 400, a run stopping) must be
// forgotten too, or a night of such items grows the map without bound.
func TestLLM_AutoForgetsItemsThatLeaveUnbilled(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"code":400,"message":"Request contains an invalid argument.","status":"INVALID_ARGUMENT"}}`)
	}))
	defer srv.Close()
	c := tierClassify(t, srv.URL, TierConfig{Tier: TierAuto})
	for i := 0; i < 100; i++ {
		if _, err := c.Process(context.Background(), testItem(fmt.Sprint("r", i), fmt.Sprint("text ", i))); err == nil {
			t.Fatal("want the 400")
		}
	}
	c.tiers.mu.Lock()
	n := len(c.tiers.since)
	c.tiers.mu.Unlock()
	if n != 0 {
		t.Errorf("%d items remembered after all left unbilled, want 0", n)
	}
}

// TestTierPolicy_SweepsItemsLongGone: items that left the run with no
// answer and no permanent failure (a dead letter after transient errors,
// a run that stopped) are dropped once they are older than the deadline
// and forgetAfter, when the map has grown: it stays as large as the items
// in play. An item still within its deadline keeps its first flex call.
func TestTierPolicy_SweepsItemsLongGone(t *testing.T) {
	now := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	p := &tierPolicy{tier: TierAuto, deadline: 30 * time.Minute, since: map[string]time.Time{}, now: func() time.Time { return now }}
	for i := range 1000 {
		p.next(fmt.Sprint("old", i), time.Minute)
	}
	now = now.Add(30*time.Minute + forgetAfter + time.Second)
	p.next("young", time.Minute)
	for i := range 2000 {
		p.next(fmt.Sprint("new", i), time.Minute)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.since {
		if strings.HasPrefix(k, "old") {
			t.Fatalf("%s still remembered %s after its first flex call", k, 30*time.Minute+forgetAfter)
		}
	}
	if _, ok := p.since["young"]; !ok {
		t.Error("an item within its deadline was forgotten")
	}
}
