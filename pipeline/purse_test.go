package pipeline

import "testing"

// TestPurse_Reserve steps a purse through reservations and settlements at
// explicit amounts (nanodollars): a call starts only if it fits with what
// is spent and reserved; one that does not waits while calls are in
// flight, and stops the stage only when none is.
func TestPurse_Reserve(t *testing.T) {
	type step struct {
		reserve      int64 // a reservation to ask for, or
		settle       int64 // settle the oldest open reservation as billed this much
		wantOK       bool
		wantWait     bool
		wantCapped   string
		wantSpent    int64
		isSettlement bool
	}
	tests := []struct {
		name   string
		budget Budget
		before int64
		steps  []step
	}{
		{"fits, then waits for the call in flight, then stops", Budget{RunUSD: 100e-9}, 0, []step{
			{reserve: 60, wantOK: true},
			{reserve: 60, wantWait: true},
			{isSettlement: true, settle: 50, wantSpent: 50},
			{reserve: 60, wantCapped: "run"},
		}},
		{"a settlement under its reservation leaves room", Budget{RunUSD: 100e-9}, 0, []step{
			{reserve: 60, wantOK: true},
			{isSettlement: true, settle: 20, wantSpent: 20},
			{reserve: 60, wantOK: true},
			{reserve: 20, wantOK: true},
			{reserve: 1, wantWait: true},
		}},
		{"the lifetime cap counts what earlier runs spent", Budget{TotalUSD: 100e-9}, 90, []step{
			{reserve: 10, wantOK: true},
			{isSettlement: true, settle: 10, wantSpent: 10},
			{reserve: 1, wantCapped: "total"},
		}},
		{"the run cap names itself when both are crossed", Budget{RunUSD: 5e-9, TotalUSD: 5e-9}, 0, []step{
			{reserve: 60, wantCapped: "run"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := purse{budget: tc.budget, before: tc.before, settled: make(chan struct{})}
			var open []int64
			for n, s := range tc.steps {
				if s.isSettlement {
					p.settle(open[0], s.settle)
					open = open[1:]
					if _, spent, _ := p.figures(); spent != s.wantSpent {
						t.Fatalf("step %d: spent %d, want %d", n, spent, s.wantSpent)
					}
					continue
				}
				ok, wait := p.reserve(s.reserve)
				if ok {
					open = append(open, s.reserve)
				}
				_, _, capped := p.figures()
				if ok != s.wantOK || (wait != nil) != s.wantWait || capped != s.wantCapped {
					t.Fatalf("step %d: reserve %d = ok %v, wait %v, capped %q; want %v, %v, %q", n, s.reserve, ok, wait != nil, capped, s.wantOK, s.wantWait, s.wantCapped)
				}
			}
		})
	}
}
