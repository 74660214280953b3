package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

func TestClassOf_Shed(t *testing.T) {
	for name, err := range map[string]error{
		"a flex 429 is no quota":      pipeline.Shed(pipeline.RateLimited(errors.New("429"), time.Second, false), pipeline.TierFlex, 0),
		"a flex 503 is no overload":   pipeline.Shed(pipeline.Overloaded(errors.New("503")), pipeline.TierFlex, 0),
		"a flex timeout, wrapped":     errors.Join(errors.New("item 1"), pipeline.Shed(context.DeadlineExceeded, pipeline.TierFlex, 0)),
		"a shed wrapping a permanent": pipeline.Shed(pipeline.Permanentf("x"), pipeline.TierFlex, 0),
	} {
		if got := pipeline.ClassOf(context.Background(), err); got != pipeline.ClassShed {
			t.Errorf("%s: ClassOf = %s, want shed", name, got)
		}
	}
	if pipeline.Shed(nil, pipeline.TierFlex, 0) != nil {
		t.Error("Shed(nil) is not nil")
	}
}

func TestPrice_CostTiersAndCache(t *testing.T) {
	p := pipeline.Price{InputPerM: 0.30, OutputPerM: 2.50, CachedInputPerM: 0.03, FlexFactor: 0.5, PriorityFactor: 1.8}
	u := pipeline.Usage{PromptTokens: 1_000_000, CandidateTokens: 1_000_000}
	for _, tc := range []struct {
		name string
		u    pipeline.Usage
		want float64
	}{
		{"standard", u, 2.80},
		{"unnamed tier is standard", pipeline.Usage{PromptTokens: 1_000_000, CandidateTokens: 1_000_000, Tier: ""}, 2.80},
		{"flex at half", pipeline.Usage{PromptTokens: 1_000_000, CandidateTokens: 1_000_000, Tier: pipeline.TierFlex}, 1.40},
		{"priority at +80%", pipeline.Usage{PromptTokens: 1_000_000, CandidateTokens: 1_000_000, Tier: pipeline.TierPriority}, 5.04},
		{"cached input at its rate", pipeline.Usage{PromptTokens: 1_000_000, CachedTokens: 1_000_000}, 0.03},
		{"cached on flex", pipeline.Usage{PromptTokens: 2_000_000, CachedTokens: 1_000_000, Tier: pipeline.TierFlex}, 0.165},
	} {
		if got := p.Cost(tc.u); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: cost %v, want %v", tc.name, got, tc.want)
		}
	}
	// A price without tier or cache rates (set by hand) charges the full
	// price: no discount it does not know.
	plain := pipeline.Price{InputPerM: 0.30, OutputPerM: 2.50}
	if got := plain.Cost(pipeline.Usage{PromptTokens: 1_000_000, CachedTokens: 1_000_000, Tier: pipeline.TierFlex}); math.Abs(got-0.30) > 1e-12 {
		t.Errorf("plain price: %v", got)
	}
}

func TestUsage_AddTier(t *testing.T) {
	flex := pipeline.Usage{PromptTokens: 10, Tier: pipeline.TierFlex}
	std := pipeline.Usage{PromptTokens: 5, Tier: pipeline.TierStandard}
	prio := pipeline.Usage{PromptTokens: 7, Tier: pipeline.TierPriority}
	for _, tc := range []struct {
		name string
		a, b pipeline.Usage
		want string
	}{
		{"zero plus flex", pipeline.Usage{}, flex, pipeline.TierFlex},
		{"flex plus zero", flex, pipeline.Usage{}, pipeline.TierFlex},
		{"flex plus flex", flex, flex, pipeline.TierFlex},
		{"flex and standard sum at standard", flex, std, ""},
		{"standard and flex sum at standard", std, flex, ""},
		// A priority call's price is kept whatever it is summed with: a
		// sum priced below its bill would let a budget be overspent.
		{"standard and priority sum at priority", std, prio, pipeline.TierPriority},
		{"priority and standard sum at priority", prio, std, pipeline.TierPriority},
		{"flex and priority sum at priority", flex, prio, pipeline.TierPriority},
		{"unnamed and priority sum at priority", pipeline.Usage{PromptTokens: 1}, prio, pipeline.TierPriority},
	} {
		if got := tc.a.Add(tc.b); got.Tier != tc.want || got.PromptTokens != tc.a.PromptTokens+tc.b.PromptTokens {
			t.Errorf("%s: %+v", tc.name, got)
		}
	}
}

