package stages

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/classify_golden.json from what the stage does now")

// classifyGolden is what one classify case did on the wire and in the
// store: every request body and item header sent, the answer-cache key,
// the stored output (or the error), and the batch request.
type classifyGolden struct {
	Bodies       []json.RawMessage `json:"bodies"`
	ItemHeaders  []string          `json:"item_headers"`
	CacheKey     string            `json:"cache_key"`
	Output       json.RawMessage   `json:"output,omitempty"`
	Usage        pipeline.Usage    `json:"usage"`
	Calls        int               `json:"calls"`
	Err          string            `json:"err,omitempty"`
	Class        string            `json:"class"`
	BatchRequest json.RawMessage   `json:"batch_request,omitempty"`
	BatchOutput  json.RawMessage   `json:"batch_output,omitempty"`
}

// TestClassify_Golden holds classify to what it sent, keyed and stored
// before it became a preset of the LLM stage (testdata/classify_golden.json
// was written by the separate Classify implementation): a database
// written then must resume without paying again, so the request (prompt,
// schema, generation config), the answer-cache key and the stored output
// must not change by a byte.
func TestClassify_Golden(t *testing.T) {
	good := answer(`{"label":"bug","confidence":0.93,"reason":" It crashes at login. "}`, "STOP")
	cases := []struct {
		name    string
		mods    []func(*ClassifyConfig)
		item    pipeline.Item
		replies []func(http.ResponseWriter, *http.Request, []byte)
		batch   string // the batch job's answer; "" means good
	}{
		{name: "defaults", item: testItem("r1", "The app crashes when I log in"), replies: fns(reply(200, good))},
		{
			name: "custom",
			mods: []func(*ClassifyConfig){func(c *ClassifyConfig) {
				c.Labels = []string{"billing", "crash", "other"}
				c.PromptTemplate = "App {{.Fields.app}} ({{.ID}}, {{len .Labels}} labels): {{.Text}} [{{.Fields.missing}}]"
				c.SystemInstruction = "Pick one label."
				c.Model = "gemini-2.0-flash"
				c.ThinkingBudget = genai.Ptr(-1)
				c.MaxOutputTokens = 100
			}},
			item:    pipeline.Item{Record: pipeline.Record{ID: "r/2 é", Text: "Charged twice", Fields: map[string]string{"app": "cart"}}},
			replies: fns(reply(200, answer(`{"label":" Crash ","confidence":1,"reason":"x"}`, "STOP"))),
			batch:   answer(`{"label":"billing","confidence":0.5,"reason":"Charged twice."}`, "STOP"),
		},
		{
			name:    "cut_off_repaired",
			item:    testItem("r3", "Long review"),
			replies: fns(reply(200, answer(`{"label":"bug","confi`, "MAX_TOKENS")), reply(200, good)),
		},
		{
			name:    "off_schema_twice",
			item:    testItem("r4", "No idea"),
			replies: fns(reply(200, answer(`{"label":"bug","reason":"r"}`, "STOP"))),
		},
		{
			name:    "off_label_then_cut_off",
			item:    testItem("r5", "Hmm"),
			replies: fns(reply(200, answer(`{"label":"nope","confidence":0.5,"reason":"r"}`, "STOP")), reply(200, answer(`{"la`, "MAX_TOKENS"))),
		},
		{
			name: "blocked",
			item: testItem("r6", "bad words"),
			replies: fns(reply(200, `{"promptFeedback":{"blockReason":"SAFETY","blockReasonMessage":"unsafe"},`+
				`"usageMetadata":{"promptTokenCount":7,"totalTokenCount":7}}`)),
		},
		{name: "model_not_found", item: testItem("r7", "x"), replies: fns(reply(404, body404))},
		{name: "rate_limited", item: testItem("r8", "x"), replies: fns(reply(429, body429Minute))},
	}
	runGolden(t, "classify_golden.json", len(cases), func(t *testing.T, i int, record func(string, classifyGolden)) {
		tc := cases[i]
		t.Run(tc.name, func(t *testing.T) {
			g, srv := goldenServer(t, tc.replies)
			c := newTestClassify(t, srv.srv.URL, tc.mods...)
			key, err := c.CacheKey(tc.item)
			if err != nil {
				t.Fatal(err)
			}
			res, err := c.Process(context.Background(), tc.item)
			g.record(key, res, err, srv.srv.URL)
			br, err := c.BatchRequest(tc.item)
			if err != nil {
				t.Fatal(err)
			}
			if g.BatchRequest, err = json.Marshal(br); err != nil {
				t.Fatal(err)
			}
			var resp genai.GenerateContentResponse
			if err := json.Unmarshal([]byte(cmp.Or(tc.batch, good)), &resp); err != nil {
				t.Fatal(err)
			}
			bres, err := c.DecodeBatch(tc.item, &resp, nil)
			if err != nil {
				t.Fatal(err)
			}
			g.BatchOutput = bres.Output
			record(tc.name, g.classifyGolden)
		})
	})
}

