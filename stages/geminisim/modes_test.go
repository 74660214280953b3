package geminisim

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/genai"
)

// rawCall sends one generateContent request for text straight to the
// handler, naming the item in ItemHeader when id is set, and decodes the
// answer.
func rawCall(tb testing.TB, s *Server, id, text string) (code int, body map[string]any) {
	tb.Helper()
	req := httptest.NewRequest(http.MethodPost, "/v1beta/models/gemini-2.5-flash:generateContent",
		strings.NewReader(`{"contents":[{"role":"user","parts":[{"text":`+mustJSON(tb, text)+`}]}]}`))
	req.Header.Set("X-Goog-Api-Key", DefaultAPIKey)
	if id != "" {
		req.Header.Set(ItemHeader, id)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		tb.Fatalf("answer %q: %v", rec.Body.String(), err)
	}
	return rec.Code, body
}

func mustJSON(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// details indexes an error body's details by their @type suffix.
func details(body map[string]any) (msg string, byType map[string]map[string]any) {
	e, _ := body["error"].(map[string]any)
	msg, _ = e["message"].(string)
	byType = map[string]map[string]any{}
	ds, _ := e["details"].([]any)
	for _, d := range ds {
		d := d.(map[string]any)
		t := d["@type"].(string)
		byType[t[strings.LastIndexByte(t, '.')+1:]] = d
	}
	return msg, byType
}

func TestServer_RateLimitBodies(t *testing.T) {
	tests := []struct {
		name        string
		cfg         Config
		retry       string // the retryDelay expected, "" for none
		ids         []string
		values      []any // quotaValue of each violation, nil where absent
		msgPrefix   string
		noQuotaFail bool
	}{
		{
			name:      "exact, full",
			cfg:       Config{RPM: 1, Window: time.Minute},
			retry:     "30s",
			ids:       []string{"GenerateRequestsPerMinutePerProjectPerModel"},
			values:    []any{"1"},
			msgPrefix: "You exceeded your current quota",
		},
		{
			name:      "no quotaValue",
			cfg:       Config{RPM: 1, Window: time.Minute, QuotaFailure: QuotaFailureNoValue},
			retry:     "30s",
			ids:       []string{"GenerateRequestsPerMinutePerProjectPerModel"},
			values:    []any{nil},
			msgPrefix: "You exceeded your current quota",
		},
		{
			name:      "no RetryInfo",
			cfg:       Config{RPM: 1, Window: time.Minute, RetryInfo: RetryAbsent},
			ids:       []string{"GenerateRequestsPerMinutePerProjectPerModel"},
			values:    []any{"1"},
			msgPrefix: "You exceeded your current quota",
		},
		{
			name:        "Vertex style: no QuotaFailure, no RetryInfo",
			cfg:         Config{RPM: 1, Window: time.Minute, RetryInfo: RetryAbsent, QuotaFailure: QuotaFailureAbsent},
			msgPrefix:   "Resource exhausted, please try again later.",
			noQuotaFail: true,
		},
		{
			name:      "several violations at once",
			cfg:       Config{RPM: 1, TPM: 1, RPD: 1, Window: time.Minute, Day: time.Hour},
			retry:     "3570s",
			ids:       []string{"GenerateRequestsPerMinutePerProjectPerModel", "GenerateContentInputTokensPerModelPerMinute", "GenerateRequestsPerDayPerProjectPerModel"},
			values:    []any{"1", "1", "24"}, // 1 per 1 h "day" is 24 per real day
			msgPrefix: "You exceeded your current quota",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			tt.cfg.Now = clk.Now
			s := New(tt.cfg)
			if code, _ := rawCall(t, s, "", "abcd"); code != http.StatusOK {
				t.Fatalf("first call: %d", code)
			}
			clk.Set(30 * time.Second)
			code, body := rawCall(t, s, "", "abcd")
			if code != http.StatusTooManyRequests {
				t.Fatalf("second call: %d %v", code, body)
			}
			msg, d := details(body)
			if !strings.HasPrefix(msg, tt.msgPrefix) {
				t.Errorf("message %q, want prefix %q", msg, tt.msgPrefix)
			}
			ri, hasRetry := d["RetryInfo"]
			switch {
			case tt.retry == "" && hasRetry:
				t.Errorf("RetryInfo %v, want none", ri)
			case tt.retry != "" && (!hasRetry || ri["retryDelay"] != tt.retry):
				t.Errorf("RetryInfo %v, want %s", ri, tt.retry)
			}
			if tt.retry == "" && strings.Contains(msg, "Please retry in") {
				t.Errorf("message names a delay without RetryInfo: %q", msg)
			}
			qf, hasQF := d["QuotaFailure"]
			if hasQF == tt.noQuotaFail {
				t.Fatalf("QuotaFailure %v", qf)
			}
			if tt.noQuotaFail {
				return
			}
			var ids, values []any
			for _, v := range qf["violations"].([]any) {
				v := v.(map[string]any)
				ids = append(ids, v["quotaId"])
				values = append(values, v["quotaValue"])
			}
			wantIDs := make([]any, len(tt.ids))
			for i, id := range tt.ids {
				wantIDs[i] = id
			}
			if !reflect.DeepEqual(ids, wantIDs) || !reflect.DeepEqual(values, tt.values) {
				t.Errorf("violations %v %v, want %v %v", ids, values, wantIDs, tt.values)
			}
		})
	}
}

