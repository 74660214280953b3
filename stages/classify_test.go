package stages

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

const testKey = "test-key-S3CRET-0123456789"

// fakeGemini is an httptest server speaking the Gemini REST wire format.
// It counts requests and keeps the last one.
type fakeGemini struct {
	srv      *httptest.Server
	requests atomic.Int64

	mu      sync.Mutex
	path    string
	header  http.Header
	body    []byte
	release chan struct{} // closed at cleanup to free blocked handlers
}

// newFakeGemini serves handle for every request. handle gets the request
// body already read.
func newFakeGemini(t testing.TB, handle func(w http.ResponseWriter, r *http.Request, body []byte)) *fakeGemini {
	t.Helper()
	f := &fakeGemini{release: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.requests.Add(1)
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.path, f.header, f.body = r.URL.Path, r.Header.Clone(), body
		f.mu.Unlock()
		handle(w, r, body)
	}))
	t.Cleanup(func() {
		close(f.release)
		f.srv.Close()
	})
	return f
}

// reply answers with status and a JSON (or any) body.
func reply(status int, body string) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// answer is a 200 generateContent response whose model text is text.
func answer(text, finishReason string) string {
	content := ""
	if text != "" {
		b, _ := json.Marshal(text)
		content = fmt.Sprintf(`"content":{"role":"model","parts":[{"text":%s}]},`, b)
	}
	return fmt.Sprintf(`{"candidates":[{%s"finishReason":%q,"index":0}],`+
		`"usageMetadata":{"promptTokenCount":11,"candidatesTokenCount":5,"totalTokenCount":16},`+
		`"modelVersion":"gemini-2.5-flash-001","responseId":"resp-1"}`, content, finishReason)
}

func newTestClassify(t testing.TB, baseURL string, mods ...func(*ClassifyConfig)) *Classify {
	t.Helper()
	cfg := ClassifyConfig{APIKey: testKey, BaseURL: baseURL, Timeout: 5 * time.Second}
	for _, m := range mods {
		m(&cfg)
	}
	c, err := NewClassify(context.Background(), cfg)
	if err != nil {
		t.Fatalf("NewClassify: %v", err)
	}
	return c
}

func testItem(id, text string) pipeline.Item {
	out, _ := json.Marshal(SanitizeOutput{Text: text, Chars: len(text), Changes: []string{}})
	return pipeline.Item{
		Record:  pipeline.Record{ID: id, Text: "raw " + text, Fields: map[string]string{"app": "notes"}},
		Prev:    out,
		Outputs: map[string]json.RawMessage{"sanitize": out},
	}
}

const (
	body429Minute = `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED","details":[
 {"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_input_token_count","quotaId":"GenerateContentInputTokensPerModelPerMinute-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.5-flash"},"quotaValue":"250000"}]},
 {"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},
 {"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"45.837906927s"}]}}`
	body429Day = `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED","details":[
 {"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[
  {"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_input_token_count","quotaId":"GenerateContentInputTokensPerModelPerMinute-FreeTier","quotaValue":"250000"},
  {"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier","quotaValue":"250"}]},
 {"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"26s"}]}}`
	// body429Several names per-minute requests (a number, as a proxy may
	// send it), per-minute input tokens twice (the lower binds), and one
	// with no quotaValue.
	body429Several = `{"error":{"code":429,"message":"You exceeded your current quota.","status":"RESOURCE_EXHAUSTED","details":[
 {"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[
  {"quotaMetric":"generativelanguage.googleapis.com/generate_content_paid_tier_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel","quotaValue":1000},
  {"quotaMetric":"generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count","quotaId":"GenerateContentInputTokensPerModelPerMinute","quotaValue":"4000000"},
  {"quotaMetric":"generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count","quotaId":"GenerateContentInputTokensPerModelPerMinute","quotaValue":"1000000"},
  {"quotaMetric":"generativelanguage.googleapis.com/generate_content_paid_tier_requests","quotaId":"GenerateRequestsPerMinutePerProject"}]},
 {"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"3s"}]}}`
	body429Bare  = `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}`
	body500      = `{"error":{"code":500,"message":"An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting","status":"INTERNAL"}}`
	body503      = `{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`
	bodyKeyError = `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[
 {"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com","metadata":{"service":"generativelanguage.googleapis.com"}},
 {"@type":"type.googleapis.com/google.rpc.LocalizedMessage","locale":"en-US","message":"API key not valid. Please pass a valid API key."}]}}`
	body403 = `{"error":{"code":403,"message":"Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.","status":"PERMISSION_DENIED"}}`
	body404 = `{"error":{"code":404,"message":"models/gemini-2.5-flash is not found for API version v1beta, or is not supported for generateContent. Call ListModels to see the list of available models and their supported methods.","status":"NOT_FOUND"}}`
	body400 = `{"error":{"code":400,"message":"Request contains an invalid argument.","status":"INVALID_ARGUMENT"}}`
)

