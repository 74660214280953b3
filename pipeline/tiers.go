package pipeline

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// TierStats is one service tier's share of a stage's calls in a run.
type TierStats struct {
	// Calls is the billed calls the tier served.
	Calls int64 `json:"calls"`
	// Shed is the calls the tier refused or left unanswered (ClassShed).
	Shed int64 `json:"shed,omitempty"`
	// CostUSD is what the tier's calls were billed, at its rate.
	CostUSD float64 `json:"cost_usd"`
	// SavedUSD is what the same calls would have cost more on the
	// standard tier (negative for priority).
	SavedUSD float64 `json:"saved_usd,omitempty"`
	// P50Seconds and P95Seconds are the median and 95th percentile of
	// the latency of the calls the tier served (from the first byte sent
	// to the answer read, repairs included), read from Latency.
	P50Seconds float64 `json:"p50_seconds,omitempty"`
	P95Seconds float64 `json:"p95_seconds,omitempty"`
	// Latency is those calls' latencies, kept so that runs add up.
	Latency *Latencies `json:"latency,omitempty"`
}

// Add adds o's figures to t's, latencies and their percentiles
// included.
func (t *TierStats) Add(o *TierStats) {
	t.Calls += o.Calls
	t.Shed += o.Shed
	t.CostUSD += o.CostUSD
	t.SavedUSD += o.SavedUSD
	if o.Latency != nil && o.Latency.Count > 0 {
		if t.Latency == nil {
			t.Latency = &Latencies{}
		}
		t.Latency.Add(o.Latency)
	}
	t.setPercentiles()
}

func (t *TierStats) setPercentiles() {
	t.P50Seconds = t.Latency.Quantile(0.50).Seconds()
	t.P95Seconds = t.Latency.Quantile(0.95).Seconds()
}

// tierCounters keeps a stage's calls by the tier that served them, and
// what implicit caching saved. Safe for concurrent use.
type tierCounters struct {
	mu    sync.Mutex
	tiers map[string]*tierCount
	// cacheSaved is nanodollars implicit caching took off the bill.
	cacheSaved int64
}

type tierCount struct {
	calls, shed, spent, standard int64 // standard: the same calls' nanodollars on standard
	latency                      Latencies
}

func (t *tierCounters) get(tier string) *tierCount {
	if tier == "" {
		tier = TierStandard
	}
	if t.tiers == nil {
		t.tiers = make(map[string]*tierCount)
	}
	c := t.tiers[tier]
	if c == nil {
		c = &tierCount{}
		t.tiers[tier] = c
	}
	return c
}

// billed counts calls billed calls of u, served by u.Tier, billed nanos
// at p, which took took from the first call's start to the last's answer:
// observed once per item, so negative for a second call of the same item
// (see Result.PerCall).
func (t *tierCounters) billed(p Price, u Usage, calls, nanos int64, took time.Duration) {
	if calls == 0 && u == (Usage{}) {
		return
	}
	std := u
	std.Tier = TierStandard
	standard := p.nanos(std)
	var cacheSaved int64
	if u.CachedTokens > 0 {
		full := u
		full.CachedTokens = 0
		cacheSaved = p.nanos(full) - nanos
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.get(u.Tier)
	c.calls += calls
	if calls > 0 && took >= 0 {
		c.latency.Observe(took)
	}
	c.spent += nanos
	c.standard += standard
	t.cacheSaved += cacheSaved
}

// shed counts a call tier shed.
func (t *tierCounters) shed(tier string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.get(tier).shed++
}

// stats is the tiers' figures for StageStats: nil when every call was
// standard and none shed (a run with no tier set shows nothing new).
func (t *tierCounters) stats() (tiers map[string]*TierStats, cacheSavedUSD float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cacheSavedUSD = toUSD(t.cacheSaved)
	if len(t.tiers) == 0 || (len(t.tiers) == 1 && t.tiers[TierStandard] != nil) {
		return nil, cacheSavedUSD
	}
	tiers = make(map[string]*TierStats, len(t.tiers))
	for _, name := range slices.Sorted(maps.Keys(t.tiers)) {
		c := t.tiers[name]
		ts := &TierStats{Calls: c.calls, Shed: c.shed, CostUSD: toUSD(c.spent), SavedUSD: toUSD(c.standard - c.spent)}
		if c.latency.Count > 0 {
			ts.Latency = &Latencies{}
			ts.Latency.Add(&c.latency)
			ts.setPercentiles()
		}
		tiers[name] = ts
	}
	return tiers, cacheSavedUSD
}

// addTiers adds b's tiers to a's, in place when a is not nil.
func addTiers(a, b map[string]*TierStats) map[string]*TierStats {
	for name, s := range b {
		if a == nil {
			a = make(map[string]*TierStats)
		}
		t := a[name]
		if t == nil {
			t = &TierStats{}
			a[name] = t
		}
		t.Add(s)
	}
	return a
}
