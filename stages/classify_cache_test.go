package stages

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sync"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

func TestClassify_CacheKey(t *testing.T) {
	base := newTestClassify(t, "http://127.0.0.1:1")
	key := func(t *testing.T, c *Classify, it pipeline.Item) string {
		t.Helper()
		k, err := c.CacheKey(it)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	same := key(t, base, testItem("a", "Great app!"))
	tests := []struct {
		name     string
		c        *Classify
		it       pipeline.Item
		wantSame bool
	}{
		{"another id, same text", base, testItem("b", "Great app!"), true},
		{"another text", base, testItem("a", "Great app"), false},
		{"another model", newTestClassify(t, "http://127.0.0.1:1", func(c *ClassifyConfig) { c.Model = "gemini-2.5-flash-lite" }), testItem("a", "Great app!"), false},
		{"another prompt", newTestClassify(t, "http://127.0.0.1:1", func(c *ClassifyConfig) { c.PromptTemplate = "Review: {{.Text}}" }), testItem("a", "Great app!"), false},
		{"another system instruction", newTestClassify(t, "http://127.0.0.1:1", func(c *ClassifyConfig) { c.SystemInstruction = "Be terse." }), testItem("a", "Great app!"), false},
		{"another label set", newTestClassify(t, "http://127.0.0.1:1", func(c *ClassifyConfig) { c.Labels = []string{"bug", "other"} }), testItem("a", "Great app!"), false},
		{"another output budget", newTestClassify(t, "http://127.0.0.1:1", func(c *ClassifyConfig) { c.MaxOutputTokens = 100 }), testItem("a", "Great app!"), false},
		{"another endpoint and timeout", newTestClassify(t, "http://127.0.0.1:2", func(c *ClassifyConfig) { c.Timeout = 1 }), testItem("a", "Great app!"), true},
		{"a template that uses the id", newTestClassify(t, "http://127.0.0.1:1", func(c *ClassifyConfig) { c.PromptTemplate = "{{.ID}}: {{.Text}}" }), testItem("b", "Great app!"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := key(t, tc.c, tc.it) == same; got != tc.wantSame {
				t.Errorf("same key = %v, want %v", got, tc.wantSame)
			}
		})
	}
	if _, err := base.CacheKey(testItem("e", "  ")); err == nil {
		t.Error("an empty text has a key; want none (Process refuses it)")
	}
}

func TestClassify_EstimateInput(t *testing.T) {
	c := newTestClassify(t, "http://127.0.0.1:1", func(c *ClassifyConfig) { c.SystemInstruction = "12345678" })
	if got := c.EstimateInput(testItem("a", "abcdéfgh")); got != 4 {
		t.Errorf("EstimateInput = %d, want 4 (16 runes / 4)", got)
	}
}

// memQueue is the smallest pipeline.Store: one stage's queue in memory,
// and the answers committed by key.
type memQueue struct {
	mu      sync.Mutex
	queued  []pipeline.Queued
	outs    map[string]string
	answers map[string]pipeline.Result
}

func (m *memQueue) Queued(_ string, after uint64, max int) ([]pipeline.Queued, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []pipeline.Queued
	for _, q := range m.queued {
		if q.Seq > after && len(out) < max {
			out = append(out, q)
		}
	}
	return out, nil
}

func (m *memQueue) Commit(ts []pipeline.Transition) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range ts {
		for i, q := range m.queued {
			if q.Seq == t.Seq {
				m.queued = append(m.queued[:i], m.queued[i+1:]...)
				if t.Outcome == pipeline.Succeeded {
					m.outs[t.ID] = string(t.Result.Output)
					if t.CacheKey != "" && !t.Cached {
						m.answers[t.CacheKey] = t.Result
					}
				}
				break
			}
		}
	}
	return nil
}

func (m *memQueue) CachedAnswer(_, key string) (pipeline.Result, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	res, ok := m.answers[key]
	return res, ok, nil
}

