// This file holds the service tiers: which tier a call asks for, whether
// flex sheds it, which tier serves it, and what the served call is billed.

package geminisim

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Tier is a service tier as the REST body's "serviceTier" names it
// (genai's ServiceTier values) and as TierHeader reports it.
type Tier string

const (
	TierStandard Tier = "standard" // the default: full price, seconds
	TierFlex     Tier = "flex"     // half price, minutes, sheddable
	TierPriority Tier = "priority" // a premium, low latency; may be served as standard
)

// Tiers lists the tiers in the order stats show them.
var Tiers = []Tier{TierStandard, TierFlex, TierPriority}

// TierHeader is the response header that says which tier served a call,
// as the real API's does (genai: GenerateContentResponse.SDKHTTPResponse).
const TierHeader = "x-gemini-service-tier"

// requestTier maps the body's serviceTier to the tier asked for: absent,
// "unspecified" or an unknown value is standard (ok false for an unknown
// one, which the server refuses as the API refuses a bad enum).
func requestTier(s string) (t Tier, ok bool) {
	switch v := Tier(strings.ToLower(s)); v {
	case "", "unspecified", "service_tier_unspecified":
		return TierStandard, true
	case TierStandard, TierFlex, TierPriority:
		return v, true
	}
	return TierStandard, false
}

// ShedAnswer is how the flex tier refuses a call it sheds.
type ShedAnswer string

const (
	// Shed503 answers 503 UNAVAILABLE "The model is overloaded" (default).
	Shed503 ShedAnswer = "503"
	// Shed429 answers a bare 429 RESOURCE_EXHAUSTED with no details.
	Shed429 ShedAnswer = "429"
	// Shed429Details answers a 429 with a Help link and a RetryInfo, the
	// shape of a quota refusal, but naming no quota.
	Shed429Details ShedAnswer = "429-details"
)

// ShedAnswers lists the flex refusals, for flag help and validation.
var ShedAnswers = []ShedAnswer{Shed503, Shed429, Shed429Details}

// TierConfig configures the service tiers. The zero value serves every
// tier like standard, sheds nothing and never demotes priority.
type TierConfig struct {
	// FlexLatency replaces Config.Latency for calls served on flex (the
	// real target is 1-15 minutes; tests scale it down). All zero: the
	// standard latency.
	FlexLatency Latency
	// FlexCapacity, if > 0, is how many calls flex serves at once: a flex
	// call arriving while that many are in flight on flex is shed.
	FlexCapacity int
	// FlexShed is the fraction in [0, 1] of the other flex calls shed
	// anyway (spare capacity that comes and goes), drawn per (Seed, item,
	// call number).
	FlexShed float64
	// ShedAnswer is the refusal of a shed call; default Shed503. A shed
	// call is refused before the quota check: it consumes no quota.
	ShedAnswer ShedAnswer
	// ShedRetryDelay is the retryDelay a Shed429Details refusal carries;
	// default 1s.
	ShedRetryDelay time.Duration
	// PriorityAsStandard is the fraction in [0, 1] of priority calls
	// served (and billed) as standard, as the real API may.
	PriorityAsStandard float64
}

func (tc TierConfig) validate() error {
	if tc.ShedAnswer != "" && !slices.Contains(ShedAnswers, tc.ShedAnswer) {
		return fmt.Errorf("flex shed answer %q: want one of %v", tc.ShedAnswer, ShedAnswers)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"flex shed fraction", tc.FlexShed}, {"priority-as-standard fraction", tc.PriorityAsStandard}} {
		if !(f.v >= 0 && f.v <= 1) {
			return fmt.Errorf("%s %g: want a fraction in [0, 1]", f.name, f.v)
		}
	}
	if tc.FlexCapacity < 0 {
		return fmt.Errorf("flex capacity %d: want 0 (unlimited) or more", tc.FlexCapacity)
	}
	return nil
}

// shedFlex decides, with s.mu held, whether a flex call is shed: flex is
// at capacity (flexInFlight counts this call), or the draw says so.
func (s *Server) shedFlex(c *call, flexInFlight int) bool {
	tc := s.cfg.Tiers
	if tc.FlexCapacity > 0 && flexInFlight > tc.FlexCapacity {
		return true
	}
	return tc.FlexShed > 0 && s.draw(c, 's') < tc.FlexShed
}

// servedTier is the tier that serves an admitted call that asked for t.
func (s *Server) servedTier(c *call, t Tier) Tier {
	if t == TierPriority && s.cfg.Tiers.PriorityAsStandard > 0 && s.draw(c, 'p') < s.cfg.Tiers.PriorityAsStandard {
		return TierStandard
	}
	return t
}

// writeShed writes the refusal of a shed flex call.
func (s *Server) writeShed(w http.ResponseWriter) {
	switch s.cfg.Tiers.ShedAnswer {
	case Shed429:
		writeCapacity(w)
	case Shed429Details:
		d := s.cfg.Tiers.ShedRetryDelay
		if d <= 0 {
			d = time.Second
		}
		writeError(w, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).",
			map[string]any{
				"@type": "type.googleapis.com/google.rpc.Help",
				"links": []map[string]string{{"description": "Learn more about Flex", "url": "https://ai.google.dev/gemini-api/docs/flex"}},
			},
			map[string]any{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": formatDuration(d)})
	default:
		writeOverloaded(w)
	}
}

// TierStats is the accounting of one tier in Stats.Tiers.
type TierStats struct {
	// Asked is the generateContent calls whose body asked for the tier.
	Asked int64 `json:"asked"`
	// Shed is the flex calls refused for want of flex capacity.
	Shed int64 `json:"shed,omitempty"`
	// Served is the calls the tier answered with usage metadata (HTTP
	// 200, written to a client still waiting): the calls billed at its
	// rate. A priority call served as standard is standard's.
	Served int64 `json:"served"`
	// PromptTokens, CachedTokens (part of PromptTokens) and OutputTokens
	// total the usage of the Served calls.
	PromptTokens int64 `json:"prompt_tokens"`
	CachedTokens int64 `json:"cached_tokens,omitempty"`
	OutputTokens int64 `json:"output_tokens"`
	// CostNanoUSD is what the Served calls were billed, in billionths of
	// a dollar, each call priced by BillNanoUSD.
	CostNanoUSD int64 `json:"cost_nano_usd"`
}

// CostUSD is the tier's bill in USD.
func (t TierStats) CostUSD() float64 { return float64(t.CostNanoUSD) / 1e9 }

// billServed charges a served call to its tier. Call with s.mu held.
func (s *Server) billServed(c *call) {
	ts := s.acct.tier(c.served)
	ts.Served++
	ts.PromptTokens += int64(c.promptTokens)
	ts.CachedTokens += int64(c.cachedTokens)
	ts.OutputTokens += int64(c.answerTokens)
	ts.CostNanoUSD += BillNanoUSD(c.model, c.served, c.promptTokens, c.cachedTokens, c.answerTokens)
}