func TestClassify_Process(t *testing.T) {
	okUsage := pipeline.Usage{PromptTokens: 11, CandidateTokens: 5, TotalTokens: 16}
	twice := okUsage.Add(okUsage)
	tests := []struct {
		name   string
		handle func(http.ResponseWriter, *http.Request, []byte)
		cfg    func(*ClassifyConfig)
		class  pipeline.Class // "" means success
		label  string
		msg    []string // substrings of the error
		usage  pipeline.Usage
		after  time.Duration
		daily  bool
		// rpm, tpm: the per-minute budgets the 429 names.
		rpm, tpm int64
		timeout  bool // errors.Is(err, context.DeadlineExceeded)
		// requests the server must see; 0 means 1. A cut-off or
		// off-schema answer is asked once more (TestClassify_Repair).
		requests int64
		// verdict: the error is marked as a verdict on the item's
		// content (see VerdictError), not on the configuration.
		verdict bool
	}{
		{
			name:   "success",
			handle: reply(200, answer(`{"label":"bug","confidence":0.92,"reason":"crashes on login"}`, "STOP")),
			label:  "bug", usage: okUsage,
		},
		{
			name:   "label matched ignoring case and space",
			handle: reply(200, answer(`{"label":" Praise ","confidence":1,"reason":""}`, "STOP")),
			label:  "praise", usage: okUsage,
		},
		{
			name:   "custom labels",
			cfg:    func(c *ClassifyConfig) { c.Labels = []string{"positive", "negative"} },
			handle: reply(200, answer(`{"label":"negative","confidence":0,"reason":"angry"}`, "STOP")),
			label:  "negative", usage: okUsage,
		},
		{
			name:   "429 per minute",
			handle: reply(429, body429Minute),
			class:  pipeline.ClassRateLimited, after: 45837906927 * time.Nanosecond, tpm: 250000,
			msg: []string{"rate limited", "429 RESOURCE_EXHAUSTED", "GenerateContentInputTokensPerModelPerMinute-FreeTier", "45.837906927s"},
		},
		{
			name:   "429 per day",
			handle: reply(429, body429Day),
			class:  pipeline.ClassRateLimited, after: 26 * time.Second, daily: true,
			msg: []string{"daily quota is exhausted (429 RESOURCE_EXHAUSTED on GenerateRequestsPerDayPerProjectPerModel-FreeTier)", "midnight Pacific"},
		},
		{
			name:   "429 naming several per-minute quotas",
			handle: reply(429, body429Several),
			class:  pipeline.ClassRateLimited, after: 3 * time.Second, rpm: 1000, tpm: 1000000,
			msg: []string{"rate limited", "GenerateRequestsPerMinutePerProjectPerModel", "GenerateContentInputTokensPerModelPerMinute"},
		},
		{
			name:   "429 bare",
			handle: reply(429, body429Bare),
			class:  pipeline.ClassRateLimited,
			msg:    []string{"Resource has been exhausted"},
		},
		{
			name:   "429 non-JSON body",
			handle: reply(429, "Too Many Requests"),
			class:  pipeline.ClassRateLimited,
		},
		{name: "500", handle: reply(500, body500), class: pipeline.ClassTransient, msg: []string{"server error", "500 INTERNAL"}},
		{name: "503", handle: reply(503, body503), class: pipeline.ClassOverloaded, msg: []string{"503 UNAVAILABLE", "The model is overloaded"}},
		{name: "504", handle: reply(504, `{"error":{"code":504,"message":"Deadline expired before operation could complete.","status":"DEADLINE_EXCEEDED"}}`), class: pipeline.ClassTransient},
		{name: "502 non-JSON body", handle: reply(502, "<html><body>502 Bad Gateway</body></html>"), class: pipeline.ClassTransient, msg: []string{"502 Bad Gateway"}},
		{name: "503 empty body", handle: reply(503, ""), class: pipeline.ClassOverloaded, msg: []string{"503 Service Unavailable"}},
		{
			name: "timeout",
			cfg:  func(c *ClassifyConfig) { c.Timeout = 50 * time.Millisecond },
			handle: func(w http.ResponseWriter, r *http.Request, _ []byte) {
				select {
				case <-r.Context().Done():
				case <-time.After(5 * time.Second):
				}
			},
			class: pipeline.ClassTransient, timeout: true, msg: []string{"within 50ms"},
		},
		{
			name: "connection closed mid-body",
			handle: func(w http.ResponseWriter, _ *http.Request, _ []byte) {
				conn, buf, err := w.(http.Hijacker).Hijack()
				if err != nil {
					panic(err)
				}
				defer conn.Close()
				full := answer(`{"label":"bug","confidence":0.9,"reason":"x"}`, "STOP")
				fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(full), full[:len(full)/2])
				buf.Flush()
			},
			class: pipeline.ClassTransient,
		},
		{name: "truncated JSON body", handle: reply(200, `{"candidates":[{"content":{"role":"model","parts":[{"te`), class: pipeline.ClassTransient},
		{name: "200 null body", handle: reply(200, `null`), class: pipeline.ClassTransient},
		{name: "200 wrong types", handle: reply(200, `{"candidates":"nope"}`), class: pipeline.ClassTransient},
		{name: "200 empty body", handle: reply(200, ``), class: pipeline.ClassTransient, msg: []string{"no candidates"}},
		{
			name:   "blocked prompt",
			handle: reply(200, `{"promptFeedback":{"blockReason":"SAFETY","safetyRatings":[{"category":"HARM_CATEGORY_HARASSMENT","probability":"HIGH"}]},"usageMetadata":{"promptTokenCount":9,"totalTokenCount":9},"modelVersion":"gemini-2.5-flash"}`),
			class:  pipeline.ClassPermanent, usage: pipeline.Usage{PromptTokens: 9, TotalTokens: 9}, verdict: true,
			msg: []string{"blocked by the model's safety filter", "promptFeedback.blockReason=SAFETY",
				"edit the row in your input file and run again: the edited text re-enters by itself", "pays for the same block again"},
		},
		{
			name:   "finish reason SAFETY",
			handle: reply(200, `{"candidates":[{"finishReason":"SAFETY","index":0,"safetyRatings":[{"category":"HARM_CATEGORY_HATE_SPEECH","probability":"HIGH","blocked":true}]}],"usageMetadata":{"promptTokenCount":11,"totalTokenCount":11}}`),
			class:  pipeline.ClassPermanent, usage: pipeline.Usage{PromptTokens: 11, TotalTokens: 11}, verdict: true,
			msg: []string{"safety filter", "finishReason=SAFETY"},
		},
		{name: "finish reason RECITATION", handle: reply(200, answer("", "RECITATION")), class: pipeline.ClassPermanent, usage: okUsage, verdict: true, msg: []string{"reciting"}},
		{name: "finish reason PROHIBITED_CONTENT", handle: reply(200, answer("", "PROHIBITED_CONTENT")), class: pipeline.ClassPermanent, usage: okUsage, verdict: true},
		{name: "finish reason SPII", handle: reply(200, answer("", "SPII")), class: pipeline.ClassPermanent, usage: okUsage, verdict: true},
		{name: "finish reason BLOCKLIST", handle: reply(200, answer("", "BLOCKLIST")), class: pipeline.ClassPermanent, usage: okUsage, verdict: true},
		{
			name:   "MAX_TOKENS twice",
			handle: reply(200, answer(`{"label":"bu`, "MAX_TOKENS")),
			class:  pipeline.ClassPermanent, usage: twice, requests: 2,
			msg: []string{"cut off at 256 output tokens, and again at 512", "MAX_TOKENS", "raise the stage's max output tokens"},
		},
		{name: "finish reason OTHER", handle: reply(200, answer(`{}`, "OTHER")), class: pipeline.ClassTransient, usage: okUsage},
		{name: "no candidates", handle: reply(200, `{"candidates":[],"usageMetadata":{"promptTokenCount":3}}`), class: pipeline.ClassTransient, usage: pipeline.Usage{PromptTokens: 3}},
		{
			name:   "text not JSON",
			handle: reply(200, answer(`I think this is a bug.`, "STOP")),
			class:  pipeline.ClassPermanent, usage: twice, requests: 2,
			msg: []string{"model output did not match the schema", "not a JSON object"},
		},
		{
			name:   "label outside the set",
			handle: reply(200, answer(`{"label":"crash","confidence":0.9,"reason":"x"}`, "STOP")),
			class:  pipeline.ClassPermanent, usage: twice, requests: 2,
			msg: []string{"model output did not match the schema", `label "crash" is not one of bug, feature_request`},
		},
		{
			name:   "confidence outside 0..1",
			handle: reply(200, answer(`{"label":"bug","confidence":1.5,"reason":"x"}`, "STOP")),
			class:  pipeline.ClassPermanent, usage: twice, requests: 2, msg: []string{"confidence 1.5 is outside 0..1"},
		},
		{
			name:   "missing fields",
			handle: reply(200, answer(`{"label":"bug"}`, "STOP")),
			class:  pipeline.ClassPermanent, usage: twice, requests: 2, msg: []string{"missing confidence, reason"},
		},
		{
			name:   "400 API_KEY_INVALID",
			handle: reply(400, bodyKeyError),
			class:  pipeline.ClassFatal,
			msg:    []string{"API key was rejected", "API_KEY_INVALID", "set GEMINI_API_KEY"},
		},
		{
			name:   "400 echoing the key",
			handle: reply(400, `{"error":{"code":400,"message":"API key not valid: `+testKey+`","status":"INVALID_ARGUMENT"}}`),
			class:  pipeline.ClassFatal,
		},
		{name: "401", handle: reply(401, `{"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}`), class: pipeline.ClassFatal, msg: []string{"GEMINI_API_KEY"}},
		{name: "403", handle: reply(403, body403), class: pipeline.ClassFatal, msg: []string{"permission denied", "403 PERMISSION_DENIED", "GEMINI_API_KEY"}},
		{name: "404", handle: reply(404, body404), class: pipeline.ClassFatal, msg: []string{`model "gemini-2.5-flash" not found at http://127.0.0.1`, "check the stage's model (e.g. gemini-2.5-flash)"}},
		{name: "400 FAILED_PRECONDITION", handle: reply(400, `{"error":{"code":400,"message":"User location is not supported for the API use.","status":"FAILED_PRECONDITION"}}`), class: pipeline.ClassFatal, msg: []string{"User location is not supported"}},
		{name: "400 other", handle: reply(400, body400), class: pipeline.ClassPermanent, msg: []string{"400 INVALID_ARGUMENT", "Request contains an invalid argument", "edit the row in your input file"}},
		{name: "413", handle: reply(413, `{"error":{"code":413,"message":"Request Entity Too Large","status":"FAILED_PRECONDITION"}}`), class: pipeline.ClassPermanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeGemini(t, tt.handle)
			mods := []func(*ClassifyConfig){}
			if tt.cfg != nil {
				mods = append(mods, tt.cfg)
			}
			c := newTestClassify(t, srv.srv.URL, mods...)
			res, err := c.Process(context.Background(), testItem("r1", "The app crashes when I log in"))

			if n, want := srv.requests.Load(), max(tt.requests, 1); n != want {
				t.Errorf("server saw %d requests, want exactly %d", n, want)
			}
			if res.Usage != tt.usage && (tt.class == "" || tt.usage != (pipeline.Usage{})) {
				t.Errorf("Usage = %+v, want %+v", res.Usage, tt.usage)
			}
			if tt.class == "" {
				if err != nil {
					t.Fatalf("Process error: %v", err)
				}
				var out ClassifyOutput
				if err := json.Unmarshal(res.Output, &out); err != nil {
					t.Fatalf("output %s: %v", res.Output, err)
				}
				if out.Label != tt.label || out.Model != DefaultModel || out.Usage != tt.usage || out.ModelVersion != "gemini-2.5-flash-001" {
					t.Errorf("output = %+v, want label %q, model %q, usage %+v", out, tt.label, DefaultModel, tt.usage)
				}
				return
			}
			if err == nil {
				t.Fatalf("Process succeeded with %s, want a %s error", res.Output, tt.class)
			}
			if got := pipeline.ClassOf(context.Background(), err); got != tt.class {
				t.Errorf("class = %q, want %q (err: %v)", got, tt.class, err)
			}
			if got := isItemVerdict(err); got != tt.verdict {
				t.Errorf("item verdict = %v, want %v (err: %v)", got, tt.verdict, err)
			}
			msg := err.Error()
			if strings.Contains(msg, testKey) {
				t.Errorf("error contains the API key: %s", msg)
			}
			if !strings.Contains(msg, `item "r1"`) {
				t.Errorf("error does not name the item: %s", msg)
			}
			// A dead letter's message is stored: the CLI words the
			// command that deals with it when it shows it.
			if tt.class == pipeline.ClassPermanent && strings.Contains(msg, "`sawtooth") {
				t.Errorf("a dead letter's message names a command: %s", msg)
			}
			for _, want := range tt.msg {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			}
			var rl *pipeline.RateLimitedError
			if errors.As(err, &rl) && (rl.RetryAfter != tt.after || rl.Daily != tt.daily) {
				t.Errorf("RetryAfter, Daily = %v, %v, want %v, %v", rl.RetryAfter, rl.Daily, tt.after, tt.daily)
			}
			if rl != nil && (rl.RequestsPerMinute != tt.rpm || rl.TokensPerMinute != tt.tpm) {
				t.Errorf("RequestsPerMinute, TokensPerMinute = %d, %d, want %d, %d", rl.RequestsPerMinute, rl.TokensPerMinute, tt.rpm, tt.tpm)
			}
			if got := errors.Is(err, context.DeadlineExceeded); got != tt.timeout {
				t.Errorf("errors.Is(err, DeadlineExceeded) = %v, want %v", got, tt.timeout)
			}
		})
	}
}