// TestClassify_SingleflightOverHTTP: 200 identical reviews at 64 in
// flight make one request to the API; every item gets its answer.
func TestClassify_SingleflightOverHTTP(t *testing.T) {
	const items, workers = 200, 64
	release := make(chan struct{})
	var once sync.Once
	fake := newFakeGemini(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		<-release
		reply(http.StatusOK, answer(`{"label":"praise","confidence":0.9,"reason":"says great"}`, "STOP"))(w, r, body)
	})
	c := newTestClassify(t, fake.srv.URL)
	st := &memQueue{outs: map[string]string{}, answers: map[string]pipeline.Result{}}
	for i := range items {
		st.queued = append(st.queued, pipeline.Queued{Seq: uint64(i + 1), Item: testItem(fmt.Sprintf("r%03d", i), "Great app!")})
	}
	// The first request is held until every worker holds an identical
	// item: the others wait for it rather than find the answer stored.
	keyed := &countingKeys{Classify: c, at: workers, reached: func() { once.Do(func() { close(release) }) }}
	r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: keyed, Workers: workers}}}
	sum, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s := sum.Stages["classify"]
	if n := fake.requests.Load(); n != 1 || s.Done != items || s.Cached != items-1 {
		t.Fatalf("%d requests, done %d, cached %d; want 1 request, %d done, %d cached", n, s.Done, s.Cached, items, items-1)
	}
	first := st.outs["r000"]
	for id, out := range st.outs {
		if out != first {
			t.Fatalf("%s: output %s, its twin r000's %s", id, out, first)
		}
	}
}

// countingKeys is a Classify that calls reached once at keys have been
// asked for.
type countingKeys struct {
	*Classify
	mu      sync.Mutex
	n, at   int
	reached func()
}

func (k *countingKeys) CacheKey(it pipeline.Item) (string, error) {
	k.mu.Lock()
	k.n++
	if k.n >= k.at {
		k.reached()
	}
	k.mu.Unlock()
	return k.Classify.CacheKey(it)
}

// tiered is a list price with the tier factors and a cached input price.
func tiered(in, out, cached float64) pipeline.Price {
	return pipeline.Price{InputPerM: in, OutputPerM: out, CachedInputPerM: cached, FlexFactor: FlexPriceFactor, PriorityFactor: PriorityPriceFactor}
}

// samePrice compares prices up to float rounding (0.30 x 0.1 is not 0.03).
func samePrice(a, b pipeline.Price) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-12 }
	return near(a.InputPerM, b.InputPerM) && near(a.OutputPerM, b.OutputPerM) && near(a.CachedInputPerM, b.CachedInputPerM) &&
		a.FlexFactor == b.FlexFactor && a.PriorityFactor == b.PriorityFactor
}

func TestStagePrice(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		name      string
		cfg       PriceConfig
		needPrice bool
		want      pipeline.Price
		wantErr   bool
	}{
		{"list price", PriceConfig{Model: "gemini-2.5-flash"}, true, tiered(0.30, 2.50, 0.03), false},
		{"lite is not flash", PriceConfig{Model: "models/gemini-2.5-flash-lite"}, true, tiered(0.10, 0.40, 0.01), false},
		{"2.0 caches at a quarter", PriceConfig{Model: "gemini-2.0-flash"}, true, tiered(0.10, 0.40, 0.025), false},
		{"batch at half", PriceConfig{Model: "gemini-2.5-flash", Batch: true}, true, tiered(0.15, 1.25, 0.015), false},
		{"override one side", PriceConfig{Model: "gemini-2.5-flash", OutputPerM: f(3)}, true, tiered(0.30, 3, 0.03), false},
		{"an overridden input keeps the cached share", PriceConfig{Model: "gemini-2.5-flash", InputPerM: f(1)}, true, tiered(1, 2.50, 0.1), false},
		{"override to free", PriceConfig{Model: "gemini-2.5-flash", InputPerM: f(0), OutputPerM: f(0)}, false, tiered(0, 0, 0), false},
		{"override batch", PriceConfig{Model: "my-tuned-model", InputPerM: f(1), OutputPerM: f(4), Batch: true}, true, tiered(0.5, 2, 0.5), false},
		{"unknown model, no budget", PriceConfig{Model: "my-tuned-model"}, false, tiered(0, 0, 0), false},
		{"unknown model under a budget", PriceConfig{Model: "my-tuned-model"}, true, pipeline.Price{}, true},
		{"negative", PriceConfig{Model: "gemini-2.5-flash", InputPerM: f(-1)}, false, pipeline.Price{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := StagePrice(tc.cfg, tc.needPrice)
			if (err != nil) != tc.wantErr || !samePrice(got, tc.want) {
				t.Errorf("StagePrice = %+v, %v; want %+v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
