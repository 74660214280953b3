package geminisim

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/genai"
)

// rawGenerate sends a generateContent body straight to the handler.
func rawGenerate(tb testing.TB, s *Server, body string) (code int, hdr http.Header, resp map[string]any) {
	tb.Helper()
	req := httptest.NewRequest(http.MethodPost, "/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(body))
	req.Header.Set("X-Goog-Api-Key", DefaultAPIKey)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		tb.Fatalf("answer %q: %v", rec.Body.String(), err)
	}
	return rec.Code, rec.Header(), resp
}

// tierBody is a request body asking for tier (omitted when empty) with a
// system instruction and a user text.
func tierBody(tb testing.TB, tier, system, text string) string {
	tb.Helper()
	b := map[string]any{
		"contents":          []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": text}}}},
		"systemInstruction": map[string]any{"parts": []any{map[string]any{"text": system}}},
	}
	if tier != "" {
		b["serviceTier"] = tier
	}
	return mustJSON(tb, b)
}

func TestServer_ServiceTier(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ask        genai.ServiceTier
		cfg        TierConfig
		wantServed Tier
	}{
		{"unset is standard", "", TierConfig{}, TierStandard},
		{"standard", genai.ServiceTierStandard, TierConfig{}, TierStandard},
		{"flex", genai.ServiceTierFlex, TierConfig{}, TierFlex},
		{"priority", genai.ServiceTierPriority, TierConfig{}, TierPriority},
		{"priority served as standard", genai.ServiceTierPriority, TierConfig{PriorityAsStandard: 1}, TierStandard},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, url := startServer(t, Config{Tiers: tc.cfg})
			c := newClient(t, url, DefaultAPIKey)
			cfg := classifyConfig()
			cfg.ServiceTier = tc.ask
			resp, err := c.Models.GenerateContent(context.Background(), "gemini-2.5-flash", genai.Text("the app crashes"), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.SDKHTTPResponse.Headers.Get(TierHeader); got != string(tc.wantServed) {
				t.Errorf("%s header %q, want %q", TierHeader, got, tc.wantServed)
			}
			st := s.Stats()
			asked := Tier(tc.ask)
			if asked == "" {
				asked = TierStandard
			}
			if st.Tiers[asked].Asked != 1 {
				t.Errorf("tier %s asked %d, want 1 (%+v)", asked, st.Tiers[asked].Asked, st.Tiers)
			}
			served := st.Tiers[tc.wantServed]
			u := resp.UsageMetadata
			want := BillNanoUSD("gemini-2.5-flash", tc.wantServed, int(u.PromptTokenCount), 0, int(u.CandidatesTokenCount))
			if served.Served != 1 || served.CostNanoUSD != want || st.BillNanoUSD() != want || want == 0 {
				t.Errorf("served %+v, bill %d, want one call billed %d", served, st.BillNanoUSD(), want)
			}
		})
	}
}

func TestBillNanoUSD(t *testing.T) {
	std := BillNanoUSD("gemini-2.5-flash", TierStandard, 1_000_000, 0, 1_000_000)
	if std != 2_800_000_000 {
		t.Errorf("standard bill %d, want 2.80 USD", std)
	}
	for _, tc := range []struct {
		tier Tier
		want int64
	}{{TierFlex, 1_400_000_000}, {TierPriority, 5_040_000_000}} {
		if got := BillNanoUSD("gemini-2.5-flash", tc.tier, 1_000_000, 0, 1_000_000); got != tc.want {
			t.Errorf("%s bill %d, want %d", tc.tier, got, tc.want)
		}
	}
	// Cached input at a tenth of input: 1M prompt tokens all cached.
	if got := BillNanoUSD("models/gemini-2.5-flash", TierStandard, 1_000_000, 1_000_000, 0); got != 30_000_000 {
		t.Errorf("cached bill %d, want 0.03 USD", got)
	}
	if got := BillNanoUSD("unknown-model", TierStandard, 1000, 0, 1000); got != 0 {
		t.Errorf("unknown model billed %d", got)
	}
}

