package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// ledgerView is one worker's claimView of a fleet whose ledger the other
// workers add to: Ledgers is what this worker committed plus others.
type ledgerView struct {
	*claimView
	mu     sync.Mutex
	own    float64       // USD this worker's applied transitions carried
	others *atomic.Int64 // nanodollars the rest of the fleet committed
}

func (v *ledgerView) CommitFenced(ctx context.Context, ts []pipeline.FencedTransition) ([]uint64, error) {
	rejected, err := v.claimView.CommitFenced(ctx, ts)
	if err != nil {
		return nil, err
	}
	fenced := map[uint64]bool{}
	for _, s := range rejected {
		fenced[s] = true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, t := range ts {
		if !fenced[t.Seq] {
			v.own += t.CostUSD
		}
	}
	return rejected, nil
}

func (v *ledgerView) Ledgers() (map[string]pipeline.Ledger, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return map[string]pipeline.Ledger{"api": {SpentUSD: v.own + float64(v.others.Load())/1e9}}, nil
}

// othersStage is pricedStage in a fleet where, for every call this
// worker makes, the other workers commit one call of otherUSD.
type othersStage struct {
	pricedStage
	others   *atomic.Int64
	otherUSD float64
}

func (s *othersStage) Process(ctx context.Context, it pipeline.Item) (pipeline.Result, error) {
	s.others.Add(int64(s.otherUSD * 1e9))
	return s.pricedStage.Process(ctx, it)
}

// TestFleet_BudgetTotalIsTheFleets: --budget-total caps what the whole
// fleet spends, not what each worker spends: a worker counts what the
// others committed while it runs, and stops when the fleet's spend
// would cross the cap (overshooting by no more than the others' spend
// between its reservation and its call), where counting only the spend
// committed when it started would let it spend the whole cap itself.
func TestFleet_BudgetTotalIsTheFleets(t *testing.T) {
	// About $0.13 a call, as in TestRunner_BudgetParks; the others spend
	// $0.10 for each of this worker's calls.
	price := pipeline.Price{InputPerM: 1000, OutputPerM: 2000}
	const total, otherUSD, workers = 5.0, 0.10, 4
	fleet := newClaimStore([]string{"api"}, 400, time.Now)
	others := &atomic.Int64{}
	st := &ledgerView{claimView: fleet.view("w1"), others: others}
	api := &othersStage{pricedStage: pricedStage{inFactor: 1, price: price}, others: others, otherUSD: otherUSD}
	api.name = "api"
	r := &pipeline.Runner{Store: st, Budget: pipeline.Budget{TotalUSD: total}, Lease: time.Minute,
		Stages: []pipeline.StageConfig{{Stage: api, Workers: workers, Price: price, NewBackOff: noWait}}}
	_, err := r.Run(context.Background())
	if !errors.Is(err, pipeline.ErrStopped) {
		t.Fatalf("run: %v, want the budget stop", err)
	}
	mine, theirs := float64(api.billed.Load())/1e9, float64(others.Load())/1e9
	// Between a reservation and its call, each of the worker's calls in
	// flight lets the others add one call's spend unseen.
	if limit := total + workers*otherUSD; mine+theirs > limit {
		t.Errorf("the fleet spent $%.2f (this worker $%.2f, the others $%.2f) against --budget-total $%.2f: over by more than the others' unseen $%.2f",
			mine+theirs, mine, theirs, total, workers*otherUSD)
	}
	if mine+theirs < total-1 {
		t.Errorf("the fleet spent $%.2f (this worker $%.2f, the others $%.2f), stopping well short of $%.2f", mine+theirs, mine, theirs, total)
	}
}