// goldenCall records what a fake Gemini server was sent.
type goldenCall struct {
	mu sync.Mutex
	classifyGolden
}

// goldenServer answers the n-th request with replies[n] (the last once
// they run out) and records every body and item header.
func goldenServer(t *testing.T, replies []func(http.ResponseWriter, *http.Request, []byte)) (*goldenCall, *fakeGemini) {
	t.Helper()
	g := &goldenCall{}
	srv := newFakeGemini(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		g.mu.Lock()
		n := len(g.Bodies)
		g.Bodies = append(g.Bodies, json.RawMessage(body))
		g.ItemHeaders = append(g.ItemHeaders, r.Header.Get(itemHeader))
		g.mu.Unlock()
		replies[min(n, len(replies)-1)](w, r, body)
	})
	return g, srv
}

// record keeps what Process returned; the server's URL, which changes
// from run to run, reads BASE_URL in messages.
func (g *goldenCall) record(key string, res pipeline.Result, err error, baseURL string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.CacheKey, g.Output, g.Usage, g.Calls = key, json.RawMessage(res.Output), res.Usage, res.Calls
	g.Class = string(pipeline.ClassOf(context.Background(), err))
	if err != nil {
		g.Err = strings.ReplaceAll(err.Error(), baseURL, "BASE_URL")
	}
}