func TestServer_FlexShed(t *testing.T) {
	for _, tc := range []struct {
		answer     ShedAnswer
		code       int
		status     string
		retryDelay string
	}{
		{"", 503, "UNAVAILABLE", ""},
		{Shed503, 503, "UNAVAILABLE", ""},
		{Shed429, 429, "RESOURCE_EXHAUSTED", ""},
		{Shed429Details, 429, "RESOURCE_EXHAUSTED", "2s"},
	} {
		t.Run(string(tc.answer), func(t *testing.T) {
			s := New(Config{RPM: 1, Tiers: TierConfig{FlexShed: 1, ShedAnswer: tc.answer, ShedRetryDelay: 2 * time.Second}})
			for range 3 {
				code, hdr, body := rawGenerate(t, s, tierBody(t, "flex", "sys", "the app crashes"))
				e, _ := body["error"].(map[string]any)
				if code != tc.code || e["status"] != tc.status || hdr.Get(TierHeader) != "" {
					t.Fatalf("shed answer %d %v, header %q; want %d %s", code, body, hdr.Get(TierHeader), tc.code, tc.status)
				}
				_, byType := details(body)
				if rd, _ := byType["RetryInfo"]["retryDelay"].(string); rd != tc.retryDelay {
					t.Errorf("retryDelay %q, want %q", rd, tc.retryDelay)
				}
				if _, ok := byType["QuotaFailure"]; ok {
					t.Errorf("a shed names a quota: %v", body)
				}
			}
			// Shed calls consumed no quota: the standard call is admitted.
			if code, _, _ := rawGenerate(t, s, tierBody(t, "standard", "sys", "the app crashes")); code != 200 {
				t.Errorf("standard call after sheds: %d", code)
			}
			st := s.Stats()
			if st.Outcomes[OutcomeShed] != 3 || st.Tiers[TierFlex].Shed != 3 || st.Tiers[TierFlex].Served != 0 || st.AdmittedRequests != 1 {
				t.Errorf("stats: outcomes %v tiers %+v admitted %d", st.Outcomes, st.Tiers, st.AdmittedRequests)
			}
		})
	}
}

func TestServer_FlexShedFraction(t *testing.T) {
	s := New(Config{Seed: 7, Tiers: TierConfig{FlexShed: 1.0 / 3}})
	const n = 600
	for i := range n {
		rawGenerate(t, s, tierBody(t, "flex", "sys", strings.Repeat("x", i+1)))
	}
	st := s.Stats().Tiers[TierFlex]
	// A binomial(600, 1/3) draw is within 200±60 with near certainty.
	if st.Shed < 140 || st.Shed > 260 || st.Shed+st.Served != n {
		t.Errorf("flex shed %d served %d of %d, want about a third shed", st.Shed, st.Served, n)
	}
}

func TestServer_FlexCapacity(t *testing.T) {
	s, url := startServer(t, Config{Tiers: TierConfig{FlexCapacity: 1, FlexLatency: Latency{Base: time.Hour}}})
	c := newClient(t, url, DefaultAPIKey)
	flex := classifyConfig()
	flex.ServiceTier = genai.ServiceTierFlex
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Models.GenerateContent(ctx, "gemini-2.5-flash", genai.Text("first"), flex)
		done <- err
	}()
	waitFor(t, func() bool { return s.Stats().FlexInFlight == 1 && s.Stats().AdmittedRequests == 1 })
	_, err := c.Models.GenerateContent(context.Background(), "gemini-2.5-flash", genai.Text("second"), flex)
	var ae genai.APIError
	if !errors.As(err, &ae) || ae.Code != 503 {
		t.Errorf("flex past capacity: want 503, got %v", err)
	}
	// Standard is not flex's capacity, nor its latency.
	resp, err := c.Models.GenerateContent(context.Background(), "gemini-2.5-flash", genai.Text("third"), classifyConfig())
	if err != nil || resp.SDKHTTPResponse.Headers.Get(TierHeader) != "standard" {
		t.Errorf("standard call while flex is full: %v", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("flex call: %v", err)
	}
	st := s.Stats()
	// The abandoned flex call was never answered: nothing billed on flex.
	if st.Tiers[TierFlex].Shed != 1 || st.Tiers[TierFlex].Served != 0 || st.Tiers[TierStandard].Served != 1 {
		t.Errorf("tiers %+v", st.Tiers)
	}
}

