package stages

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// recipeKey is the cache key as every database so far was written with
// it: the request types marshalled whole for each item. CacheKey builds
// it another way and must give the same bytes, or a database would pay
// again for every answer it has cached.
func recipeKey(t *testing.T, l *LLM, it pipeline.Item) string {
	t.Helper()
	prompt, err := l.render(it)
	if err != nil {
		t.Fatal(err)
	}
	cfg := l.requestConfig(l.firstRequest())
	stage, prefix := l.preset.cacheScope(l.name)
	req := struct {
		Stage             string                `json:"stage,omitempty"`
		Model             string                `json:"model"`
		Fingerprint       string                `json:"fingerprint"`
		Contents          []*genai.Content      `json:"contents"`
		SystemInstruction *genai.Content        `json:"systemInstruction"`
		Temperature       *float32              `json:"temperature"`
		MaxOutputTokens   int32                 `json:"maxOutputTokens"`
		ResponseMIMEType  string                `json:"responseMimeType"`
		ResponseSchema    *genai.Schema         `json:"responseSchema"`
		ThinkingConfig    *genai.ThinkingConfig `json:"thinkingConfig"`
	}{
		Stage: stage, Model: l.model, Fingerprint: l.Fingerprint(), Contents: genai.Text(prompt),
		SystemInstruction: cfg.SystemInstruction, Temperature: cfg.Temperature, MaxOutputTokens: cfg.MaxOutputTokens,
		ResponseMIMEType: cfg.ResponseMIMEType, ResponseSchema: cfg.ResponseSchema, ThinkingConfig: cfg.ThinkingConfig,
	}
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(append([]byte(prefix), body...))
	return hex.EncodeToString(sum[:])
}

// TestLLM_CacheKeyKeepsTheRecipe: the key built from the parts marshalled
// once is the recipe's, byte for byte, for every preset and configuration
// and for texts encoding/json escapes (HTML, U+2028, invalid UTF-8,
// control characters, a text that looks like the recipe's own JSON).
func TestLLM_CacheKeyKeepsTheRecipe(t *testing.T) {
	ep := Endpoint{Backend: BackendGemini, APIKey: testKey, BaseURL: "http://127.0.0.1:1"}
	schema := []byte(`{"type":"object","properties":{"summary":{"type":"string"},"severity":{"type":"integer","minimum":1,"maximum":5}},"required":["summary","severity"]}`)
	budget := 64
	stages := []struct {
		name string
		l    *LLM
	}{
		{"classify", newTestClassify(t, "http://127.0.0.1:1").LLM},
		{"classify, own prompt and instruction", newTestClassify(t, "http://127.0.0.1:1", func(c *ClassifyConfig) {
			c.PromptTemplate, c.SystemInstruction = "{{.ID}} <{{.Text}}>", "Be terse & \"exact\"."
		}).LLM},
		{"classify, flash (thinking off)", newTestClassify(t, "http://127.0.0.1:1", func(c *ClassifyConfig) { c.Model = "gemini-2.5-flash" }).LLM},
		{"label stage", newTestLLM(t, LLMConfig{Name: "triage", Labels: []string{"bug", "other"}, Timeout: time.Second, Endpoint: ep})},
		{"schema stage, thinking budget", newTestLLM(t, LLMConfig{Name: "summary", Schema: schema, ThinkingBudget: &budget, Endpoint: ep})},
		{"schema stage with a condition", newTestLLM(t, LLMConfig{Name: "summary", Schema: schema, When: `text != ""`, Endpoint: ep})},
	}
	texts := []string{
		"Great app!",
		`<script>alert("x") & more</script>`,
		"line\u2028sep\u2029para",
		"bad \xff\xfe utf-8",
		"tabs\tand\nnewlines\r\x01\x1f",
		`"contents":1234567890123,`,
		strings.Repeat("long review text ", 500),
		"émoji 😀 and ünïcode",
	}
	for _, st := range stages {
		t.Run(st.name, func(t *testing.T) {
			for _, text := range texts {
				it := testItem("r1", text)
				got, err := st.l.CacheKey(it)
				if err != nil {
					t.Fatal(err)
				}
				if want := recipeKey(t, st.l, it); got != want {
					t.Errorf("text %.40q: key %s, the recipe's %s", text, got, want)
				}
			}
		})
	}
}

// BenchmarkLLM_CacheKey is the cost of one item's cache key (classify,
// a review's text).
func BenchmarkLLM_CacheKey(b *testing.B) {
	c := newTestClassify(b, "http://127.0.0.1:1")
	it := testItem("r1", "The app crashes every time I open the settings page after the last update. Please fix!")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.CacheKey(it); err != nil {
			b.Fatal(err)
		}
	}
}
