package geminisim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/genai"
)

// fakeClock is a settable clock for Config.Now.
type fakeClock struct {
	mu    sync.Mutex
	start time.Time
	t     time.Time
}

func newFakeClock() *fakeClock {
	t := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	return &fakeClock{start: t, t: t}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to d after its start.
func (c *fakeClock) Set(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.start.Add(d)
}

// startServer starts a simulator for cfg and closes it when the test ends.
func startServer(tb testing.TB, cfg Config) (*Server, string) {
	tb.Helper()
	s := New(cfg)
	url, err := s.Start("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("close: %v", err)
		}
	})
	return s, url
}

// newClient is the real genai client pointed at url, SDK retries off.
func newClient(tb testing.TB, url, key string) *genai.Client {
	tb.Helper()
	c, err := genai.NewClient(context.Background(), &genai.ClientConfig{
		APIKey:  key,
		Backend: genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{
			BaseURL:      url,
			RetryOptions: &genai.HTTPRetryOptions{Attempts: genai.Ptr[int32](1)},
		},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

var testLabels = []string{"bug", "feature_request", "pricing", "ux", "praise", "other"}

// classifyConfig is a fresh per-call config with a label-enum schema, the
// way a classify stage would build it.
func classifyConfig() *genai.GenerateContentConfig {
	return &genai.GenerateContentConfig{
		Temperature:           genai.Ptr[float32](0),
		AutomaticContinuation: genai.Ptr(false),
		SystemInstruction:     genai.NewContentFromText("Classify the customer feedback.", genai.RoleUser),
		ResponseMIMEType:      "application/json",
		ResponseSchema: &genai.Schema{
			Type: genai.TypeObject,
			Properties: map[string]*genai.Schema{
				"label":      {Type: genai.TypeString, Enum: testLabels},
				"confidence": {Type: genai.TypeNumber},
				"reason":     {Type: genai.TypeString},
			},
			Required: []string{"label", "confidence", "reason"},
		},
	}
}

func generate(ctx context.Context, c *genai.Client, model, text string) (*genai.GenerateContentResponse, error) {
	return c.Models.GenerateContent(ctx, model, genai.Text(text), classifyConfig())
}

// answer is the JSON the simulated model writes.
type answer struct {
	Label      string  `json:"label"`
	Confidence float64 `json:"confidence"`
	Reason     string  `json:"reason"`
}

// rateLimit is what a test reads out of a 429.
type rateLimit struct {
	quotaIDs    []string
	quotaValues []string
	retryDelay  string
	delay       time.Duration
}

// asRateLimit requires err to be a 429 APIError and decodes its details.
func asRateLimit(tb testing.TB, err error) rateLimit {
	tb.Helper()
	var ae genai.APIError
	if !errors.As(err, &ae) {
		tb.Fatalf("want a genai.APIError, got %T %v", err, err)
	}
	if ae.Code != http.StatusTooManyRequests || ae.Status != "RESOURCE_EXHAUSTED" {
		tb.Fatalf("want 429 RESOURCE_EXHAUSTED, got %d %s", ae.Code, ae.Status)
	}
	if !strings.HasPrefix(ae.Message, "You exceeded your current quota, please check your plan and billing details") {
		tb.Errorf("message %q", ae.Message)
	}
	var rl rateLimit
	var help bool
	for _, d := range ae.Details {
		switch d["@type"] {
		case "type.googleapis.com/google.rpc.QuotaFailure":
			for _, v := range d["violations"].([]any) {
				v := v.(map[string]any)
				rl.quotaIDs = append(rl.quotaIDs, v["quotaId"].(string))
				rl.quotaValues = append(rl.quotaValues, v["quotaValue"].(string))
				dims := v["quotaDimensions"].(map[string]any)
				if dims["location"] != "global" || dims["model"] == "" {
					tb.Errorf("quotaDimensions %v", dims)
				}
				if !strings.HasPrefix(v["quotaMetric"].(string), "generativelanguage.googleapis.com/") {
					tb.Errorf("quotaMetric %v", v["quotaMetric"])
				}
			}
		case "type.googleapis.com/google.rpc.Help":
			help = true
		case "type.googleapis.com/google.rpc.RetryInfo":
			rl.retryDelay = d["retryDelay"].(string)
			rl.delay, err = time.ParseDuration(rl.retryDelay)
			if err != nil {
				tb.Fatalf("retryDelay %q: %v", rl.retryDelay, err)
			}
		}
	}
	if !help || rl.retryDelay == "" || len(rl.quotaIDs) == 0 {
		tb.Fatalf("incomplete 429 details: %v", ae.Details)
	}
	return rl
}

func TestLabel(t *testing.T) {
	tests := []struct {
		name   string
		text   string
		labels []string
		want   string
	}{
		{"bug keyword", "The app crashes on launch", nil, "bug"},
		{"curly apostrophe", "Export doesn’t work at all", nil, "bug"},
		{"pricing", "Way too expensive for what it does", nil, "pricing"},
		{"feature before praise", "I would love a dark mode", nil, "feature_request"},
		{"ux", "The navigation is confusing", nil, "ux"},
		{"praise", "Awesome work, thanks", nil, "praise"},
		{"rule order", "Great app but it crashes", nil, "bug"},
		{"label missing from set", "It crashes and the price is high", []string{"pricing", "other"}, "pricing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Label(tt.text, tt.labels); got != tt.want {
				t.Errorf("Label(%q, %v) = %q, want %q", tt.text, tt.labels, got, tt.want)
			}
		})
	}
	t.Run("display is not pay", func(t *testing.T) {
		if lbl, kw := classify("the display is fine", nil); kw != "" {
			t.Errorf("matched keyword %q (label %s), want the hash fallback", kw, lbl)
		}
	})
	t.Run("hash fallback is stable and in set", func(t *testing.T) {
		labels := []string{"alpha", "beta", "gamma"}
		seen := map[string]bool{}
		for i := range 200 {
			text := fmt.Sprintf("neutral remark number %d", i)
			got := Label(text, labels)
			if got != Label(text, labels) {
				t.Fatalf("Label(%q) not deterministic", text)
			}
			if !contains(labels, got) {
				t.Fatalf("Label(%q) = %q, not in %v", text, got, labels)
			}
			seen[got] = true
			c := confidence(text)
			if c < 0.5 || c > 0.99 {
				t.Fatalf("confidence %v out of range", c)
			}
		}
		if len(seen) != len(labels) {
			t.Errorf("hash picked only %v of %v", seen, labels)
		}
	})
}

func TestParseSchedule(t *testing.T) {
	tests := []struct {
		in      string
		want    []Step
		wantErr bool
	}{
		{"", nil, false},
		{"0s:100,30s:50,60s:100", []Step{{0, 100}, {30 * time.Second, 50}, {time.Minute, 100}}, false},
		{" 1m:20 , 10s:0 ", []Step{{10 * time.Second, 0}, {time.Minute, 20}}, false},
		{"10s", nil, true},
		{"x:10", nil, true},
		{"10s:abc", nil, true},
		{"10s:-1", nil, true},
		{"10s:5,10s:6", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSchedule(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{26 * time.Second, "26s"},
		{412345 * time.Microsecond, "0.412345s"},
		{600 * time.Millisecond, "0.600s"},
		{45837906927 * time.Nanosecond, "45.837906927s"},
		{time.Nanosecond, "0.000000001s"},
	}
	for _, tt := range tests {
		got := formatDuration(tt.d)
		if got != tt.want {
			t.Errorf("formatDuration(%v) = %q, want %q", tt.d, got, tt.want)
		}
		if back, err := time.ParseDuration(got); err != nil || back != tt.d {
			t.Errorf("ParseDuration(%q) = %v, %v", got, back, err)
		}
	}
}

func TestServer_GenerateContent(t *testing.T) {
	_, url := startServer(t, Config{})
	c := newClient(t, url, DefaultAPIKey)
	ctx := context.Background()
	text := "The app keeps crashing when I open settings"

	resp, err := generate(ctx, c, "gemini-2.5-flash", text)
	if err != nil {
		t.Fatal(err)
	}
	var a answer
	if err := json.Unmarshal([]byte(resp.Text()), &a); err != nil {
		t.Fatalf("answer %q: %v", resp.Text(), err)
	}
	if a.Label != "bug" || a.Label != Label(text, testLabels) {
		t.Errorf("label %q, want bug", a.Label)
	}
	if a.Confidence < 0.5 || a.Confidence > 0.99 || !strings.Contains(a.Reason, "crash") {
		t.Errorf("answer %+v", a)
	}
	if got := resp.Candidates[0].FinishReason; got != genai.FinishReasonStop {
		t.Errorf("finishReason %s", got)
	}
	runes := utf8.RuneCountInString(text) + utf8.RuneCountInString("Classify the customer feedback.")
	um := resp.UsageMetadata
	if want := int32((runes + 3) / 4); um.PromptTokenCount != want {
		t.Errorf("promptTokenCount %d, want %d", um.PromptTokenCount, want)
	}
	if want := int32((utf8.RuneCountInString(resp.Text()) + 3) / 4); um.CandidatesTokenCount != want {
		t.Errorf("candidatesTokenCount %d, want %d", um.CandidatesTokenCount, want)
	}
	if um.TotalTokenCount != um.PromptTokenCount+um.CandidatesTokenCount {
		t.Errorf("totalTokenCount %d", um.TotalTokenCount)
	}
	if resp.ModelVersion != "gemini-2.5-flash-sim" || resp.ResponseID == "" {
		t.Errorf("modelVersion %q responseId %q", resp.ModelVersion, resp.ResponseID)
	}

	t.Run("label restricted by enum", func(t *testing.T) {
		cfg := classifyConfig()
		cfg.ResponseSchema.Properties["label"].Enum = []string{"pricing", "other"}
		resp, err := c.Models.GenerateContent(ctx, "gemini-2.5-flash", genai.Text("crashes, and the refund never came"), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(resp.Text()), &a); err != nil || a.Label != "pricing" {
			t.Errorf("answer %q, %v; want label pricing", resp.Text(), err)
		}
	})
	t.Run("responseJsonSchema shapes the answer", func(t *testing.T) {
		cfg := &genai.GenerateContentConfig{
			ResponseMIMEType: "application/json",
			ResponseJsonSchema: map[string]any{
				"type": "object",
				"properties": map[string]any{
					"label": map[string]any{"type": "string", "enum": []string{"ux", "other"}},
				},
			},
		}
		resp, err := c.Models.GenerateContent(ctx, "gemini-2.5-pro", genai.Text("the layout is a mess"), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Text(); got != `{"label":"ux"}` {
			t.Errorf("answer %s, want only the label", got)
		}
	})
	t.Run("no schema uses default labels", func(t *testing.T) {
		resp, err := c.Models.GenerateContent(ctx, "gemini-2.0-flash", genai.Text("please add export to csv"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(resp.Text()), &a); err != nil || a.Label != "feature_request" {
			t.Errorf("answer %q, %v", resp.Text(), err)
		}
	})
	t.Run("countTokens", func(t *testing.T) {
		ct, err := c.Models.CountTokens(ctx, "gemini-2.5-flash", genai.Text("twelve runes"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if ct.TotalTokens != 3 {
			t.Errorf("totalTokens %d, want 3", ct.TotalTokens)
		}
	})
}

func TestServer_RequestErrors(t *testing.T) {
	s, url := startServer(t, Config{APIKey: "right"})
	ctx := context.Background()

	t.Run("bad key", func(t *testing.T) {
		_, err := generate(ctx, newClient(t, url, "wrong"), "gemini-2.5-flash", "hello")
		var ae genai.APIError
		if !errors.As(err, &ae) {
			t.Fatalf("want APIError, got %v", err)
		}
		if ae.Code != 400 || ae.Status != "INVALID_ARGUMENT" || ae.Message != "API key not valid. Please pass a valid API key." {
			t.Errorf("got %+v", ae)
		}
		if len(ae.Details) != 1 || ae.Details[0]["reason"] != "API_KEY_INVALID" {
			t.Errorf("details %v", ae.Details)
		}
	})
	t.Run("key in query", func(t *testing.T) {
		body := `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`
		resp, err := http.Post(url+"/v1beta/models/gemini-2.5-flash:generateContent?key=right", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("status %d", resp.StatusCode)
		}
	})
	t.Run("unknown model", func(t *testing.T) {
		_, err := generate(ctx, newClient(t, url, "right"), "gemini-9-ultra", "hello")
		var ae genai.APIError
		if !errors.As(err, &ae) {
			t.Fatalf("want APIError, got %v", err)
		}
		if ae.Code != 404 || ae.Status != "NOT_FOUND" ||
			!strings.HasPrefix(ae.Message, "models/gemini-9-ultra is not found for API version v1beta, or is not supported for generateContent") {
			t.Errorf("got %+v", ae)
		}
	})
	t.Run("bad json", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(`{"contents":[`))
		req.Header.Set("X-Goog-Api-Key", "right")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct{ Error apiError }
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 400 || body.Error.Status != "INVALID_ARGUMENT" {
			t.Errorf("status %d body %+v", resp.StatusCode, body)
		}
	})
	st := s.Stats()
	want := map[Outcome]int64{OutcomeBadKey: 1, OutcomeNotFound: 1, OutcomeBadRequest: 1, OutcomeOK: 1}
	for o, n := range want {
		if st.Outcomes[o] != n {
			t.Errorf("outcome %s = %d, want %d", o, st.Outcomes[o], n)
		}
	}
	if st.Calls != 4 || len(st.Items) != 1 {
		t.Errorf("calls %d items %d, want 4 and 1", st.Calls, len(st.Items))
	}
}

func TestServer_QuotaRPM(t *testing.T) {
	clk := newFakeClock()
	s, url := startServer(t, Config{RPM: 3, Window: time.Second, Now: clk.Now})
	c := newClient(t, url, DefaultAPIKey)
	ctx := context.Background()
	call := func(at time.Duration) error {
		clk.Set(at)
		_, err := generate(ctx, c, "gemini-2.5-flash", "hello there")
		return err
	}
	for _, at := range []time.Duration{0, 100 * time.Millisecond, 250 * time.Millisecond} {
		if err := call(at); err != nil {
			t.Fatalf("call at %v: %v", at, err)
		}
	}
	rl := asRateLimit(t, call(400*time.Millisecond))
	if !reflect.DeepEqual(rl.quotaIDs, []string{"GenerateRequestsPerMinutePerProjectPerModel"}) || rl.quotaValues[0] != "180" { // 3 per 1 s window, named per minute
		t.Errorf("violations %v %v", rl.quotaIDs, rl.quotaValues)
	}
	if rl.retryDelay != "0.600s" {
		t.Errorf("retryDelay %q, want 0.600s (until the call at 0 leaves the window)", rl.retryDelay)
	}
	// One nanosecond before the window edge it is still refused...
	rl = asRateLimit(t, call(time.Second-time.Nanosecond))
	if rl.delay != time.Nanosecond {
		t.Errorf("retryDelay %q, want 1ns", rl.retryDelay)
	}
	// ...and exactly at it the first call no longer counts.
	if err := call(time.Second); err != nil {
		t.Fatalf("at the window edge: %v", err)
	}
	rl = asRateLimit(t, call(time.Second))
	if rl.delay != 100*time.Millisecond {
		t.Errorf("retryDelay %v, want 100ms", rl.delay)
	}
	st := s.Stats()
	if st.AdmittedRequests != 4 || st.Outcomes[OutcomeRateLimited] != 3 || st.Outcomes[OutcomeOK] != 4 {
		t.Errorf("stats %+v", st)
	}
	// The timeline puts the calls in their seconds.
	want := []Bucket{{Second: 0, Admitted: 3, OK: 3, RateLimited: 2}, {Second: 1, Admitted: 1, OK: 1, RateLimited: 1}}
	if !reflect.DeepEqual(st.Timeline, want) {
		t.Errorf("timeline %+v, want %+v", st.Timeline, want)
	}
}

func TestServer_QuotaTPM(t *testing.T) {
	clk := newFakeClock()
	s, url := startServer(t, Config{TPM: 10, Now: clk.Now})
	c := newClient(t, url, DefaultAPIKey)
	ctx := context.Background()
	text := strings.Repeat("x", 16) // 4 tokens
	call := func(at time.Duration) error {
		clk.Set(at)
		_, err := c.Models.GenerateContent(ctx, "gemini-2.5-flash", genai.Text(text), nil)
		return err
	}
	if err := call(0); err != nil {
		t.Fatal(err)
	}
	if err := call(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	rl := asRateLimit(t, call(20*time.Second))
	if !reflect.DeepEqual(rl.quotaIDs, []string{"GenerateContentInputTokensPerModelPerMinute"}) || rl.quotaValues[0] != "10" {
		t.Errorf("violations %v %v", rl.quotaIDs, rl.quotaValues)
	}
	if rl.delay != 40*time.Second {
		t.Errorf("retryDelay %q, want 40s", rl.retryDelay)
	}
	st := s.Stats()
	if st.AdmittedTokens != 8 || st.AdmittedRequests != 2 {
		t.Errorf("admitted %d requests %d tokens; refusals must not consume quota", st.AdmittedRequests, st.AdmittedTokens)
	}
	if err := call(60 * time.Second); err != nil {
		t.Fatalf("after the first call left the window: %v", err)
	}
	// A prompt above the whole TPM can never pass; it is told to wait a window.
	clk.Set(61 * time.Second)
	_, err := c.Models.GenerateContent(ctx, "gemini-2.5-flash", genai.Text(strings.Repeat("y", 100)), nil)
	if rl := asRateLimit(t, err); rl.delay != time.Minute {
		t.Errorf("retryDelay %q, want 60s", rl.retryDelay)
	}
}

func TestServer_QuotaRPD(t *testing.T) {
	clk := newFakeClock()
	s, url := startServer(t, Config{RPD: 2, RPM: 100, Now: clk.Now})
	c := newClient(t, url, DefaultAPIKey)
	ctx := context.Background()
	for i, at := range []time.Duration{0, time.Hour} {
		clk.Set(at)
		if _, err := generate(ctx, c, "gemini-2.5-flash", fmt.Sprint("item ", i)); err != nil {
			t.Fatal(err)
		}
	}
	clk.Set(2 * time.Hour)
	_, err := generate(ctx, c, "gemini-2.5-flash", "item 2")
	rl := asRateLimit(t, err)
	if len(rl.quotaIDs) != 1 || !strings.Contains(rl.quotaIDs[0], "PerDay") || rl.quotaValues[0] != "2" {
		t.Errorf("violations %v %v", rl.quotaIDs, rl.quotaValues)
	}
	if rl.delay != 22*time.Hour {
		t.Errorf("retryDelay %q, want 22h in seconds", rl.retryDelay)
	}
	// Quotas are per model: another model still has its day.
	if _, err := generate(ctx, c, "gemini-2.5-flash-lite", "item 2"); err != nil {
		t.Errorf("other model: %v", err)
	}
	if st := s.Stats(); st.Items[ItemHash("item 2")].Calls != 2 || st.Items[ItemHash("item 2")].OK != 1 {
		t.Errorf("item stats %+v", st.Items[ItemHash("item 2")])
	}
}

func TestServer_QuotaSchedule(t *testing.T) {
	clk := newFakeClock()
	steps, err := ParseSchedule("0s:50,10s:100,30s:0,40s:100")
	if err != nil {
		t.Fatal(err)
	}
	s, url := startServer(t, Config{RPM: 4, Schedule: steps, Now: clk.Now})
	c := newClient(t, url, DefaultAPIKey)
	ctx := context.Background()
	call := func(at time.Duration) error {
		clk.Set(at)
		_, err := generate(ctx, c, "gemini-2.5-flash", "the same prompt")
		return err
	}
	// At 50% the quota is 2; the raise at 10s comes before the first call
	// leaves the window at 60s, so that is when to retry.
	for range 2 {
		if err := call(0); err != nil {
			t.Fatal(err)
		}
	}
	rl := asRateLimit(t, call(time.Second))
	if rl.quotaValues[0] != "2" || rl.delay != 9*time.Second {
		t.Errorf("at 50%%: quotaValue %s retryDelay %s, want 2 and 9s", rl.quotaValues[0], rl.retryDelay)
	}
	if got := s.Stats().QuotaPercent; got != 50 {
		t.Errorf("QuotaPercent %d, want 50", got)
	}
	for range 2 {
		if err := call(10 * time.Second); err != nil {
			t.Fatalf("at 100%%: %v", err)
		}
	}
	// Full at 100%: the 30s step to 0% and the 40s step back do not help
	// before the first two calls leave the window at 60s.
	rl = asRateLimit(t, call(20*time.Second))
	if rl.quotaValues[0] != "4" || rl.delay != 40*time.Second {
		t.Errorf("at 100%%: quotaValue %s retryDelay %s, want 4 and 40s", rl.quotaValues[0], rl.retryDelay)
	}
	// At 0% nothing passes, even with an empty window, until the next step.
	clk.Set(0)
	s0, url0 := startServer(t, Config{RPM: 10, Schedule: []Step{{5 * time.Second, 0}, {8 * time.Second, 100}}, Now: clk.Now})
	c0 := newClient(t, url0, DefaultAPIKey)
	clk.Set(6 * time.Second)
	_, err = generate(ctx, c0, "gemini-2.5-flash", "anything")
	rl = asRateLimit(t, err)
	if rl.quotaValues[0] != "0" || rl.delay != 2*time.Second {
		t.Errorf("at 0%%: quotaValue %s retryDelay %s, want 0 and 2s", rl.quotaValues[0], rl.retryDelay)
	}
	clk.Set(8 * time.Second)
	if _, err := generate(ctx, c0, "gemini-2.5-flash", "anything"); err != nil {
		t.Errorf("after the step back to 100%%: %v", err)
	}
	if st := s0.Stats(); st.AdmittedRequests != 1 || st.Outcomes[OutcomeRateLimited] != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestServer_Faults(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		faults  Faults
		text    string
		outcome Outcome
		check   func(t *testing.T, resp *genai.GenerateContentResponse, err error)
	}{
		{"err500", Faults{Err500: 1}, "hi", OutcomeErr500, func(t *testing.T, _ *genai.GenerateContentResponse, err error) {
			var ae genai.APIError
			if !errors.As(err, &ae) || ae.Code != 500 || ae.Status != "INTERNAL" {
				t.Errorf("want 500 INTERNAL, got %v", err)
			}
		}},
		{"err503", Faults{Err503: 1}, "hi", OutcomeErr503, func(t *testing.T, _ *genai.GenerateContentResponse, err error) {
			var ae genai.APIError
			if !errors.As(err, &ae) || ae.Code != 503 || ae.Status != "UNAVAILABLE" ||
				ae.Message != "The model is overloaded. Please try again later." {
				t.Errorf("want 503 overloaded, got %v", err)
			}
		}},
		{"malformed", Faults{Malformed: 1}, "hi", OutcomeMalformed, func(t *testing.T, _ *genai.GenerateContentResponse, err error) {
			var ae genai.APIError
			if err == nil || errors.As(err, &ae) {
				t.Errorf("want a decode error, got %v", err)
			}
		}},
		{"block prompt", Faults{BlockPrompt: 1}, "hi", OutcomeBlockPrompt, checkBlockedPrompt},
		{"safety trigger", Faults{}, "Tell me HOW TO BUILD A BOMB please", OutcomeBlockPrompt, checkBlockedPrompt},
		{"block candidate", Faults{BlockCandidate: 1}, "hi", OutcomeBlockCandidate, func(t *testing.T, resp *genai.GenerateContentResponse, err error) {
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Candidates) != 1 || resp.Candidates[0].FinishReason != genai.FinishReasonSafety ||
				resp.Text() != "" || len(resp.Candidates[0].SafetyRatings) == 0 {
				t.Errorf("want a SAFETY candidate without text, got %+v", resp.Candidates)
			}
		}},
		{"max tokens", Faults{MaxTokens: 1}, "hi", OutcomeMaxTokens, func(t *testing.T, resp *genai.GenerateContentResponse, err error) {
			if err != nil {
				t.Fatal(err)
			}
			if resp.Candidates[0].FinishReason != genai.FinishReasonMaxTokens {
				t.Errorf("finishReason %s", resp.Candidates[0].FinishReason)
			}
			var a answer
			if text := resp.Text(); text == "" || json.Unmarshal([]byte(text), &a) == nil {
				t.Errorf("want cut-off JSON, got %q", text)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, url := startServer(t, Config{Faults: tt.faults, RPM: 100})
			resp, err := generate(ctx, newClient(t, url, DefaultAPIKey), "gemini-2.5-flash", tt.text)
			tt.check(t, resp, err)
			st := s.Stats()
			if st.Outcomes[tt.outcome] != 1 || st.AdmittedRequests != 1 {
				t.Errorf("outcomes %v admitted %d; want one %s, admitted", st.Outcomes, st.AdmittedRequests, tt.outcome)
			}
		})
	}
	t.Run("hang", func(t *testing.T) {
		s, url := startServer(t, Config{Faults: Faults{Hang: 1}})
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := generate(ctx, newClient(t, url, DefaultAPIKey), "gemini-2.5-flash", "hi")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("want a deadline error, got %v", err)
		}
		if got := s.Stats().Outcomes[OutcomeHang]; got != 1 {
			t.Errorf("hang outcomes %d", got)
		}
	})
	t.Run("hold", func(t *testing.T) {
		s, url := startServer(t, Config{})
		s.Hold()
		client := newClient(t, url, DefaultAPIKey)
		const n = 3
		errs := make(chan error, n)
		for range n {
			go func() {
				_, err := generate(ctx, client, "gemini-2.5-flash", "hi")
				errs <- err
			}()
		}
		// All n in flight at once: none of them was answered.
		waitFor(t, func() bool { return s.Stats().InFlight == n })
		if len(errs) != 0 {
			t.Fatal("a held call was answered before Release")
		}
		s.Release()
		for range n {
			if err := <-errs; err != nil {
				t.Errorf("a held call after Release: %v", err)
			}
		}
		if _, err := generate(ctx, client, "gemini-2.5-flash", "hi"); err != nil {
			t.Errorf("a call after Release: %v", err)
		}
	})
	t.Run("maxOutputTokens", func(t *testing.T) {
		_, url := startServer(t, Config{})
		cfg := classifyConfig()
		cfg.MaxOutputTokens = 5
		resp, err := newClient(t, url, DefaultAPIKey).Models.GenerateContent(ctx, "gemini-2.5-flash", genai.Text("hi"), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Candidates[0].FinishReason != genai.FinishReasonMaxTokens || resp.UsageMetadata.CandidatesTokenCount > 5 {
			t.Errorf("finishReason %s candidates tokens %d", resp.Candidates[0].FinishReason, resp.UsageMetadata.CandidatesTokenCount)
		}
	})
	t.Run("drawn MAX_TOKENS cuts a small budget, not a large one", func(t *testing.T) {
		_, url := startServer(t, Config{Faults: Faults{MaxTokens: 1}})
		for _, tc := range []struct {
			budget int32
			want   genai.FinishReason
		}{{RambleTokens - 1, genai.FinishReasonMaxTokens}, {RambleTokens, genai.FinishReasonStop}, {2 * RambleTokens, genai.FinishReasonStop}} {
			cfg := classifyConfig()
			cfg.MaxOutputTokens = tc.budget
			resp, err := newClient(t, url, DefaultAPIKey).Models.GenerateContent(ctx, "gemini-2.5-flash", genai.Text("hi"), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Candidates[0].FinishReason; got != tc.want {
				t.Errorf("budget %d: finishReason %s, want %s", tc.budget, got, tc.want)
			}
		}
	})
}

func checkBlockedPrompt(t *testing.T, resp *genai.GenerateContentResponse, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if resp.PromptFeedback == nil || resp.PromptFeedback.BlockReason != genai.BlockedReasonSafety ||
		len(resp.Candidates) != 0 || resp.Text() != "" {
		t.Errorf("want a SAFETY prompt block, got feedback %+v candidates %d", resp.PromptFeedback, len(resp.Candidates))
	}
	if resp.UsageMetadata == nil || resp.UsageMetadata.PromptTokenCount == 0 {
		t.Errorf("usage %+v", resp.UsageMetadata)
	}
}

// outcomeOf classifies what the client saw into the server's outcome names
// (for the fault kinds used in the concurrency test).
func outcomeOf(resp *genai.GenerateContentResponse, err error) Outcome {
	var ae genai.APIError
	switch {
	case errors.As(err, &ae) && ae.Code == 429:
		return OutcomeRateLimited
	case errors.As(err, &ae) && ae.Code == 500:
		return OutcomeErr500
	case errors.As(err, &ae) && ae.Code == 503:
		return OutcomeErr503
	case err != nil:
		return OutcomeMalformed
	case resp.PromptFeedback != nil:
		return OutcomeBlockPrompt
	case resp.Candidates[0].FinishReason == genai.FinishReasonSafety:
		return OutcomeBlockCandidate
	case resp.Candidates[0].FinishReason == genai.FinishReasonMaxTokens:
		return OutcomeMaxTokens
	}
	return OutcomeOK
}

// workload sends calls per item for items items from workers goroutines,
// each worker owning its items and calling each item's calls in sequence,
// and returns what the client saw per item and call.
func workload(t *testing.T, url string, workers, items, calls int) map[string][]Outcome {
	t.Helper()
	c := newClient(t, url, DefaultAPIKey)
	var mu sync.Mutex
	seen := make(map[string][]Outcome)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < items; i += workers {
				text := fmt.Sprintf("feedback %d: the checkout button is broken", i)
				for range calls {
					resp, err := generate(context.Background(), c, "gemini-2.5-flash", text)
					o := outcomeOf(resp, err)
					mu.Lock()
					seen[text] = append(seen[text], o)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return seen
}

func TestServer_StatsUnderConcurrency(t *testing.T) {
	const workers, items, calls = 16, 64, 4
	faults := Faults{Err500: 0.1, Err503: 0.1, Malformed: 0.05, BlockPrompt: 0.05, BlockCandidate: 0.05, MaxTokens: 0.05}
	s, url := startServer(t, Config{RPM: 150, Faults: faults, Seed: 7})
	seen := workload(t, url, workers, items, calls)

	clientCounts := make(map[Outcome]int64)
	for _, os := range seen {
		for _, o := range os {
			clientCounts[o]++
		}
	}
	st := s.Stats()
	if st.Calls != items*calls {
		t.Errorf("calls %d, want %d", st.Calls, items*calls)
	}
	var sum int64
	for o, n := range st.Outcomes {
		sum += n
		if n != clientCounts[o] {
			t.Errorf("outcome %s: server %d, client saw %d", o, n, clientCounts[o])
		}
	}
	if sum != st.Calls {
		t.Errorf("outcomes sum to %d, calls %d", sum, st.Calls)
	}
	if st.AdmittedRequests != 150 || st.Outcomes[OutcomeRateLimited] != items*calls-150 {
		t.Errorf("admitted %d, rate limited %d; want exactly the RPM admitted", st.AdmittedRequests, st.Outcomes[OutcomeRateLimited])
	}
	var itemCalls, itemOK, billed int64
	for text, os := range seen {
		it, ok := st.Items[ItemHash(text)]
		if !ok || it.Calls != int64(len(os)) {
			t.Errorf("item %q: stats %+v, client made %d calls", text, it, len(os))
		}
		itemCalls += it.Calls
		itemOK += it.OK
		billed += it.BilledTokens
	}
	if itemCalls != st.Calls || itemOK != st.Outcomes[OutcomeOK] || billed <= 0 {
		t.Errorf("items sum to %d calls %d ok %d billed; totals %d calls %d ok", itemCalls, itemOK, billed, st.Calls, st.Outcomes[OutcomeOK])
	}
	if st.PeakInFlight < 1 || st.PeakInFlight > workers || st.InFlight != 0 {
		t.Errorf("peak %d in flight %d", st.PeakInFlight, st.InFlight)
	}
	var tl Bucket
	for _, b := range st.Timeline {
		tl.Admitted += b.Admitted
		tl.OK += b.OK
		tl.RateLimited += b.RateLimited
	}
	if tl.Admitted != st.AdmittedRequests || tl.OK != st.Outcomes[OutcomeOK] || tl.RateLimited != st.Outcomes[OutcomeRateLimited] {
		t.Errorf("timeline sums %+v", tl)
	}
}

func TestServer_FaultsRepeat(t *testing.T) {
	faults := Faults{Err500: 0.2, Err503: 0.2, BlockCandidate: 0.1, MaxTokens: 0.1}
	run := func(seed int64, workers int) map[string][]Outcome {
		_, url := startServer(t, Config{Faults: faults, Seed: seed})
		return workload(t, url, workers, 24, 5)
	}
	a, b := run(1, 8), run(1, 3)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("same seed, different interleaving: outcomes differ\n%v\n%v", a, b)
	}
	if c := run(2, 8); reflect.DeepEqual(a, c) {
		t.Errorf("another seed gave the very same outcomes")
	}
}

func TestServer_MaxConcurrent(t *testing.T) {
	s, url := startServer(t, Config{MaxConcurrent: 1, Faults: Faults{Hang: 1}})
	c := newClient(t, url, DefaultAPIKey)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := generate(ctx, c, "gemini-2.5-flash", "first")
		done <- err
	}()
	waitFor(t, func() bool { return s.Stats().Outcomes[OutcomeHang] == 1 })
	_, err := generate(context.Background(), c, "gemini-2.5-flash", "second")
	var ae genai.APIError
	if !errors.As(err, &ae) || ae.Code != 503 || ae.Message != "The model is overloaded. Please try again later." {
		t.Errorf("want 503 overloaded, got %v", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("hung call: %v", err)
	}
	st := s.Stats()
	if st.Outcomes[OutcomeOverloaded] != 1 || st.AdmittedRequests != 1 || st.PeakInFlight != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestServer_CloseReleasesHungRequests(t *testing.T) {
	s := New(Config{Faults: Faults{Hang: 1}})
	url, err := s.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, url, DefaultAPIKey)
	const n = 4
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := generate(context.Background(), c, "gemini-2.5-flash", fmt.Sprint("item ", i))
			errs <- err
		}()
	}
	waitFor(t, func() bool { return s.Stats().Outcomes[OutcomeHang] == n })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err == nil {
			t.Error("hung call returned no error after Close")
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Start("127.0.0.1:0"); err == nil {
		t.Error("Start after Close succeeded")
	}
}

func TestServer_StatsEndpoint(t *testing.T) {
	s, url := startServer(t, Config{RPM: 1})
	c := newClient(t, url, DefaultAPIKey)
	for range 2 {
		generate(context.Background(), c, "gemini-2.5-flash", "hello") //nolint:errcheck // counted below
	}
	resp, err := http.Get(url + "/_sim/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	var got Stats
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	want := s.Stats()
	got.Started, want.Started = time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GET /_sim/stats = %+v\nStats() = %+v", got, want)
	}
	for _, key := range []string{`"outcomes"`, `"rate_limited":1`, `"billed_tokens"`, `"peak_in_flight"`, `"timeline"`} {
		if !strings.Contains(buf.String(), key) {
			t.Errorf("stats JSON lacks %s: %s", key, buf.String())
		}
	}
}

// waitFor polls cond until it holds, failing the test after a generous
// deadline; it is for waiting on server state, not for timing assertions.
func waitFor(tb testing.TB, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatal("condition not reached in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestServer_Latency(t *testing.T) {
	t.Run("model", func(t *testing.T) {
		s := New(Config{Latency: Latency{Base: time.Second, PerToken: time.Millisecond, Jitter: 100 * time.Millisecond}})
		var last time.Duration
		varied := false
		for n := range int64(50) {
			c := call{item: [32]byte{1}, n: n, promptTokens: 10}
			s.decide(&c, "hi", `{"label":"other"}`, nil, 0)
			lo, hi := time.Second+10*time.Millisecond, time.Second+110*time.Millisecond
			if c.latency < lo || c.latency > hi {
				t.Fatalf("latency %v outside [%v, %v]", c.latency, lo, hi)
			}
			again := c
			s.decide(&again, "hi", `{"label":"other"}`, nil, 0)
			if again.latency != c.latency {
				t.Fatalf("latency not repeatable: %v then %v", c.latency, again.latency)
			}
			varied = varied || (n > 0 && c.latency != last)
			last = c.latency
		}
		if !varied {
			t.Error("jitter never varied")
		}
	})
	t.Run("client gives up", func(t *testing.T) {
		s, url := startServer(t, Config{Latency: Latency{Base: time.Hour}})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := generate(ctx, newClient(t, url, DefaultAPIKey), "gemini-2.5-flash", "hi")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("want a deadline error, got %v", err)
		}
		// The handler stops waiting once the client is gone.
		waitFor(t, func() bool { return s.Stats().InFlight == 0 })
		if got := s.Stats().Outcomes[OutcomeOK]; got != 1 {
			t.Errorf("ok outcomes %d: a call is counted when admitted", got)
		}
	})
}

// TestServer_AbandonedCalls: an admitted call whose client goes away
// before the answer is the item's abandoned call (and still its OK call,
// as the real API may bill it); a served call and a hang are not.
func TestServer_AbandonedCalls(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       Config
		cancel    bool // the client gives up once the call is admitted
		abandoned int64
	}{
		{"gone before a slow answer", Config{Latency: Latency{Base: time.Hour}}, true, 1},
		{"answered", Config{}, false, 0},
		{"hang given up", Config{Faults: Faults{Hang: 1}}, true, 0},
		// Not billed, so not subtracted from the item's OK calls (an
		// abandoned 500 beside one answer read as no answer at all).
		{"gone before a slow 500", Config{Latency: Latency{Base: time.Hour}, Faults: Faults{Err500: 1}}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, url := startServer(t, tc.cfg)
			c := newClient(t, url, DefaultAPIKey)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := generate(ctx, c, "gemini-2.5-flash", "an item")
				done <- err
			}()
			waitFor(t, func() bool { return s.Stats().AdmittedRequests == 1 })
			if tc.cancel {
				cancel()
			}
			err := <-done
			if tc.cancel != (err != nil) {
				t.Fatalf("call: %v", err)
			}
			waitFor(t, func() bool { return s.Stats().InFlight == 0 })
			st := s.Stats()
			it := st.Items[ItemHash("an item")]
			if st.Abandoned != tc.abandoned || it.Abandoned != tc.abandoned {
				t.Errorf("abandoned %d, item's %d; want %d", st.Abandoned, it.Abandoned, tc.abandoned)
			}
			if tc.abandoned > 0 && it.OK != 1 {
				t.Errorf("an abandoned call's OK count %d, want 1 (it was admitted and may be billed)", it.OK)
			}
		})
	}
}
