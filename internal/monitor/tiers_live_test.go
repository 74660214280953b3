package monitor

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// mixedTiers is a classify stage's figures with flex and standard calls:
// 90 flex calls at half price, 10 on standard.
func mixedTiers() map[string]*pipeline.TierStats {
	flex := &pipeline.TierStats{Calls: 90, Shed: 45, CostUSD: 0.45, SavedUSD: 0.45, Latency: &pipeline.Latencies{}}
	for i := 1; i <= 90; i++ {
		flex.Latency.Observe(time.Duration(i) * 10 * time.Second)
	}
	std := &pipeline.TierStats{Calls: 10, CostUSD: 0.10, Latency: &pipeline.Latencies{}}
	for i := 0; i < 10; i++ {
		std.Latency.Observe(1500 * time.Millisecond)
	}
	tiers := map[string]*pipeline.TierStats{pipeline.TierFlex: {}, pipeline.TierStandard: {}}
	tiers[pipeline.TierFlex].Add(flex)
	tiers[pipeline.TierStandard].Add(std)
	return tiers
}

// TestProgress_BilledCostAndTierMetrics: the live cost of a stage whose
// calls mixed tiers is what they were billed, not their summed tokens at
// one rate; the metrics carry each tier's calls, sheds, money and
// latency quantiles, labelled by stage and tier; status shows them.
func TestProgress_BilledCostAndTierMetrics(t *testing.T) {
	cfg := testProgressConfig(t)
	p := NewProgress(NewSwitchWriter(&syncBuffer{}), nil, cfg)
	defer p.Close()
	pr := progressAt(10)
	cl := &pr.Stages[1]
	// 100 calls' tokens cost $1 at the standard rate (cfg.Cost); flex
	// billed 90 of them at half.
	cl.Usage = pipeline.Usage{PromptTokens: 600_000, CandidateTokens: 200_000, CachedTokens: 1234, Tier: ""}
	cl.CostUSD, cl.Tiers = 0.55, mixedTiers()
	p.Tick(pr)
	live := p.Status()
	if got := live.Stages[1].CostUSD; math.Abs(got-0.55) > 1e-12 {
		t.Errorf("live cost $%v, want the billed $0.55 (not $1 at one rate)", got)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(progressCollector{p})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range families {
		byName[f.GetName()] = f
	}
	find := func(name, tier string) *dto.Metric {
		for _, m := range byName[name].GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["stage"] == "classify" && labels["tier"] == tier {
				return m
			}
		}
		t.Fatalf("no %s{stage=classify,tier=%s}", name, tier)
		return nil
	}
	if v := find("sawtooth_tier_calls_total", "flex").GetCounter().GetValue(); v != 90 {
		t.Errorf("flex calls %v", v)
	}
	if v := find("sawtooth_tier_shed_total", "flex").GetCounter().GetValue(); v != 45 {
		t.Errorf("flex shed %v", v)
	}
	if v := find("sawtooth_tier_cost_usd_total", "standard").GetCounter().GetValue(); v != 0.10 {
		t.Errorf("standard cost %v", v)
	}
	if v := find("sawtooth_tier_saved_usd", "flex").GetGauge().GetValue(); v != 0.45 {
		t.Errorf("flex saved %v", v)
	}
	sum := find("sawtooth_tier_latency_seconds", "flex").GetSummary()
	q := map[float64]float64{}
	for _, x := range sum.GetQuantile() {
		q[x.GetQuantile()] = x.GetValue()
	}
	if sum.GetSampleCount() != 90 || math.Abs(q[0.5]-450)/450 > 0.011 || math.Abs(q[0.95]-860)/860 > 0.011 || math.Abs(sum.GetSampleSum()-40950) > 1e-6 {
		t.Errorf("flex latency count %d sum %v quantiles %v; want 90, 40950, p50 450 p95 860", sum.GetSampleCount(), sum.GetSampleSum(), q)
	}
	if p95 := find("sawtooth_tier_latency_seconds", "standard").GetSummary().GetQuantile()[1].GetValue(); math.Abs(p95-1.5)/1.5 > 0.011 {
		t.Errorf("standard p95 %v", p95)
	}

	var b bytes.Buffer
	if err := ShowLiveStatus(&b, cfg.DBPath, live, false); err != nil {
		t.Fatal(err)
	}
	// Quantiles within about 1%: p50 7m30s, p95 14m20s.
	for _, w := range []string{"classify: flex tier: 90 calls, 45 shed, latency p50 7m", "p95 14m", "$0.4500 ($0.4500 less than on standard)", "classify: standard tier: 10 calls, latency p50 1.5s p95 1.5s, $0.1000"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("live status lacks %q:\n%s", w, b.String())
		}
	}
}