// runGolden runs n cases (each calls record once with what it saw) and
// compares each with testdata/file, or rewrites the file under
// -update-golden.
func runGolden(t *testing.T, file string, n int, run func(t *testing.T, i int, record func(name string, g classifyGolden))) {
	t.Helper()
	path := filepath.Join("testdata", file)
	want := map[string]classifyGolden{}
	if !*updateGolden {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]classifyGolden{}
	for i := range n {
		run(t, i, func(name string, g classifyGolden) {
			got[name] = g
			if *updateGolden {
				return
			}
			a, _ := json.MarshalIndent(g, "", "  ")
			b, _ := json.MarshalIndent(want[name], "", "  ")
			if string(a) != string(b) {
				t.Errorf("%s: the stage no longer does what it did:\n got %s\nwant %s", name, a, b)
			}
		})
	}
	if *updateGolden {
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLLM_Golden holds job-file LLM stages to what they sent, keyed and
// stored before classify became a preset of them (testdata/llm_golden.json):
// a label stage and a schema stage, answered, repaired and refused.
func TestLLM_Golden(t *testing.T) {
	labelled := answer(`{"label":"Bug","confidence":0.75,"reason":" crash "}`, "STOP")
	summary := answer(`{"summary":"Crashes at login.","severity":3}`, "STOP")
	schema := []byte(`{"type":"object","properties":{"summary":{"type":"string"},"severity":{"type":"integer","minimum":1,"maximum":5}},"required":["summary","severity"]}`)
	earlier := map[string]json.RawMessage{"triage": json.RawMessage(`{"label":"bug","confidence":0.9}`)}
	item := pipeline.Item{Record: pipeline.Record{ID: "i/1", Text: "The app crashes", Fields: map[string]string{"app": "notes"}}, Outputs: earlier}
	cases := []struct {
		name    string
		cfg     LLMConfig
		item    pipeline.Item
		replies []func(http.ResponseWriter, *http.Request, []byte)
	}{
		{name: "labels", cfg: LLMConfig{Name: "triage", Labels: []string{"bug", "other"}},
			item: testItem("r1", "It crashes"), replies: fns(reply(200, labelled))},
		{name: "schema", cfg: LLMConfig{Name: "summary", Schema: schema, Model: "gemini-2.0-flash",
			PromptTemplate: "{{.Fields.app}} ({{.Out.triage.label}}): {{.Text}}", When: `triage.label == "bug"`, Earlier: []string{"triage"}},
			item: item, replies: fns(reply(200, summary))},
		{name: "schema_repaired", cfg: LLMConfig{Name: "summary", Schema: schema},
			item: item, replies: fns(reply(200, answer(`{"summary":"x","severity":9}`, "STOP")), reply(200, summary))},
		{name: "schema_cut_off_twice", cfg: LLMConfig{Name: "summary", Schema: schema, MaxOutputTokens: 8},
			item: item, replies: fns(reply(200, answer(`{"sum`, "MAX_TOKENS")))},
		{name: "labels_not_found", cfg: LLMConfig{Name: "triage", Labels: []string{"bug", "other"}},
			item: item, replies: fns(reply(404, body404))},
		{name: "labels_overloaded", cfg: LLMConfig{Name: "triage", Labels: []string{"bug", "other"}},
			item: item, replies: fns(reply(503, body503))},
		{name: "labels_blocked", cfg: LLMConfig{Name: "triage", Labels: []string{"bug", "other"}},
			item: item, replies: fns(reply(200, `{"promptFeedback":{"blockReason":"SAFETY"}}`))},
	}
	runGolden(t, "llm_golden.json", len(cases), func(t *testing.T, i int, record func(string, classifyGolden)) {
		tc := cases[i]
		t.Run(tc.name, func(t *testing.T) {
			g, srv := goldenServer(t, tc.replies)
			tc.cfg.Endpoint = Endpoint{Backend: BackendGemini, APIKey: testKey, BaseURL: srv.srv.URL}
			l := newTestLLM(t, tc.cfg)
			key, err := l.CacheKey(tc.item)
			if err != nil {
				t.Fatal(err)
			}
			res, err := l.Process(context.Background(), tc.item)
			g.record(key, res, err, srv.srv.URL)
			record(tc.name, g.classifyGolden)
		})
	})
}

// TestClassify_IsAnLLMStage: the classify preset is the LLM stage, built
// from the labels, not a second implementation: a label stage a job file
// describes with the same question has its fingerprint and request, and
// differs only in what the preset keeps (its cache key recipe and header).
func TestClassify_IsAnLLMStage(t *testing.T) {
	c := newTestClassify(t, "http://127.0.0.1:1")
	var l *LLM = c.LLM
	if l.Name() != "classify" || !slices.Equal(l.Labels(), DefaultLabels) || l.MaxOutputTokens() != DefaultMaxOutputTokens {
		t.Errorf("preset = %s %v %d", l.Name(), l.Labels(), l.MaxOutputTokens())
	}
	job := newTestLLM(t, LLMConfig{Name: "classify", Labels: DefaultLabels, Timeout: 5 * time.Second,
		Endpoint: Endpoint{Backend: BackendGemini, APIKey: testKey, BaseURL: "http://127.0.0.1:1"}})
	if c.Fingerprint() != job.Fingerprint() {
		t.Errorf("fingerprint %s, job-file label stage %s", c.Fingerprint(), job.Fingerprint())
	}
	it := testItem("r1", "It crashes")
	a, _ := json.Marshal(c.requestConfig(c.firstRequest()))
	b, _ := json.Marshal(job.requestConfig(job.firstRequest()))
	if string(a) != string(b) {
		t.Errorf("request config\n%s\njob-file label stage\n%s", a, b)
	}
	ck, _ := c.CacheKey(it)
	jk, _ := job.CacheKey(it)
	if ck == jk {
		t.Error("the preset keys as a job-file stage: answers cached by databases written before it was a preset would be asked again")
	}
}