func TestServer_ImplicitCache(t *testing.T) {
	shared := strings.Repeat("Label definitions and examples. ", 160) // 5,120 runes: 1,280 tokens
	cachedOf := func(body map[string]any) int {
		u, _ := body["usageMetadata"].(map[string]any)
		n, _ := u["cachedContentTokenCount"].(float64)
		return int(n)
	}
	t.Run("a repeated prefix is cached, in whole chunks", func(t *testing.T) {
		s := New(Config{})
		_, _, first := rawGenerate(t, s, tierBody(t, "", shared, "A: the app crashes"))
		_, _, second := rawGenerate(t, s, tierBody(t, "", shared, "B: too expensive"))
		if got := cachedOf(first); got != 0 {
			t.Errorf("first call cached %d tokens", got)
		}
		// 5,120 shared runes hold ten 512-rune chunks: 1,280 tokens.
		if got := cachedOf(second); got != 1280 {
			t.Errorf("second call cached %d tokens, want 1280", got)
		}
		st := s.Stats().Tiers[TierStandard]
		if st.CachedTokens != 1280 {
			t.Errorf("cached tokens billed %d", st.CachedTokens)
		}
	})
	t.Run("a changed shared prefix is not cached", func(t *testing.T) {
		s := New(Config{})
		rawGenerate(t, s, tierBody(t, "", shared, "A: the app crashes"))
		_, _, b := rawGenerate(t, s, tierBody(t, "", "Today is Friday. "+shared, "B: too expensive"))
		if got := cachedOf(b); got != 0 {
			t.Errorf("changed prefix cached %d tokens", got)
		}
	})
	t.Run("a prefix under the minimum is not cached", func(t *testing.T) {
		s := New(Config{Cache: CacheConfig{MinTokens: 2048}})
		rawGenerate(t, s, tierBody(t, "", shared, "A: the app crashes"))
		_, _, b := rawGenerate(t, s, tierBody(t, "", shared, "B: too expensive"))
		if got := cachedOf(b); got != 0 {
			t.Errorf("cached %d tokens under a 2048 minimum", got)
		}
	})
	t.Run("a prefix older than the TTL is not cached", func(t *testing.T) {
		clk := newFakeClock()
		s := New(Config{Now: clk.Now, Cache: CacheConfig{TTL: time.Minute}})
		rawGenerate(t, s, tierBody(t, "", shared, "A: the app crashes"))
		clk.Set(2 * time.Minute)
		_, _, b := rawGenerate(t, s, tierBody(t, "", shared, "B: too expensive"))
		if got := cachedOf(b); got != 0 {
			t.Errorf("cached %d tokens after the TTL", got)
		}
	})
	t.Run("off", func(t *testing.T) {
		s := New(Config{Cache: CacheConfig{Off: true}})
		rawGenerate(t, s, tierBody(t, "", shared, "A"))
		_, _, b := rawGenerate(t, s, tierBody(t, "", shared, "B"))
		if got := cachedOf(b); got != 0 {
			t.Errorf("cache off, cached %d tokens", got)
		}
	})
}

func TestServer_UnknownServiceTier(t *testing.T) {
	s := New(Config{})
	code, _, body := rawGenerate(t, s, tierBody(t, "cheapest", "sys", "text"))
	if code != 400 || !strings.Contains(mustJSON(t, body), "service_tier") {
		t.Errorf("unknown tier: %d %v", code, body)
	}
}

func TestConfig_ValidateTiers(t *testing.T) {
	for _, tc := range []TierConfig{{ShedAnswer: "418"}, {FlexShed: 1.5}, {PriorityAsStandard: -0.1}, {FlexCapacity: -1}} {
		if err := (Config{Tiers: tc}).Validate(); err == nil {
			t.Errorf("%+v: no error", tc)
		}
	}
}
