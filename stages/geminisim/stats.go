package geminisim

import (
	"maps"
	"sort"
	"time"
)

// Outcome is how the server answered one generateContent call.
type Outcome string

const (
	OutcomeOK             Outcome = "ok"              // 200 with a normal answer
	OutcomeRateLimited    Outcome = "rate_limited"    // 429 RESOURCE_EXHAUSTED (RPM, TPM or RPD)
	OutcomeErr500         Outcome = "err500"          // injected 500 INTERNAL
	OutcomeErr503         Outcome = "err503"          // injected 503 UNAVAILABLE
	OutcomeOverloaded     Outcome = "overloaded"      // 503 because MaxConcurrent was exceeded
	OutcomeCapacity       Outcome = "capacity"        // bare 429 because MaxConcurrent was exceeded (RefuseBare429)
	OutcomeNoCredits      Outcome = "no_credits"      // 429 "Your prepayment credits are depleted", no details (Credits spent)
	OutcomeOverloadBurst  Outcome = "overload_burst"  // 503 during an Overload burst
	OutcomeHang           Outcome = "hang"            // held until the client gave up or Close
	OutcomeMalformed      Outcome = "malformed"       // 200 with a truncated JSON body
	OutcomeBlockPrompt    Outcome = "block_prompt"    // 200, promptFeedback.blockReason SAFETY, no candidates
	OutcomeBlockCandidate Outcome = "block_candidate" // 200, candidate finishReason SAFETY, no text
	OutcomeMaxTokens      Outcome = "max_tokens"      // 200, truncated JSON text, finishReason MAX_TOKENS
	OutcomeBadKey         Outcome = "bad_key"         // 400 API_KEY_INVALID
	OutcomeNotFound       Outcome = "not_found"       // 404 unknown model
	OutcomeBadRequest     Outcome = "bad_request"     // 400 INVALID_ARGUMENT (bad JSON, no contents, unknown serviceTier)
	OutcomeShed           Outcome = "flex_shed"       // 503 or 429 because flex shed the call (TierConfig)
)

// allOutcomes lists every Outcome, so Stats.Outcomes always has every key.
var allOutcomes = []Outcome{
	OutcomeOK, OutcomeRateLimited, OutcomeErr500, OutcomeErr503, OutcomeOverloaded, OutcomeCapacity, OutcomeNoCredits, OutcomeOverloadBurst,
	OutcomeHang, OutcomeMalformed, OutcomeBlockPrompt, OutcomeBlockCandidate,
	OutcomeMaxTokens, OutcomeBadKey, OutcomeNotFound, OutcomeBadRequest, OutcomeShed,
}

// billed reports whether the outcome is a 200 answer that usage metadata
// (and so a bill) goes with.
func (o Outcome) billed() bool {
	switch o {
	case OutcomeOK, OutcomeMalformed, OutcomeBlockPrompt, OutcomeBlockCandidate, OutcomeMaxTokens:
		return true
	}
	return false
}

// maxTimeline bounds Stats.Timeline: only the latest seconds are kept.
const maxTimeline = 3600

// Stats is a snapshot of the server's accounting, as served by
// GET /_sim/stats. A call is counted as soon as its outcome is decided (for
// a hang, before it starts hanging), so once a client has its answer the
// call is in the counts.
type Stats struct {
	// Started is when the server was created (by Config.Now); schedule
	// steps and timeline seconds count from it.
	Started time.Time `json:"started"`
	// Calls is every generateContent request received, whatever its outcome.
	Calls int64 `json:"calls"`
	// Outcomes counts Calls by outcome; every Outcome is present.
	Outcomes map[Outcome]int64 `json:"outcomes"`
	// AdmittedRequests and AdmittedTokens (estimated input tokens) total the
	// requests that passed the quota check, faulted or not.
	AdmittedRequests int64 `json:"admitted_requests"`
	AdmittedTokens   int64 `json:"admitted_tokens"`
	// CountTokensCalls counts countTokens requests (never quota-limited).
	CountTokensCalls int64 `json:"count_tokens_calls"`
	// Abandoned counts the admitted calls whose client went away before
	// the answer (see ItemStats.Abandoned).
	Abandoned int64 `json:"abandoned"`
	// InFlight is the number of generateContent requests being handled now;
	// PeakInFlight the most there ever were at once.
	InFlight     int `json:"in_flight"`
	PeakInFlight int `json:"peak_in_flight"`
	// OpenConns is the client connections open now, when the server
	// serves on its own (Start); 0 when mounted in another server. With
	// InFlight 0 and no connection open, a client that died can send
	// nothing more: its last requests were read and accounted.
	OpenConns int `json:"open_conns"`
	// QuotaPercent is the schedule's percent of RPM and TPM at snapshot time.
	QuotaPercent int `json:"quota_percent"`
	// Items holds per-item counts for every call whose request body was
	// read (calls refused for a bad key or an unknown model are not
	// attributed to an item), keyed by "id:" and the item id when the
	// request names it in ItemHeader, else by ItemHash of the user text.
	Items map[string]ItemStats `json:"items"`
	// Timeline has one bucket per second since Started in which anything
	// was admitted or refused for quota, in order; only the latest 3600
	// seconds are kept.
	Timeline []Bucket `json:"timeline"`
	// Tiers holds the accounting of each service tier; every Tier is
	// present.
	Tiers map[Tier]TierStats `json:"tiers"`
	// FlexInFlight is the flex calls being served now.
	FlexInFlight int `json:"flex_in_flight"`
}

