package pipeline_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// skipOdd skips items with an odd id and answers the others.
type skipOdd struct{ funcStage }

func (s *skipOdd) Skip(_ context.Context, it pipeline.Item) (pipeline.Result, bool) {
	n, _ := strconv.Atoi(strings.TrimPrefix(it.ID, "i"))
	if n%2 == 1 {
		return pipeline.Result{Output: json.RawMessage(`{"skipped":true}`)}, true
	}
	return pipeline.Result{}, false
}

// TestRunner_SkipperTakesNoSlot: a skipped item commits its output
// without a call and without telling the limiter anything.
func TestRunner_SkipperTakesNoSlot(t *testing.T) {
	st := newMemStore([]string{"api"}, 20)
	lim := &fakeLimiter{}
	api := &skipOdd{funcStage{name: "api", fn: ok}}
	r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Workers: 4, Limiter: lim}}}
	sum, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.tally()["done"] != 20 {
		t.Fatalf("where = %v", st.tally())
	}
	if s, _, _ := lim.counts(); s != 10 {
		t.Errorf("limiter saw %d successes, want 10 (the skips are none of its business)", s)
	}
	if got := len(api.calls); got != 10 {
		t.Errorf("Process called for %d items, want 10", got)
	}
	if s := sum.Stages["api"]; s.Calls != 10 || s.Done != 20 {
		t.Errorf("stats = %+v, want 10 calls and 20 done", s)
	}
}