// TestRunner_FlexShedIsNotAQuota: calls a flex tier sheds (429s and 503s
// wrapped as Shed) spend no attempt, tell the limiter no refusal, and
// dead-letter nothing however many; each item is billed once, at the
// tier that served it, and the summary shows both tiers.
func TestRunner_FlexShedIsNotAQuota(t *testing.T) {
	const items = 20
	api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		switch {
		case n <= 3 && it.ID < "i0010":
			return pipeline.Result{}, pipeline.Shed(pipeline.RateLimited(errors.New("429 flex"), 0, false), pipeline.TierFlex, 0)
		case n <= 3:
			return pipeline.Result{}, pipeline.Shed(pipeline.Overloaded(errors.New("503 flex")), pipeline.TierFlex, 0)
		}
		tier := pipeline.TierFlex
		if it.ID == "i0000" || it.ID == "i0019" {
			tier = pipeline.TierStandard // moved to standard, as auto does
		}
		return pipeline.Result{Output: json.RawMessage(`{}`), Usage: pipeline.Usage{PromptTokens: 1000, CandidateTokens: 100, CachedTokens: 500, Tier: tier}}, nil
	}}
	st := newMemStore([]string{"api"}, items)
	lim := &fakeLimiter{}
	price := pipeline.Price{InputPerM: 1, OutputPerM: 10, CachedInputPerM: 0.1, FlexFactor: 0.5}
	r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Workers: 4, Limiter: lim, MaxAttempts: 1, NewBackOff: noWait, Price: price}}}
	sum, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.tally()["done"] != items {
		t.Fatalf("where = %v", st.tally())
	}
	if succeeded, limited, failed := lim.counts(); limited != 0 || succeeded != items || failed != 3*items {
		t.Errorf("limiter saw %d ok, %d refused, %d failed; want no refusal", succeeded, limited, failed)
	}
	s := sum.Stages["api"]
	if s.RateLimited != 0 || s.Transient != 0 || s.Attempts != items {
		t.Errorf("stats = %+v", s)
	}
	// One call per item billed: 500 input + 500 cached + 100 output tokens.
	one := (500*1 + 500*0.1 + 100*10) / 1e6
	flex, std := s.Tiers[pipeline.TierFlex], s.Tiers[pipeline.TierStandard]
	if flex == nil || std == nil || flex.Calls != items-2 || flex.Shed != 3*items || std.Calls != 2 || std.Shed != 0 {
		t.Fatalf("tiers = flex %+v standard %+v", flex, std)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(flex.CostUSD, one*0.5*(items-2)) || !near(flex.SavedUSD, one*0.5*(items-2)) || !near(std.CostUSD, 2*one) || std.SavedUSD != 0 {
		t.Errorf("tier money: flex %+v standard %+v", flex, std)
	}
	if !near(s.CostUSD, flex.CostUSD+std.CostUSD) {
		t.Errorf("cost %v, tiers %v + %v", s.CostUSD, flex.CostUSD, std.CostUSD)
	}
	// 500 cached tokens a call, 0.9 USD/M saved, at each call's tier.
	if want := 500 * 0.9 / 1e6 * (0.5*(items-2) + 2); !near(s.CacheSavedUSD, want) || s.Usage.CachedTokens != 500*items {
		t.Errorf("cache saved %v (want %v), cached tokens %d", s.CacheSavedUSD, want, s.Usage.CachedTokens)
	}
}

// TestRunner_TierLatency: the runner times each billed call on its
// clock and files it under the tier that served it: flex's minutes and
// standard's seconds give each tier its own percentiles.
func TestRunner_TierLatency(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		const items = 100
		api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			var i int
			fmt.Sscanf(it.ID, "i%d", &i)
			tier, took := pipeline.TierFlex, time.Duration(i+1)*6*time.Second
			if i%10 == 0 {
				tier, took = pipeline.TierStandard, 2*time.Second
			}
			if err := clock.sleep(ctx, took); err != nil {
				return pipeline.Result{}, err
			}
			return pipeline.Result{Output: json.RawMessage(`{}`), Usage: pipeline.Usage{PromptTokens: 100, Tier: tier}}, nil
		}}
		st := newMemStore([]string{"api"}, items)
		price := pipeline.Price{InputPerM: 1, FlexFactor: 0.5}
		r := &pipeline.Runner{Store: st, Clock: clock, Stages: []pipeline.StageConfig{{Stage: api, Workers: 50, NewBackOff: noWait, Price: price}}}
		sum, err := r.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		flex, std := sum.Stages["api"].Tiers[pipeline.TierFlex], sum.Stages["api"].Tiers[pipeline.TierStandard]
		near := func(got, want float64) bool { return math.Abs(got-want)/want < 0.011 }
		// Flex took 12s..600s but every tenth item: its p50 is the 45th
		// of 90 (i=49: 300s), its p95 the 86th (i=95: 576s).
		if flex == nil || std == nil || !near(flex.P50Seconds, 300) || !near(flex.P95Seconds, 576) || !near(std.P50Seconds, 2) || !near(std.P95Seconds, 2) {
			t.Errorf("flex %+v standard %+v", flex, std)
		}
	})
}

// TestRunner_PerCallTiers: an item answered after a repair whose two calls
// were served by different tiers (priority, then standard) is billed call
// by call, each at its tier, and each call counted under its tier.
func TestRunner_PerCallTiers(t *testing.T) {
	prio := pipeline.Usage{PromptTokens: 1_000_000, Tier: pipeline.TierPriority}
	std := pipeline.Usage{PromptTokens: 1_000_000}
	api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		return pipeline.Result{Output: json.RawMessage(`{}`), Usage: prio.Add(std), Calls: 2, BilledCalls: 2,
			PerCall: []pipeline.Usage{prio, std}}, nil
	}}
	st := newMemStore([]string{"api"}, 3)
	price := pipeline.Price{InputPerM: 1, PriorityFactor: 1.8}
	r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Workers: 1, NewBackOff: noWait, Price: price}}}
	sum, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s := sum.Stages["api"]
	if want := 3 * (1.8 + 1.0); math.Abs(s.CostUSD-want) > 1e-9 {
		t.Errorf("cost $%.4f, want $%.4f: each call at the tier that served it", s.CostUSD, want)
	}
	p, sd := s.Tiers[pipeline.TierPriority], s.Tiers[pipeline.TierStandard]
	if p == nil || sd == nil || p.Calls != 3 || sd.Calls != 3 || math.Abs(p.CostUSD-5.4) > 1e-9 || math.Abs(sd.CostUSD-3) > 1e-9 {
		t.Errorf("priority %+v, standard %+v; want 3 calls each, $5.40 and $3.00", p, sd)
	}
}
