package stages

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

const bugSchema = `{
  "type": "object",
  "properties": {
    "component": {"type": "string"},
    "severity": {"type": "string", "enum": ["low", "medium", "high"]},
    "steps": {"type": "array", "items": {"type": "string"}}
  },
  "required": ["component", "severity"]
}`

// simServer runs the simulator behind a recorder of request paths.
func simServer(t *testing.T, cfg geminisim.Config) (*geminisim.Server, string, func() []string) {
	t.Helper()
	sim := geminisim.New(cfg)
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); sim.Close() })
	return sim, srv.URL, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), paths...) }
}

func newTestLLM(t *testing.T, cfg LLMConfig) *LLM {
	t.Helper()
	l, err := NewLLM(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLLM_ThreeStages runs classify -> extract (only bugs) -> summary
// (reading both earlier outputs in its template) item by item, as the
// runner would, against the simulator.
func TestLLM_ThreeStages(t *testing.T) {
	sim, url, _ := simServer(t, geminisim.Config{})
	ep := Endpoint{Backend: BackendGemini, APIKey: geminisim.DefaultAPIKey, BaseURL: url}
	classify := newTestLLM(t, LLMConfig{Name: "classify", Endpoint: ep, Labels: []string{"bug", "praise", "other"}})
	extract := newTestLLM(t, LLMConfig{Name: "extract", Endpoint: ep, Model: "gemini-2.5-pro", Schema: []byte(bugSchema),
		PromptTemplate: "Labelled {{.Out.classify.label}}: {{.Text}}", When: `classify.label == "bug"`, Earlier: []string{"classify"}})
	extractFields, err := OutputFields(nil, []byte(bugSchema))
	if err != nil {
		t.Fatal(err)
	}
	classifyFields, _ := OutputFields([]string{"bug"}, nil)
	summary := newTestLLM(t, LLMConfig{Name: "summary", Endpoint: ep, Labels: []string{"short", "long"},
		PromptTemplate: "{{.Text}} / severity {{.Out.extract.severity}}", Earlier: []string{"classify", "extract"},
		EarlierOutputs: map[string][]string{"classify": classifyFields, "extract": extractFields}})

	items := map[string]string{
		"r1": "The app crashes on launch, a bug since the update.",
		"r2": "I love this app, wonderful design!",
	}
	for id, text := range items {
		it := pipeline.Item{Record: pipeline.Record{ID: id, Text: text}, Outputs: map[string]json.RawMessage{}}
		for _, st := range []*LLM{classify, extract, summary} {
			if res, skip := st.Skip(context.Background(), it); skip {
				it.Outputs[st.Name()] = res.Output
				continue
			}
			res, err := st.Process(context.Background(), it)
			if err != nil {
				t.Fatalf("%s on %s: %v", st.Name(), id, err)
			}
			if st.schema != nil || st.labels != nil {
				if res.Usage.TotalTokens == 0 {
					t.Errorf("%s on %s: no usage", st.Name(), id)
				}
			}
			it.Outputs[st.Name()] = res.Output
		}
		var cls struct{ Label string }
		json.Unmarshal(it.Outputs["classify"], &cls)
		var ex map[string]any
		json.Unmarshal(it.Outputs["extract"], &ex)
		switch id {
		case "r1":
			if cls.Label != "bug" {
				t.Fatalf("r1 classified %q, want bug", cls.Label)
			}
			if ex["component"] == nil || ex["severity"] == nil || ex["skipped"] != nil {
				t.Errorf("r1 extract = %v, want the schema's fields", ex)
			}
		case "r2":
			if ex["skipped"] != true || ex["when"] != `classify.label == "bug"` {
				t.Errorf("r2 extract = %v, want skipped", ex)
			}
		}
	}
	// Two classify calls, one extract call (r2 skipped), two summaries.
	if got := sim.Stats().Calls; got != 5 {
		t.Errorf("simulator calls = %d, want 5", got)
	}
}

func TestLLM_Vertex(t *testing.T) {
	_, url, paths := simServer(t, geminisim.Config{})
	l := newTestLLM(t, LLMConfig{Name: "classify", Labels: []string{"bug", "other"},
		Endpoint: Endpoint{Backend: BackendVertex, BaseURL: url, Project: "acme", Location: "europe-west4"}})
	res, err := l.Process(context.Background(), pipeline.Item{Record: pipeline.Record{ID: "1", Text: "crash bug"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(res.Output), `"label":"bug"`) {
		t.Errorf("output = %s", res.Output)
	}
	want := "/v1beta1/projects/acme/locations/europe-west4/publishers/google/models/gemini-2.5-flash:generateContent"
	if got := paths(); len(got) != 1 || got[0] != want {
		t.Errorf("paths = %v, want [%s]", got, want)
	}
}

// TestLLM_VertexBare429 checks that a Vertex 429 (no quotaId, no
// RetryInfo) is rate-limited with no delay and not daily: the limiter
// works from the bare signal.
func TestLLM_VertexBare429(t *testing.T) {
	_, url, _ := simServer(t, geminisim.Config{RPM: 1, Window: time.Hour})
	l := newTestLLM(t, LLMConfig{Name: "extract", Schema: []byte(bugSchema),
		Endpoint: Endpoint{Backend: BackendVertex, BaseURL: url, Project: "p", Location: "us-central1"}})
	it := pipeline.Item{Record: pipeline.Record{ID: "1", Text: "a bug"}}
	if _, err := l.Process(context.Background(), it); err != nil {
		t.Fatal(err)
	}
	_, err := l.Process(context.Background(), it)
	var rl *pipeline.RateLimitedError
	if !errors.As(err, &rl) {
		t.Fatalf("err = %v, want rate limited", err)
	}
	if rl.RetryAfter != 0 || rl.Daily {
		t.Errorf("RetryAfter = %s, Daily = %v: a Vertex 429 carries neither", rl.RetryAfter, rl.Daily)
	}
	if !strings.HasPrefix(err.Error(), `item "1": extract: rate limited (429 RESOURCE_EXHAUSTED)`) {
		t.Errorf("message = %q", err)
	}
}

func TestNewLLM_Refuses(t *testing.T) {
	ep := Endpoint{Backend: BackendGemini, APIKey: "k", BaseURL: "http://127.0.0.1:1"}
	tests := []struct {
		name string
		cfg  LLMConfig
		want string
	}{
		{"no output", LLMConfig{Name: "x", Endpoint: ep}, "no output"},
		{"bad schema", LLMConfig{Name: "x", Endpoint: ep, Schema: []byte(`{"type":"object","oneOf":[]}`)}, `cannot express "oneOf"`},
		{"bad when", LLMConfig{Name: "x", Endpoint: ep, Labels: []string{"a"}, When: "nope.x == 1"}, "unknown name nope"},
		{"no key", LLMConfig{Name: "x", Labels: []string{"a"}, Endpoint: Endpoint{Backend: BackendGemini}}, "GEMINI_API_KEY"},
		{"vertex without project", LLMConfig{Name: "x", Labels: []string{"a"}, Endpoint: Endpoint{Backend: BackendVertex, BaseURL: "http://x"}}, "project and a location"},
		{"duplicate label", LLMConfig{Name: "x", Endpoint: ep, Labels: []string{"a", "A"}}, `llm stage "x": label "A" appears twice: labels must be distinct`},
		{"spaced label", LLMConfig{Name: "x", Endpoint: ep, Labels: []string{" a"}}, `llm stage "x": label " a" is blank or has surrounding spaces`},
		{"negative timeout", LLMConfig{Name: "x", Endpoint: ep, Labels: []string{"a"}, Timeout: -1}, "timeout is -1ns: use a positive duration, or 0 for 1m0s"},
		{"negative budget", LLMConfig{Name: "x", Endpoint: ep, Schema: []byte(`{"type":"object"}`), MaxOutputTokens: -1}, "max output tokens is -1: use a positive number, or 0 for 1024"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("GOOGLE_CLOUD_PROJECT", "")
			t.Setenv("GOOGLE_CLOUD_LOCATION", "")
			t.Setenv("GOOGLE_CLOUD_REGION", "")
			_, err := NewLLM(context.Background(), tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestParseResponseSchema(t *testing.T) {
	tests := []struct {
		name, doc, want string // want "" = accepted
	}{
		{"bug schema", bugSchema, ""},
		{"nullable type list", `{"type":"object","properties":{"x":{"type":["string","null"]}}}`, ""},
		{"anyOf", `{"type":"object","properties":{"x":{"anyOf":[{"type":"string"},{"type":"integer"}]}}}`, ""},
		{"ref", `{"type":"object","properties":{"x":{"$ref":"#/$defs/x"}}}`, `#/properties/x/$ref: Gemini's responseSchema cannot express "$ref"`},
		{"oneOf", `{"type":"object","oneOf":[{"type":"object"}]}`, `cannot express "oneOf"`},
		{"additionalProperties", `{"type":"object","additionalProperties":false}`, `cannot express "additionalProperties"`},
		{"const", `{"type":"object","properties":{"x":{"type":"string","const":"a"}}}`, `cannot express "const"`},
		{"union type", `{"type":"object","properties":{"x":{"type":["string","integer"]}}}`, "one type"},
		{"numeric enum", `{"type":"object","properties":{"x":{"type":"integer","enum":[1,2]}}}`, "only string values"},
		{"top level array", `{"type":"array","items":{"type":"string"}}`, "top level must be"},
		{"array without items", `{"type":"object","properties":{"x":{"type":"array"}}}`, `needs "items"`},
		{"required unknown", `{"type":"object","properties":{},"required":["y"]}`, "not one of the properties"},
		{"no type", `{"properties":{}}`, `no "type"`},
		{"not json", `{`, "not a JSON document"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseResponseSchema([]byte(tt.doc))
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestWhen(t *testing.T) {
	it := pipeline.Item{
		Record:  pipeline.Record{ID: "7", Text: "t", Fields: map[string]string{"app": "maps", "stars": "2"}},
		Outputs: map[string]json.RawMessage{"classify": json.RawMessage(`{"label":"bug","confidence":0.9}`), "extract": json.RawMessage(`{"skipped":true}`)},
	}
	tests := []struct {
		src  string
		want bool
		err  string
	}{
		{`classify.label == "bug"`, true, ""},
		{`classify.label in ["bug", "ux"] && classify.confidence > 0.5`, true, ""},
		{`fields.app == "maps" and int(fields.stars) <= 2`, true, ""},
		{`extract.severity == "high"`, false, ""},
		{`extract.skipped`, true, ""},
		{`classify.confidence`, false, "failed on item"},
		{`fields.rating <= 2 && fields.ok && fields.score > 4`, true, ""},
		{`fields.rating == 2`, true, ""},
		// A field stored as text (a quoted number, a database from
		// before types were kept) stays text.
		{`fields.stars <= 2`, false, "string <= int (at column 14)"},
	}
	it.Fields["rating"], it.Fields["ok"], it.Fields["score"] = "2", "true", "4.5"
	it.Types = map[string]pipeline.FieldType{"rating": pipeline.FieldNumber, "ok": pipeline.FieldBool, "score": pipeline.FieldNumber}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			w, err := CompileWhen(tt.src, []string{"classify", "extract"})
			if err != nil {
				t.Fatal(err)
			}
			got, err := w.Match(it)
			if tt.err != "" {
				// Stored as the dead letter: facts only, the CLI words
				// the command.
				if err == nil || !strings.Contains(err.Error(), tt.err) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "sawtooth") ||
					pipeline.ClassOf(context.Background(), err) != pipeline.ClassPermanent {
					t.Errorf("err = %v, want permanent %q and no command", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Match = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
	if _, err := CompileWhen(`text == "x"`, []string{"text"}); err == nil {
		t.Error("a stage named text was accepted")
	}
	if _, err := CompileWhen(`fields.rating <=`, nil); err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "at column") {
		t.Errorf("CompileWhen of a cut-off condition: %v, want one line saying where", err)
	}
}

// TestLLM_VertexFromEnvironment: no backend named, the Vertex AI
// variables choose it, its project and its location.
func TestLLM_VertexFromEnvironment(t *testing.T) {
	t.Setenv("GOOGLE_GENAI_USE_VERTEXAI", "true")
	t.Setenv("GOOGLE_CLOUD_PROJECT", "envproj")
	t.Setenv("GOOGLE_CLOUD_LOCATION", "asia-northeast1")
	_, url, paths := simServer(t, geminisim.Config{})
	l := newTestLLM(t, LLMConfig{Name: "classify", Labels: []string{"bug", "other"}, Endpoint: Endpoint{BaseURL: url}})
	if _, err := l.Process(context.Background(), pipeline.Item{Record: pipeline.Record{ID: "1", Text: "a bug"}}); err != nil {
		t.Fatal(err)
	}
	want := "/v1beta1/projects/envproj/locations/asia-northeast1/publishers/google/models/gemini-2.5-flash:generateContent"
	if got := paths(); len(got) != 1 || got[0] != want {
		t.Errorf("paths = %v, want [%s]", got, want)
	}
}

func TestLLM_CountTokens(t *testing.T) {
	sim, url, paths := simServer(t, geminisim.Config{})
	l := newTestLLM(t, LLMConfig{Name: "classify", Labels: []string{"bug", "other"}, PromptTemplate: "Review: {{.Text}}",
		Endpoint: Endpoint{Backend: BackendGemini, APIKey: geminisim.DefaultAPIKey, BaseURL: url}})
	n, err := l.CountTokens(context.Background(), pipeline.Item{Record: pipeline.Record{ID: "1", Text: strings.Repeat("word ", 40)}})
	if err != nil {
		t.Fatal(err)
	}
	if n < 50 || n > 200 {
		t.Errorf("tokens = %d, want about (system + 200 characters) / 4", n)
	}
	if got := paths(); len(got) != 1 || !strings.HasSuffix(got[0], ":countTokens") || sim.Stats().Calls != 0 {
		t.Errorf("paths %v, generateContent calls %d: want one countTokens call and nothing billed", got, sim.Stats().Calls)
	}
}

// TestLLM_CutOffTwiceIsPermanent: an answer cut off at the budget is
// asked once more with twice the budget; cut off again, the item is
// dead-lettered (permanent, naming the stage) after exactly two calls,
// both billed.
func TestLLM_CutOffTwiceIsPermanent(t *testing.T) {
	sim, url, _ := simServer(t, geminisim.Config{Faults: geminisim.Faults{MaxTokens: 1}})
	l := newTestLLM(t, LLMConfig{Name: "extract", Schema: []byte(bugSchema), MaxOutputTokens: 8,
		Endpoint: Endpoint{Backend: BackendGemini, APIKey: geminisim.DefaultAPIKey, BaseURL: url}})
	res, err := l.Process(context.Background(), pipeline.Item{Record: pipeline.Record{ID: "1", Text: "it crashes, a bug"}})
	if pipeline.ClassOf(context.Background(), err) != pipeline.ClassPermanent ||
		!strings.Contains(err.Error(), "extract: the answer was unusable (cut off at 8 output tokens), and again when asked once more (cut off at 16 output tokens)") {
		t.Errorf("err = %v, want permanent after a cut-off at 8 then 16 tokens", err)
	}
	if calls := sim.Stats().Calls; calls != 2 {
		t.Errorf("calls = %d, want 2", calls)
	}
	if res.Usage.TotalTokens == 0 {
		t.Error("the two calls' usage is missing")
	}
}

// TestLLM_FingerprintMatchesClassify: a label stage with no condition is
// the question Classify asks, so it has Classify's fingerprint; a schema
// or a condition makes it another.
func TestLLM_FingerprintMatchesClassify(t *testing.T) {
	ep := Endpoint{Backend: BackendGemini, APIKey: "k", BaseURL: "http://127.0.0.1:1"}
	labels := []string{"bug", "praise", "other"}
	c, err := NewClassify(context.Background(), ClassifyConfig{APIKey: "k", BaseURL: ep.BaseURL, Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	same := newTestLLM(t, LLMConfig{Name: "classify", Endpoint: ep, Labels: labels})
	if same.Fingerprint() != c.Fingerprint() {
		t.Errorf("label stage %s, Classify %s: want equal", same.Fingerprint(), c.Fingerprint())
	}
	for name, cfg := range map[string]LLMConfig{
		"condition": {Name: "classify", Endpoint: ep, Labels: labels, When: `id != ""`},
		"prompt":    {Name: "classify", Endpoint: ep, Labels: labels, PromptTemplate: "Review: {{.Text}}"},
		"model":     {Name: "classify", Endpoint: ep, Labels: labels, Model: "gemini-2.5-pro"},
	} {
		if fp := newTestLLM(t, cfg).Fingerprint(); fp == c.Fingerprint() {
			t.Errorf("%s changed, fingerprint did not", name)
		}
	}
}

// TestLLM_Estimator: the budget's reservation counts the system
// instruction and the rendered prompt (earlier outputs included), not
// the item's text alone, and reserves the stage's own output budget.
func TestLLM_Estimator(t *testing.T) {
	ep := Endpoint{Backend: BackendGemini, APIKey: geminisim.DefaultAPIKey, BaseURL: "http://127.0.0.1:1"}
	l := newTestLLM(t, LLMConfig{Name: "extract", Endpoint: ep, Labels: []string{"bug", "other"},
		SystemInstruction: "12345678", PromptTemplate: "{{.Out.classify.label}}: {{.Text}}", MaxOutputTokens: 3000})
	it := testItem("a", "abcdéfgh")
	it.Outputs = map[string]json.RawMessage{"classify": json.RawMessage(`{"label":"bug"}`)}
	// 8 runes of instruction + "bug: abcdéfgh" (13 runes) = 21 -> 6 tokens.
	if got := l.EstimateInput(it); got != 6 {
		t.Errorf("EstimateInput = %d, want 6 (21 runes / 4, rounded up)", got)
	}
	if got := l.MaxOutputTokens(); got != 3000 {
		t.Errorf("MaxOutputTokens = %d, want the stage's 3000", got)
	}
}
