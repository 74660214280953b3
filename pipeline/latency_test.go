package pipeline

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestLatencies_Quantile: the histogram's quantiles are within 1% of the
// exact ones for spreads of latency a night sees (seconds on standard,
// minutes on flex), and hold a bounded number of buckets whatever the
// count.
func TestLatencies_Quantile(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 1))
	for _, tc := range []struct {
		name string
		draw func() time.Duration
	}{
		{"standard seconds", func() time.Duration { return time.Duration((0.2 + rng.ExpFloat64()) * float64(time.Second)) }},
		{"flex minutes", func() time.Duration { return time.Minute + time.Duration(rng.Float64()*float64(14*time.Minute)) }},
		{"log-normal", func() time.Duration { return time.Duration(math.Exp(rng.NormFloat64()*1.5) * float64(time.Second)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l Latencies
			samples := make([]time.Duration, 100_000)
			for i := range samples {
				samples[i] = tc.draw()
				l.Observe(samples[i])
			}
			slices.Sort(samples)
			for _, q := range []float64{0.5, 0.95, 0.99} {
				exact := samples[int(math.Ceil(q*float64(len(samples))))-1]
				if got := l.Quantile(q); math.Abs(float64(got-exact))/float64(exact) > 0.011 {
					t.Errorf("p%.0f = %s, exact %s", 100*q, got, exact)
				}
			}
			if len(l.Buckets) > latencyBuckets || l.Count != int64(len(samples)) {
				t.Errorf("%d buckets, count %d", len(l.Buckets), l.Count)
			}
		})
	}
}

func TestLatencies_Edges(t *testing.T) {
	var empty *Latencies
	if empty.Quantile(0.5) != 0 || (&Latencies{}).Quantile(0.95) != 0 {
		t.Error("an empty histogram has a quantile")
	}
	var l Latencies
	l.Observe(0)
	l.Observe(1000 * time.Hour)
	if got := l.Quantile(0.5); got != latencyMin {
		t.Errorf("p50 of {0, 1000h} = %s, want the floor %s", got, latencyMin)
	}
	if got := l.Quantile(1); got < 70*time.Hour {
		t.Errorf("p100 = %s, want the top bucket", got)
	}
}

// TestLatencies_AddAndJSON: two runs' histograms add up to the histogram
// of both, through the JSON a run record stores.
func TestLatencies_AddAndJSON(t *testing.T) {
	var a, b, both Latencies
	for i := 1; i <= 1000; i++ {
		d := time.Duration(i) * time.Second
		if i%3 == 0 {
			a.Observe(d)
		} else {
			b.Observe(d)
		}
		both.Observe(d)
	}
	raw, err := json.Marshal(&a)
	if err != nil {
		t.Fatal(err)
	}
	var back Latencies
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	back.Add(&b)
	for _, q := range []float64{0.5, 0.95} {
		if back.Quantile(q) != both.Quantile(q) {
			t.Errorf("p%.0f: added %s, whole %s", 100*q, back.Quantile(q), both.Quantile(q))
		}
	}
}

// TestTierCounters_Latency: only billed calls are timed, by the tier
// that served them; TierStats.Add keeps the percentiles of the sum.
func TestTierCounters_Latency(t *testing.T) {
	var c tierCounters
	p := Price{InputPerM: 1, FlexFactor: 0.5}
	for i := 1; i <= 100; i++ {
		c.billed(p, Usage{PromptTokens: 10, Tier: TierFlex}, 1, 5, time.Duration(i)*6*time.Second)
	}
	c.billed(p, Usage{PromptTokens: 10}, 1, 10, 2*time.Second)
	c.billed(p, Usage{}, 0, 0, time.Hour) // an unbilled call: not timed
	c.shed(TierFlex)
	tiers, _ := c.stats()
	flex, std := tiers[TierFlex], tiers[TierStandard]
	near := func(got, want float64) bool { return math.Abs(got-want)/want < 0.011 }
	if !near(flex.P50Seconds, 300) || !near(flex.P95Seconds, 570) || flex.Latency.Count != 100 {
		t.Errorf("flex p50 %v p95 %v (count %d), want 300 and 570", flex.P50Seconds, flex.P95Seconds, flex.Latency.Count)
	}
	if !near(std.P50Seconds, 2) || !near(std.P95Seconds, 2) || std.Latency.Count != 1 {
		t.Errorf("standard p50 %v p95 %v (count %d), want 2", std.P50Seconds, std.P95Seconds, std.Latency.Count)
	}
	sum := addTiers(nil, tiers)
	sum = addTiers(sum, map[string]*TierStats{TierStandard: {Calls: 3, Latency: &Latencies{Buckets: map[int]int64{latencyIndex(20 * time.Second): 3}, Count: 3}}})
	if s := sum[TierStandard]; s.Calls != 4 || !near(s.P50Seconds, 20) || !near(sum[TierFlex].P50Seconds, 300) {
		t.Errorf("summed standard %+v, flex p50 %v", s, sum[TierFlex].P50Seconds)
	}
}