// BillNanoUSD is the bill of every tier, in billionths of a dollar.
func (st Stats) BillNanoUSD() int64 {
	var n int64
	for _, t := range st.Tiers {
		n += t.CostNanoUSD
	}
	return n
}

// ItemStats are the per-item counts of Stats.Items.
type ItemStats struct {
	// Calls is every generateContent call carrying this item.
	Calls int64 `json:"calls"`
	// OK counts the calls answered normally (OutcomeOK).
	OK int64 `json:"ok"`
	// BilledTokens sums prompt plus candidate tokens of the calls answered
	// with HTTP 200 and usage metadata (ok, blocks, max_tokens, malformed):
	// what the real API would bill. Errors, hangs and 429s bill nothing.
	BilledTokens int64 `json:"billed_tokens"`
	// PromptTokens is the estimated input tokens of the item's last call.
	PromptTokens int64 `json:"prompt_tokens"`
	// Abandoned counts the item's admitted calls of a billed outcome
	// (not a 500, a 503 or a hang) whose client went away before the
	// answer was written: a timeout or a killed process. They are in
	// Calls and BilledTokens too, and in OK when their outcome was OK (the
	// real API may bill them); the client never saw the answer.
	Abandoned int64 `json:"abandoned,omitempty"`
}

// abandonedLocked counts an abandoned call of the item with key (see
// ItemStats.Abandoned).
func (a *accounting) abandonedLocked(key string) {
	a.abandoned++
	if key == "" {
		return
	}
	if it := a.items[key]; it != nil {
		it.Abandoned++
	}
}

// itemCalls is how many calls of the item with key were counted so far.
func (a *accounting) itemCalls(key string) int64 {
	if it := a.items[key]; it != nil {
		return it.Calls
	}
	return 0
}

// Bucket is one second of Stats.Timeline.
type Bucket struct {
	// Second is whole seconds since Stats.Started.
	Second int64 `json:"second"`
	// Admitted counts requests that passed the quota check (including the
	// faulted ones); OK those of them answered normally; RateLimited the
	// 429s.
	Admitted    int64 `json:"admitted"`
	OK          int64 `json:"ok"`
	RateLimited int64 `json:"rate_limited"`
}

// accounting is the mutable state behind Stats; the Server's mutex guards it.
type accounting struct {
	calls, admitted, admittedTokens, countTokens int64
	abandoned                                    int64
	outcomes                                     map[Outcome]int64
	inFlight, peak                               int
	items                                        map[string]*ItemStats
	timeline                                     []Bucket
	tiers                                        map[Tier]*TierStats
	flexInFlight                                 int
	openConns                                    int
}

// tier returns t's accounting, creating it.
func (a *accounting) tier(t Tier) *TierStats {
	ts := a.tiers[t]
	if ts == nil {
		ts = &TierStats{}
		a.tiers[t] = ts
	}
	return ts
}

func newAccounting() accounting {
	return accounting{outcomes: make(map[Outcome]int64), items: make(map[string]*ItemStats), tiers: make(map[Tier]*TierStats)}
}

// bucket returns the timeline bucket for second sec, creating it in order.
func (a *accounting) bucket(sec int64) *Bucket {
	n := len(a.timeline)
	if n > 0 && a.timeline[n-1].Second == sec {
		return &a.timeline[n-1]
	}
	i := sort.Search(n, func(i int) bool { return a.timeline[i].Second >= sec })
	if i < n && a.timeline[i].Second == sec {
		return &a.timeline[i]
	}
	a.timeline = append(a.timeline, Bucket{})
	copy(a.timeline[i+1:], a.timeline[i:])
	a.timeline[i] = Bucket{Second: sec}
	if len(a.timeline) > maxTimeline {
		drop := len(a.timeline) - maxTimeline
		a.timeline = append(a.timeline[:0], a.timeline[drop:]...)
		i -= drop
		if i < 0 {
			// sec was older than everything kept: count it nowhere.
			return &Bucket{}
		}
	}
	return &a.timeline[i]
}

// snapshot copies the accounting into a Stats.
func (a *accounting) snapshot() Stats {
	st := Stats{
		Calls:            a.calls,
		Outcomes:         make(map[Outcome]int64, len(allOutcomes)),
		AdmittedRequests: a.admitted,
		AdmittedTokens:   a.admittedTokens,
		CountTokensCalls: a.countTokens,
		Abandoned:        a.abandoned,
		InFlight:         a.inFlight,
		PeakInFlight:     a.peak,
		Items:            make(map[string]ItemStats, len(a.items)),
		Timeline:         append([]Bucket{}, a.timeline...),
		Tiers:            make(map[Tier]TierStats, len(Tiers)),
		FlexInFlight:     a.flexInFlight,
		OpenConns:        a.openConns,
	}
	for _, t := range Tiers {
		st.Tiers[t] = TierStats{}
		if ts := a.tiers[t]; ts != nil {
			st.Tiers[t] = *ts
		}
	}
	for _, o := range allOutcomes {
		st.Outcomes[o] = 0
	}
	maps.Copy(st.Outcomes, a.outcomes)
	for k, v := range a.items {
		st.Items[k] = *v
	}
	return st
}