func TestClassify_ProcessRequest(t *testing.T) {
	srv := newFakeGemini(t, reply(200, answer(`{"label":"ux","confidence":0.5,"reason":"menus"}`, "STOP")))
	c := newTestClassify(t, srv.srv.URL, func(cfg *ClassifyConfig) {
		cfg.PromptTemplate = "Review {{.ID}} for {{.Fields.app}} ({{.Fields.missing}}): {{.Text}}"
	})
	if _, err := c.Process(context.Background(), testItem("r9", "menus are confusing")); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	path, header, body := srv.path, srv.header, srv.body
	srv.mu.Unlock()

	if want := "/v1beta/models/gemini-2.5-flash:generateContent"; path != want {
		t.Errorf("path = %q, want %q", path, want)
	}
	if got := header.Get("X-Goog-Api-Key"); got != testKey {
		t.Errorf("x-goog-api-key = %q, want the key", got)
	}
	var req struct {
		Contents []struct {
			Role  string `json:"role"`
			Parts []struct {
				Text string `json:"text"`
			} `json:"parts"`
		} `json:"contents"`
		SystemInstruction struct {
			Parts []struct {
				Text string `json:"text"`
			} `json:"parts"`
		} `json:"systemInstruction"`
		GenerationConfig struct {
			Temperature      *float64 `json:"temperature"`
			MaxOutputTokens  int      `json:"maxOutputTokens"`
			ResponseMIMEType string   `json:"responseMimeType"`
			ResponseSchema   struct {
				Type       string `json:"type"`
				Properties map[string]struct {
					Type string   `json:"type"`
					Enum []string `json:"enum"`
				} `json:"properties"`
				Required []string `json:"required"`
			} `json:"responseSchema"`
			ThinkingConfig *struct {
				ThinkingBudget *int `json:"thinkingBudget"`
			} `json:"thinkingConfig"`
		} `json:"generationConfig"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("request body %s: %v", body, err)
	}
	if len(req.Contents) != 1 || len(req.Contents[0].Parts) != 1 ||
		req.Contents[0].Parts[0].Text != "Review r9 for notes (): menus are confusing" || req.Contents[0].Role != "user" {
		t.Errorf("contents = %+v, want the rendered prompt with the sanitized text", req.Contents)
	}
	if si := req.SystemInstruction.Parts; len(si) != 1 || !strings.Contains(si[0].Text, strings.Join(DefaultLabels, ", ")) {
		t.Errorf("systemInstruction = %+v, want the default listing the labels", si)
	}
	g := req.GenerationConfig
	if g.Temperature == nil || *g.Temperature != 0 {
		t.Errorf("temperature = %v, want 0 sent explicitly", g.Temperature)
	}
	if g.MaxOutputTokens != DefaultMaxOutputTokens || g.ResponseMIMEType != "application/json" {
		t.Errorf("maxOutputTokens, responseMimeType = %d, %q", g.MaxOutputTokens, g.ResponseMIMEType)
	}
	s := g.ResponseSchema
	if s.Type != "OBJECT" || !slices.Equal(s.Properties["label"].Enum, DefaultLabels) || s.Properties["label"].Type != "STRING" ||
		s.Properties["confidence"].Type != "NUMBER" || s.Properties["reason"].Type != "STRING" ||
		!slices.Equal(s.Required, []string{"label", "confidence", "reason"}) {
		t.Errorf("responseSchema = %+v", s)
	}
	if g.ThinkingConfig == nil || g.ThinkingConfig.ThinkingBudget == nil || *g.ThinkingConfig.ThinkingBudget != 0 {
		t.Errorf("thinkingConfig = %+v, want thinkingBudget 0 for gemini-2.5-flash", g.ThinkingConfig)
	}
	if strings.Contains(string(body), "automaticContinuation") {
		t.Errorf("request body leaks SDK-only field: %s", body)
	}
}

func TestClassify_ProcessInput(t *testing.T) {
	sanitized := func(s string) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"text":%q}`, s)) }
	tests := []struct {
		name string
		item pipeline.Item
		want string
	}{
		{name: "sanitize output", item: pipeline.Item{Record: pipeline.Record{Text: "raw"}, Prev: sanitized("prev"), Outputs: map[string]json.RawMessage{"sanitize": sanitized("clean")}}, want: "clean"},
		{name: "prev", item: pipeline.Item{Record: pipeline.Record{Text: "raw"}, Prev: sanitized("prev")}, want: "prev"},
		{name: "record text", item: pipeline.Item{Record: pipeline.Record{Text: "raw"}, Prev: json.RawMessage(`{"label":"bug"}`)}, want: "raw"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeGemini(t, reply(200, answer(`{"label":"bug","confidence":0.5,"reason":"r"}`, "STOP")))
			c := newTestClassify(t, srv.srv.URL)
			if _, err := c.Process(context.Background(), tt.item); err != nil {
				t.Fatal(err)
			}
			srv.mu.Lock()
			defer srv.mu.Unlock()
			if !strings.Contains(string(srv.body), fmt.Sprintf(`"text":%q`, tt.want)) {
				t.Errorf("request %s does not send %q", srv.body, tt.want)
			}
		})
	}

	t.Run("empty text", func(t *testing.T) {
		srv := newFakeGemini(t, reply(200, answer(`{}`, "STOP")))
		c := newTestClassify(t, srv.srv.URL)
		_, err := c.Process(context.Background(), testItem("r1", "  "))
		if pipeline.ClassOf(context.Background(), err) != pipeline.ClassPermanent || srv.requests.Load() != 0 {
			t.Errorf("err = %v after %d requests, want permanent and no request", err, srv.requests.Load())
		}
	})
}