func TestServer_CoarseRetryDelay(t *testing.T) {
	clk := newFakeClock()
	s := New(Config{RPM: 1, Window: time.Minute, RetryInfo: RetryCoarse, Now: clk.Now, Seed: 7})
	rawCall(t, s, "", "first")
	later := false
	for i := range 20 {
		clk.Set(time.Duration(10+2*i) * time.Second)
		_, body := rawCall(t, s, "", "second")
		_, d := details(body)
		delay, err := time.ParseDuration(d["RetryInfo"]["retryDelay"].(string))
		if err != nil {
			t.Fatal(err)
		}
		exact := time.Minute - clk.Now().Sub(clk.start)
		if delay%time.Second != 0 || delay < exact || delay > exact+31*time.Second || delay > 59*time.Second {
			t.Fatalf("coarse delay %v for an exact %v: want whole seconds in [exact, exact+30s], under a minute", delay, exact)
		}
		later = later || delay > exact+time.Second
	}
	if !later {
		t.Error("a coarse delay was never later than needed")
	}
}

func TestServer_ConcurrencyRefusals(t *testing.T) {
	tests := []struct {
		name    string
		refusal ConcurrencyRefusal
		code    int
		msg     string
		outcome Outcome
	}{
		{"503 overloaded", RefuseOverloaded, 503, "The model is overloaded. Please try again later.", OutcomeOverloaded},
		{"bare 429", RefuseBare429, 429, "Resource has been exhausted (e.g. check quota).", OutcomeCapacity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, url := startServer(t, Config{MaxConcurrent: 1, ConcurrencyRefusal: tt.refusal, Faults: Faults{Hang: 1}})
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
			if !errors.As(err, &ae) || ae.Code != tt.code || ae.Message != tt.msg || len(ae.Details) != 0 {
				t.Errorf("got %v (details %v), want %d %q without details", err, ae.Details, tt.code, tt.msg)
			}
			cancel()
			<-done
			if st := s.Stats(); st.Outcomes[tt.outcome] != 1 || st.AdmittedRequests != 1 {
				t.Errorf("stats %+v", st.Outcomes)
			}
		})
	}
}

func TestServer_OverloadBursts(t *testing.T) {
	clk := newFakeClock()
	s := New(Config{RPM: 100, Overload: Overload{Every: 10 * time.Second, For: time.Second}, Now: clk.Now})
	tests := []struct {
		at   time.Duration
		code int
	}{{0, 200}, {10 * time.Second, 503}, {10*time.Second + 999*time.Millisecond, 503}, {11 * time.Second, 200}}
	for _, tt := range tests {
		clk.Set(tt.at)
		code, body := rawCall(t, s, "", "hello")
		if code != tt.code {
			t.Errorf("at %v: %d %v, want %d", tt.at, code, body, tt.code)
		}
	}
	st := s.Stats()
	if st.Outcomes[OutcomeOverloadBurst] != 2 || st.AdmittedRequests != 2 {
		t.Errorf("a burst's 503s must not consume quota: %+v", st.Outcomes)
	}
}

