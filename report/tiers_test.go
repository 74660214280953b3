package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// tierData is a report of one run whose classify calls were served by
// flex, standard and priority (4m of flex latency reads 3m58s, within
// the histogram's 1%).
func tierData(t *testing.T) *Data {
	t.Helper()
	start := time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)
	lat := func(d time.Duration, n int) *pipeline.Latencies {
		l := &pipeline.Latencies{}
		for range n {
			l.Observe(d)
		}
		return l
	}
	tiers := map[string]*pipeline.TierStats{}
	for name, s := range map[string]*pipeline.TierStats{
		pipeline.TierFlex:     {Calls: 2000, Shed: 1000, CostUSD: 1, SavedUSD: 1, Latency: lat(4*time.Minute, 2000)},
		pipeline.TierStandard: {Calls: 1000, CostUSD: 1, Latency: lat(1500*time.Millisecond, 1000)},
		pipeline.TierPriority: {Calls: 5, CostUSD: 0.018, SavedUSD: -0.008},
	} {
		tiers[name] = &pipeline.TierStats{}
		tiers[name].Add(s)
	}
	run := pipeline.RunSummary{ID: "run-1", Started: start, Ended: start.Add(time.Hour), Status: "complete", Stages: map[string]*pipeline.StageStats{
		"classify": {Done: 3000, Calls: 6005, Tiers: tiers, CacheSavedUSD: 0.0035, Usage: pipeline.Usage{PromptTokens: 900_000, CachedTokens: 12800}, CostUSD: 2.018},
	}}
	return &Data{DB: "t.db", Generated: start, Stages: []string{"classify"}, Counts: store.Counts{Items: 3000, Done: 3000},
		LastRun: &run, Runs: []pipeline.RunSummary{run}}
}

// TestReport_Tiers: the text and HTML reports show the last run's calls
// by tier (calls, sheds, latency, cost, saved against standard) and what
// implicit caching saved; a run all on standard shows no tier section.
func TestReport_Tiers(t *testing.T) {
	d := tierData(t)
	var text bytes.Buffer
	if err := Text(&text, d); err != nil {
		t.Fatal(err)
	}
	var html bytes.Buffer
	if err := HTML(&html, d); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		out  string
		want []string
	}{
		"text": {text.String(), []string{"Service tiers, last run", "standard", "1.5s", "flex", "2,000", "1,000", "3m58s", "$1.00", "priority", "-$0.0080",
			"classify: 12,800 input tokens implicitly cached, $0.0035 saved by the cached rate"}},
		"html": {html.String(), []string{"<h3>Service tiers</h3>", "<td>flex</td><td class=\"n\">2,000</td><td class=\"n\">1,000</td><td class=\"n\">3m58s</td><td class=\"n\">3m58s</td><td class=\"n\">$1.00</td><td class=\"n\">$1.00</td>",
			"<td>priority</td><td class=\"n\">5</td><td class=\"n\">0</td><td class=\"n\">–</td>", "12,800 input tokens implicitly cached"}},
	} {
		for _, w := range c.want {
			if !strings.Contains(c.out, w) {
				t.Errorf("%s report lacks %q:\n%s", name, w, c.out)
			}
		}
	}
	// Tiers in pipeline order: standard, flex, priority.
	if s := text.String(); !(strings.Index(s, "standard") < strings.Index(s, "flex") && strings.Index(s, "flex") < strings.Index(s, "priority")) {
		t.Errorf("tiers out of order:\n%s", s)
	}

	d.LastRun.Stages["classify"].Tiers, d.LastRun.Stages["classify"].Usage.CachedTokens = nil, 0
	d.Runs = []pipeline.RunSummary{*d.LastRun}
	text.Reset()
	if err := Text(&text, d); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text.String(), "Service tiers") || strings.Contains(text.String(), "implicitly cached") {
		t.Errorf("a run all on standard shows tiers:\n%s", text.String())
	}
}