func TestClassify_ProcessCanceled(t *testing.T) {
	srv := newFakeGemini(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		<-r.Context().Done()
	})
	c := newTestClassify(t, srv.srv.URL)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for srv.requests.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, err := c.Process(ctx, testItem("r1", "text"))
	if got := pipeline.ClassOf(ctx, err); got != pipeline.ClassCanceled {
		t.Errorf("class = %q (err %v), want canceled", got, err)
	}
}

func TestClassify_ProcessConcurrent(t *testing.T) {
	labels := DefaultLabels
	perItem := sync.Map{} // item text -> requests
	srv := newFakeGemini(t, func(w http.ResponseWriter, _ *http.Request, body []byte) {
		var req struct {
			Contents []struct {
				Parts []struct{ Text string } `json:"parts"`
			} `json:"contents"`
		}
		if err := json.Unmarshal(body, &req); err != nil || len(req.Contents) == 0 || len(req.Contents[0].Parts) == 0 {
			reply(400, body400)(w, nil, nil)
			return
		}
		text := req.Contents[0].Parts[0].Text
		n, _ := perItem.LoadOrStore(text, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		var i int
		fmt.Sscanf(text, "review %d", &i)
		reply(200, answer(fmt.Sprintf(`{"label":%q,"confidence":0.8,"reason":"r"}`, labels[i%len(labels)]), "STOP"))(w, nil, nil)
	})
	c := newTestClassify(t, srv.srv.URL)

	const n = 50
	var wg sync.WaitGroup
	errs := make([]error, n)
	outs := make([]ClassifyOutput, n)
	for i := range n {
		wg.Go(func() {
			res, err := c.Process(context.Background(), testItem(fmt.Sprint(i), fmt.Sprintf("review %d", i)))
			if err == nil {
				err = json.Unmarshal(res.Output, &outs[i])
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("item %d: %v", i, errs[i])
			continue
		}
		if want := labels[i%len(labels)]; outs[i].Label != want {
			t.Errorf("item %d label = %q, want %q", i, outs[i].Label, want)
		}
		if v, ok := perItem.Load(fmt.Sprintf("review %d", i)); !ok || v.(*atomic.Int64).Load() != 1 {
			t.Errorf("item %d was sent %v times, want 1", i, v)
		}
	}
	if got := srv.requests.Load(); got != n {
		t.Errorf("server saw %d requests, want %d", got, n)
	}
}

func TestNewClassify(t *testing.T) {
	tests := []struct {
		name string
		cfg  ClassifyConfig
		want string // in the error; "" means success
	}{
		{name: "defaults", cfg: ClassifyConfig{APIKey: testKey}},
		{name: "no key", cfg: ClassifyConfig{}, want: "set GEMINI_API_KEY"},
		{name: "duplicate label", cfg: ClassifyConfig{APIKey: testKey, Labels: []string{"a", "A"}}, want: "appears twice"},
		{name: "blank label", cfg: ClassifyConfig{APIKey: testKey, Labels: []string{"a", " "}}, want: "blank"},
		{name: "bad template", cfg: ClassifyConfig{APIKey: testKey, PromptTemplate: "{{.Text"}, want: "prompt template"},
		{name: "negative timeout", cfg: ClassifyConfig{APIKey: testKey, Timeout: -time.Second}, want: "timeout"},
		{name: "negative max tokens", cfg: ClassifyConfig{APIKey: testKey, MaxOutputTokens: -1}, want: "max output tokens"},
		{name: "bad thinking budget", cfg: ClassifyConfig{APIKey: testKey, ThinkingBudget: new(-2)}, want: "thinking budget"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewClassify(context.Background(), tt.cfg)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.Model() != DefaultModel || !slices.Equal(c.Labels(), DefaultLabels) || c.Name() != "classify" {
					t.Errorf("defaults: model %q labels %v", c.Model(), c.Labels())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), testKey) {
				t.Errorf("error contains the key: %v", err)
			}
		})
	}
}

func TestClassify_Fingerprint(t *testing.T) {
	base := newTestClassify(t, "http://127.0.0.1:1")
	same := newTestClassify(t, "http://127.0.0.1:2", func(c *ClassifyConfig) { c.Timeout = time.Minute })
	other := newTestClassify(t, "http://127.0.0.1:1", func(c *ClassifyConfig) { c.Labels = []string{"a", "b"} })
	if base.Fingerprint() != same.Fingerprint() {
		t.Errorf("URL and timeout changed the fingerprint")
	}
	if base.Fingerprint() == other.Fingerprint() {
		t.Errorf("labels did not change the fingerprint")
	}
}

// FuzzClassifyResponse sends arbitrary bodies with arbitrary statuses
// through the real SDK and Decode: no panic, every error classified, no
// key in any message, success only with a valid answer.
func FuzzClassifyResponse(f *testing.F) {
	for _, s := range []struct {
		status int
		body   string
	}{
		{200, answer(`{"label":"bug","confidence":0.92,"reason":"crashes"}`, "STOP")},
		{200, answer(`{"label":"bu`, "MAX_TOKENS")},
		{200, answer("", "SAFETY")},
		{200, `{"promptFeedback":{"blockReason":"SAFETY"}}`},
		{200, `null`},
		{200, `[]`},
		{200, `{"candidates":[null]}`},
		{200, `{"candidates":[{"content":{"parts":[{"text":5}]}}]}`},
		{200, `{"candidates":"x","usageMetadata":7}`},
		{200, ``},
		{429, body429Minute},
		{429, body429Day},
		{429, `{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":{"seconds":3}}]}}`},
		{400, bodyKeyError},
		{400, `{"error":null}`},
		{400, `{"error":{"code":"x"}}`},
		{403, body403},
		{404, body404},
		{500, body500},
		{502, "<html>bad gateway</html>"},
		{503, body503},
	} {
		f.Add(uint16(s.status-200), []byte(s.body))
	}
	// One server and client for all inputs, so connections are reused:
	// a server per input exhausts ephemeral ports. Inputs run one at a
	// time within a worker process.
	var (
		mu     sync.Mutex
		status int
		body   []byte
	)
	srv := newFakeGemini(f, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		mu.Lock()
		defer mu.Unlock()
		w.WriteHeader(status)
		w.Write(body)
	})
	c := newTestClassify(f, srv.srv.URL)
	f.Fuzz(func(t *testing.T, code uint16, b []byte) {
		mu.Lock()
		status, body = 200+int(code)%400, b
		mu.Unlock()
		res, err := c.Process(context.Background(), testItem("f", "text"))
		if err == nil {
			var out ClassifyOutput
			if jerr := json.Unmarshal(res.Output, &out); jerr != nil || !slices.Contains(DefaultLabels, out.Label) ||
				out.Confidence < 0 || out.Confidence > 1 || status >= 300 {
				t.Fatalf("status %d body %q: accepted %s (%v)", status, body, res.Output, jerr)
			}
			return
		}
		class := pipeline.ClassOf(context.Background(), err)
		switch {
		case class == "" || class == pipeline.ClassCanceled:
			t.Fatalf("status %d: error %v has class %q", status, err, class)
		case status < 300 && (class == pipeline.ClassFatal || class == pipeline.ClassRateLimited):
			t.Fatalf("status %d: error %v classed %q", status, err, class)
		case status == 429 && class != pipeline.ClassRateLimited:
			t.Fatalf("429 classed %q: %v", class, err)
		case strings.Contains(err.Error(), testKey):
			t.Fatalf("error contains the key: %v", err)
		}
	})
}