// TestServer_Credits: the calls the credits pay for are answered; every
// call after them gets the API's 429 for depleted prepayment credits,
// with no details and no quota consumed.
func TestServer_Credits(t *testing.T) {
	s := New(Config{RPM: 100, Credits: 2})
	want := []int{200, 200, 429, 429}
	for i, code := range want {
		got, body := rawCall(t, s, "", fmt.Sprintf("hello %d", i))
		if got != code {
			t.Fatalf("call %d: %d %v, want %d", i+1, got, body, code)
		}
		if code == 429 && !strings.Contains(fmt.Sprint(body), "Your prepayment credits are depleted") {
			t.Errorf("call %d: %v, want the depleted-credits message", i+1, body)
		}
		if code == 429 && strings.Contains(fmt.Sprint(body), "details") {
			t.Errorf("call %d: %v, want no details", i+1, body)
		}
	}
	if st := s.Stats(); st.Outcomes[OutcomeNoCredits] != 2 || st.AdmittedRequests != 2 || st.Outcomes[OutcomeOK] != 2 {
		t.Errorf("stats %+v, admitted %d", st.Outcomes, st.AdmittedRequests)
	}
	if err := (Config{Credits: -1}).Validate(); err == nil {
		t.Error("Credits -1 validated")
	}
}

func TestServer_ItemKey(t *testing.T) {
	s := New(Config{})
	// Two items with the same text are two items; one item is one key
	// whatever its text.
	rawCall(t, s, "r1", "same text")
	rawCall(t, s, "r2", "same text")
	rawCall(t, s, "r2", "edited text")
	rawCall(t, s, "", "no id")
	rawCall(t, s, "", "no id")
	rawCall(t, s, url.QueryEscape("a b/\n"), "escaped")
	st := s.Stats()
	want := map[string]int64{"id:r1": 1, "id:r2": 2, ItemHash("no id"): 2, "id:a b/\n": 1}
	got := map[string]int64{}
	for k, v := range st.Items {
		got[k] = v.Calls
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("items %v, want %v", got, want)
	}
	if st.Items["id:r1"].PromptTokens != 3 {
		t.Errorf("prompt tokens %d, want 3", st.Items["id:r1"].PromptTokens)
	}
}

func TestServer_LatencyShapes(t *testing.T) {
	tests := []struct {
		name    string
		lat     Latency
		others  int
		lo, hi  time.Duration
		spreads bool
	}{
		{"heavy tail, capped", Latency{Base: 50 * time.Millisecond, Tail: 1.2, Max: 10 * time.Second}, 0, 50 * time.Millisecond, 10 * time.Second, true},
		{"grows with load", Latency{Base: 100 * time.Millisecond, PerInFlight: 10 * time.Millisecond}, 20, 300 * time.Millisecond, 300 * time.Millisecond, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(Config{Latency: tt.lat})
			var longest time.Duration
			for n := range int64(2000) {
				c := call{item: [32]byte{2}, n: n}
				d := s.latency(&c, tt.others)
				if d < tt.lo || d > tt.hi {
					t.Fatalf("latency %v outside [%v, %v]", d, tt.lo, tt.hi)
				}
				longest = max(longest, d)
			}
			if tt.spreads && longest < 2*time.Second {
				t.Errorf("longest of 2000 draws %v: no heavy tail", longest)
			}
		})
	}
}

func TestCallLatency(t *testing.T) {
	cfg := Config{Latency: Latency{Base: 50 * time.Millisecond, Tail: 1.2, Jitter: 10 * time.Millisecond, PerInFlight: time.Millisecond}, Seed: 3}
	s := New(cfg)
	tests := []struct {
		name string
		key  string
		item [32]byte
	}{
		{"named item", ItemID("r7"), sha256Sum("item\x00r7")},
		{"hashed text", ItemHash("some text"), sha256Sum("some text")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := call{item: tt.item, n: 2, promptTokens: 9}
			want := s.latency(&c, 4)
			got, ok := CallLatency(cfg, tt.key, 2, 9, 4)
			if !ok || got != want {
				t.Errorf("CallLatency = %v %v, want the server's %v", got, ok, want)
			}
		})
	}
	if _, ok := CallLatency(cfg, "not-a-key", 0, 1, 0); ok {
		t.Error("a malformed key was accepted")
	}
}

func sha256Sum(s string) [32]byte { return sha256.Sum256([]byte(s)) }

func TestServer_CountRefusedDelay(t *testing.T) {
	clk := newFakeClock()
	s := New(Config{RPM: 10, Window: time.Second, QuotaModel: TokenBucket, BurstRequests: 1, CountRefused: true, Now: clk.Now})
	rawCall(t, s, "a", "x")
	// Each refusal digs the bucket deeper, and the delay it is told says so.
	for i, want := range []string{"0.200s", "0.300s", "0.400s"} {
		_, body := rawCall(t, s, "a", "x")
		_, d := details(body)
		if got := d["RetryInfo"]["retryDelay"]; got != want {
			t.Errorf("refusal %d: retryDelay %v, want %s", i+1, got, want)
		}
	}
}
