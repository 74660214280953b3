package stages

import (
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestAskedTier: Classify and LLM name the tier they ask for, which a
// budget reserves at (pipeline.TierAsker); no tier is standard.
func TestAskedTier(t *testing.T) {
	_, url, _ := simServer(t, geminisim.Config{})
	ep := Endpoint{Backend: BackendGemini, APIKey: geminisim.DefaultAPIKey, BaseURL: url}
	for _, tc := range []struct {
		tier     string
		deadline time.Duration
		want     string
	}{
		{"", 0, TierStandard},
		{TierStandard, 0, TierStandard},
		{TierPriority, 0, TierPriority},
		{TierFlex, 0, TierFlex},
		{TierFlex, time.Hour, TierAuto}, // flex with a deadline is auto
		{TierAuto, 0, TierAuto},
	} {
		t.Run(tc.want+" "+tc.tier, func(t *testing.T) {
			if got := tierClassify(t, url, TierConfig{Tier: tc.tier, FlexDeadline: tc.deadline}).AskedTier(); got != tc.want {
				t.Errorf("classify asks %q, want %q", got, tc.want)
			}
			l := newTestLLM(t, LLMConfig{Name: "label", Endpoint: ep, Labels: []string{"bug", "other"}, Tier: TierConfig{Tier: tc.tier, FlexDeadline: tc.deadline}})
			if got := l.AskedTier(); got != tc.want {
				t.Errorf("llm asks %q, want %q", got, tc.want)
			}
		})
	}
}
