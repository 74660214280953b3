package stages

import (
	"context"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

func TestPromptLayout(t *testing.T) {
	_, url, _ := simServer(t, geminisim.Config{})
	ep := Endpoint{Backend: BackendGemini, APIKey: geminisim.DefaultAPIKey, BaseURL: url}
	for _, tc := range []struct {
		name, template      string
		wantShared, wantAft string
	}{
		{"default: the instruction, then the item", "", DefaultSystemInstruction([]string{"bug", "other"}), ""},
		{"shared text before the item", "Definitions first.\nReview: {{.Text}}", DefaultSystemInstruction([]string{"bug", "other"}) + "Definitions first.\nReview: ", ""},
		{"the item first", "{{.Text}} then definitions", DefaultSystemInstruction([]string{"bug", "other"}), " then definitions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newTestLLM(t, LLMConfig{Name: "label", Endpoint: ep, Labels: []string{"bug", "other"}, PromptTemplate: tc.template})
			if got := l.PromptLayout(); got.Shared != tc.wantShared || got.After != tc.wantAft {
				t.Errorf("layout %+v", got)
			}
		})
	}
	c := newTestClassify(t, url, func(c *ClassifyConfig) { c.APIKey = geminisim.DefaultAPIKey })
	if got := c.PromptLayout(); got.Shared != DefaultSystemInstruction(DefaultLabels) || got.After != "" {
		t.Errorf("classify layout %+v: want the system instruction first and the item last", got)
	}
}

func TestImplicitCacheMinTokens(t *testing.T) {
	for model, want := range map[string]int{"gemini-2.5-flash": 1024, "gemini-2.5-flash-lite": 1024, "models/gemini-2.5-pro": 4096, "gemini-3-pro-preview": 4096} {
		if got := ImplicitCacheMinTokens(model); got != want {
			t.Errorf("%s: %d, want %d", model, got, want)
		}
	}
	// 1,000 tokens of gemini-2.5-flash input: $0.30/M, cached at a tenth.
	if got := ImplicitCacheSavingUSD("gemini-2.5-flash", 1000); got < 0.00026999 || got > 0.00027001 {
		t.Errorf("saving %v, want 0.00027", got)
	}
}

// TestLLM_ChangedPrefixNotCached: a call whose shared prefix differs
// from the earlier calls' (an edited system instruction) is not billed
// as cached, and one repeating an earlier prefix is; our price of every
// call is the simulator's bill.
func TestLLM_ChangedPrefixNotCached(t *testing.T) {
	sim, url, _ := simServer(t, geminisim.Config{})
	ep := Endpoint{Backend: BackendGemini, APIKey: geminisim.DefaultAPIKey, BaseURL: url}
	defs := strings.Repeat("Label definitions and worked examples shared by every item. ", 100)
	first := newTestLLM(t, LLMConfig{Name: "label", Endpoint: ep, Labels: []string{"bug", "other"}, SystemInstruction: defs})
	edited := newTestLLM(t, LLMConfig{Name: "label", Endpoint: ep, Labels: []string{"bug", "other"}, SystemInstruction: "Edited. " + defs})
	price, err := StagePrice(PriceConfig{Model: first.Model()}, true)
	if err != nil {
		t.Fatal(err)
	}
	var ours float64
	for i, tc := range []struct {
		stage  *LLM
		text   string
		cached bool
	}{
		{first, "the app crashes", false},  // fills the cache
		{edited, "nice app", false},        // a new prefix from its first character
		{first, "it lags on start", true},  // the first prefix again
		{edited, "too expensive", true},    // the edited one, now seen
		{first, "login fails twice", true}, // still cached
	} {
		res, err := tc.stage.Process(context.Background(), testItem("r"+tc.text, tc.text))
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Usage.CachedTokens > 0; got != tc.cached {
			t.Errorf("call %d: %d cached tokens, want cached %v", i, res.Usage.CachedTokens, tc.cached)
		}
		ours += price.Cost(res.Usage)
	}
	if bill := float64(sim.Stats().BillNanoUSD()) / 1e9; bill == 0 || ours-bill > 5e-9 || bill-ours > 5e-9 {
		t.Errorf("our cost %.9f, the simulator's bill %.9f", ours, bill)
	}
}
