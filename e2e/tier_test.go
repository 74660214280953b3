package e2e

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// summaryJSON is the part of `run --json`'s summary the tier tests read.
type summaryJSON struct {
	Status string `json:"status"`
	Totals struct {
		Calls   int64   `json:"calls"`
		Dead    int64   `json:"dead"`
		CostUSD float64 `json:"cost_usd"`
		Usage   struct {
			PromptTokens int64 `json:"prompt_tokens"`
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"usage"`
		Tiers map[string]struct {
			Calls      int64   `json:"calls"`
			Shed       int64   `json:"shed"`
			CostUSD    float64 `json:"cost_usd"`
			SavedUSD   float64 `json:"saved_usd"`
			P50Seconds float64 `json:"p50_seconds"`
			P95Seconds float64 `json:"p95_seconds"`
		} `json:"tiers"`
		CacheSavedUSD float64 `json:"cache_saved_usd"`
	} `json:"totals"`
}

func runJSON(t *testing.T, env []string, args ...string) summaryJSON {
	t.Helper()
	code, out, errs := sawtooth(t, env, append(args, "--json", "--quiet")...)
	if code != 0 {
		t.Fatalf("run exit %d:\n%s", code, tail(errs, 2000))
	}
	var s summaryJSON
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("summary: %v\n%s", err, tail(out, 2000))
	}
	return s
}

// cents reports whether two bills agree to the cent.
func cents(a, b float64) bool { return math.Abs(a-b) < 0.005 }

// TestTier_AutoFlexShedsAThird: 3,000 items with --tier auto and a flex
// deadline, against a simulator whose flex tier sheds a third of its
// calls (bare 429s, which look like a quota): every item is answered
// exactly once, on flex or, past its deadline, on standard; nothing is
// dead-lettered for the sheds; and the cost, flex's answers at flex rates
// and the rest at standard, is the simulator's own bill to the cent, tier
// by tier.
func TestTier_AutoFlexShedsAThird(t *testing.T) {
	t.Parallel()
	const n = 3000
	sim, url := startSim(t, geminisim.Config{
		Seed:    31,
		Latency: geminisim.Latency{Base: 2 * time.Millisecond, Jitter: 3 * time.Millisecond},
		Tiers: geminisim.TierConfig{
			FlexShed: 1.0 / 3, ShedAnswer: geminisim.Shed429,
			FlexLatency: geminisim.Latency{Base: 20 * time.Millisecond, Jitter: 30 * time.Millisecond},
		},
	})
	dir := t.TempDir()
	input := writeItems(t, dir, n, 31)
	db := filepath.Join(dir, "t.db")
	start := time.Now()
	sum := runJSON(t, simEnv(url), "run", "--db", db, "--input", input, "--tier", "auto", "--flex-deadline", "1500ms")
	took := time.Since(start)
	finalPlaces(t, db, n)

	checkTierBill(t, sim.Stats(), sum, n, took)
}

// checkTierBill checks a run of n items on flex with a deadline against
// the simulator's accounting: each item answered once, on flex or past
// its deadline on standard; flex shed about a third of its calls and
// nothing was dead-lettered for it; our cost is the simulator's bill to
// the cent, tier by tier, and flex saved what it cost.
func checkTierBill(t *testing.T, st geminisim.Stats, sum summaryJSON, n int, took time.Duration) {
	t.Helper()
	deadSanitize, deadClassify := expectedDead(n)
	flex, std := st.Tiers[geminisim.TierFlex], st.Tiers[geminisim.TierStandard]
	answered := int64(n - deadSanitize)
	if flex.Served+std.Served != answered || std.Asked != std.Served || flex.Shed == 0 {
		t.Errorf("simulator: flex %+v, standard %+v; want %d calls served, each item once", flex, std, answered)
	}
	if share := float64(flex.Shed) / float64(flex.Asked); share < 0.28 || share > 0.39 {
		t.Errorf("flex shed %.2f of its calls, want about a third", share)
	}
	for key, it := range st.Items {
		if billed := it.OK + boolInt(it.BilledTokens > 0 && it.OK == 0); billed != 1 {
			t.Errorf("item %s answered %d times (%d calls)", key, billed, it.Calls)
		}
	}
	if sum.Totals.Dead != int64(deadSanitize+deadClassify) {
		t.Errorf("dead %d, want %d (the sheds dead-letter nothing)", sum.Totals.Dead, deadSanitize+deadClassify)
	}
	ours, theirs := sum.Totals.Tiers, map[string]float64{"flex": flex.CostUSD(), "standard": std.CostUSD()}
	for tier, bill := range theirs {
		if got := ours[tier]; !cents(got.CostUSD, bill) {
			t.Errorf("%s: our cost $%.6f, the simulator's bill $%.6f", tier, got.CostUSD, bill)
		}
	}
	if bill := float64(st.BillNanoUSD()) / 1e9; !cents(sum.Totals.CostUSD, bill) || bill == 0 {
		t.Errorf("cost $%.6f, the simulator's bill $%.6f", sum.Totals.CostUSD, bill)
	}
	if ours["flex"].Calls != flex.Served || ours["flex"].Shed != flex.Shed || ours["standard"].Calls != std.Served {
		t.Errorf("our tiers %+v, simulator's flex %+v standard %+v", ours, flex, std)
	}
	// Flex at half price saved what it cost.
	if f := ours["flex"]; !cents(f.SavedUSD, f.CostUSD) {
		t.Errorf("flex saved $%.6f for $%.6f spent", f.SavedUSD, f.CostUSD)
	}
	// Each tier that served calls timed them.
	for tier, s := range ours {
		if s.Calls > 0 && (s.P50Seconds <= 0 || s.P95Seconds < s.P50Seconds) {
			t.Errorf("%s: latency p50 %vs p95 %vs for %d calls", tier, s.P50Seconds, s.P95Seconds, s.Calls)
		}
	}
	t.Logf("%d items in %s: flex %d served, %d shed (p50 %.3fs, p95 %.3fs); standard %d; cost $%.4f (flex $%.4f, standard $%.4f), saved $%.4f",
		n, took.Round(time.Millisecond), flex.Served, flex.Shed, ours["flex"].P50Seconds, ours["flex"].P95Seconds, std.Served, sum.Totals.CostUSD, ours["flex"].CostUSD, ours["standard"].CostUSD, ours["flex"].SavedUSD)
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// TestTier_ImplicitCachePrice: a prompt that puts what every item shares
// first is implicitly cached past the model's minimum, and its cached
// input is priced at the cached rate: our cost equals the simulator's
// bill to the cent, and the summary says what caching saved. A prompt
// whose shared part comes after something item-specific is never cached.
func TestTier_ImplicitCachePrice(t *testing.T) {
	t.Parallel()
	preface := strings.Repeat("Label definitions: a bug is a defect the user hit; pricing is about cost; ux is about the layout. ", 60)
	for _, tc := range []struct {
		name     string
		template string
		cached   bool
	}{
		{"shared prefix first", preface + "\nReview: {{.Text}}\n", true},
		{"item first breaks the prefix", "Review {{.ID}}: {{.Text}}\n" + preface, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const n = 300
			sim, url := startSim(t, geminisim.Config{Seed: 7, Latency: geminisim.Latency{Base: 2 * time.Millisecond}})
			dir := t.TempDir()
			tmpl := filepath.Join(dir, "prompt.tmpl")
			if err := os.WriteFile(tmpl, []byte(tc.template), 0o600); err != nil {
				t.Fatal(err)
			}
			input := writeItems(t, dir, n, 7)
			sum := runJSON(t, simEnv(url), "run", "--db", filepath.Join(dir, "c.db"), "--input", input, "--prompt-file", tmpl)
			st := sim.Stats().Tiers[geminisim.TierStandard]
			if sum.Totals.Usage.CachedTokens != st.CachedTokens {
				t.Errorf("cached tokens: ours %d, the simulator's %d", sum.Totals.Usage.CachedTokens, st.CachedTokens)
			}
			if tc.cached != (st.CachedTokens > 0) || tc.cached != (sum.Totals.CacheSavedUSD > 0) {
				t.Fatalf("cached %d tokens, saved $%.6f; want cached: %v", st.CachedTokens, sum.Totals.CacheSavedUSD, tc.cached)
			}
			if !cents(sum.Totals.CostUSD, st.CostUSD()) || st.CostUSD() == 0 {
				t.Errorf("our cost $%.6f, the simulator's bill $%.6f", sum.Totals.CostUSD, st.CostUSD())
			}
			t.Logf("%d of %d input tokens cached, cost $%.4f, saved $%.4f", st.CachedTokens, st.PromptTokens, sum.Totals.CostUSD, sum.Totals.CacheSavedUSD)
		})
	}
}
