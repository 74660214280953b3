package pipeline_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// tieredStage asks a service tier and is billed as served by another, as
// the API may (a priority ask served standard): every call the same 100
// input and 64 output tokens, its cap, so a call costs exactly what a
// reservation at the serving tier holds.
type tieredStage struct {
	funcStage
	ask, served string
	price       pipeline.Price
	calls       atomic.Int64
	billed      atomic.Int64 // nanodollars
}

func (s *tieredStage) AskedTier() string                 { return s.ask }
func (s *tieredStage) EstimateInput(pipeline.Item) int64 { return 100 }
func (s *tieredStage) MaxOutputTokens() int64            { return 64 }

func (s *tieredStage) Process(ctx context.Context, it pipeline.Item) (pipeline.Result, error) {
	s.calls.Add(1)
	u := pipeline.Usage{PromptTokens: 100, CandidateTokens: 64, TotalTokens: 164, Tier: s.served}
	s.billed.Add(int64(s.price.Cost(u)*1e9 + 0.5))
	return pipeline.Result{Output: []byte(`{"ok":true}`), Usage: u}, nil
}

// TestRunner_BudgetReservesAskedTier: a stage asking priority is reserved
// at the priority price, so a budget of 10.5 standard calls starts 5
// priority calls (5.83 fit) and its spend stays within the budget; flex
// and auto may be served standard and are reserved at standard.
func TestRunner_BudgetReservesAskedTier(t *testing.T) {
	// A standard call (100 in, 64 out) costs $0.228; priority 1.8 times.
	price := pipeline.Price{InputPerM: 1000, OutputPerM: 2000, FlexFactor: 0.5, PriorityFactor: 1.8}
	const budget = 10.5 * 0.228
	tests := []struct {
		name        string
		ask, served string
		workers     int
		wantCalls   int64 // with one worker; at most this with more
	}{
		{"standard", pipeline.TierStandard, pipeline.TierStandard, 1, 10},
		{"priority served priority", pipeline.TierPriority, pipeline.TierPriority, 1, 5},
		{"priority served priority, 8 workers", pipeline.TierPriority, pipeline.TierPriority, 8, 5},
		{"priority served standard", pipeline.TierPriority, pipeline.TierStandard, 1, 9},
		{"flex served flex", pipeline.TierFlex, pipeline.TierFlex, 1, 20},
		{"auto served standard", "auto", pipeline.TierStandard, 8, 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := newCachingMemStore([]string{"api"}, texts(40))
			api := &tieredStage{ask: tc.ask, served: tc.served, price: price}
			api.name = "api"
			r := &pipeline.Runner{Store: st, Budget: pipeline.Budget{RunUSD: budget},
				Stages: []pipeline.StageConfig{{Stage: api, Workers: tc.workers, Price: price, NewBackOff: noWait}}}
			sum, err := r.Run(context.Background())
			if !errors.Is(err, pipeline.ErrStopped) {
				t.Fatalf("err = %v, want the budget stop", err)
			}
			calls, billed := api.calls.Load(), float64(api.billed.Load())/1e9
			if billed > budget+1e-9 {
				t.Errorf("%d calls billed $%.4f, over the $%.4f budget", calls, billed, budget)
			}
			if d := sum.Stages["api"].CostUSD - billed; d > 1e-6 || d < -1e-6 {
				t.Errorf("recorded spend $%.6f, billed $%.6f", sum.Stages["api"].CostUSD, billed)
			}
			if calls > tc.wantCalls || (tc.workers == 1 && calls != tc.wantCalls) {
				t.Errorf("%d calls, want %d", calls, tc.wantCalls)
			}
		})
	}
}
