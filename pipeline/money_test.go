package pipeline

import "testing"

func TestNanoUSDOf(t *testing.T) {
	tests := []struct {
		usd  float64
		want NanoUSD
	}{
		{0, 0}, {1, 1e9}, {0.0000000005, 1}, {-0.0000000005, -1}, {0.1 + 0.2, 300_000_000}, {12.3456789012, 12_345_678_901},
	}
	for _, tc := range tests {
		if got := NanoUSDOf(tc.usd); got != tc.want {
			t.Errorf("NanoUSDOf(%v) = %d, want %d", tc.usd, got, tc.want)
		}
	}
	// A million small costs add up exactly in nanodollars.
	var sum NanoUSD
	for range 1_000_000 {
		sum += NanoUSDOf(0.000075)
	}
	if sum.USD() != 75 {
		t.Errorf("a million $0.000075 = $%v, want $75 exactly", sum.USD())
	}
}

func TestNanoUSD_rounding(t *testing.T) {
	tests := []struct {
		name         string
		usd          float64
		of, up, down NanoUSD
	}{
		{"whole", 2, 2e9, 2e9, 2e9},
		{"a fifth above", 0.0000000012, 1, 2, 1},
		{"four fifths above", 0.0000000018, 2, 2, 1},
		{"negative", -0.0000000012, -1, -1, -2},
		{"zero", 0, 0, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := NanoUSDOf(tc.usd); got != tc.of {
				t.Errorf("NanoUSDOf(%v) = %d, want %d", tc.usd, got, tc.of)
			}
			if got := NanoUSDUp(tc.usd); got != tc.up {
				t.Errorf("NanoUSDUp(%v) = %d, want %d", tc.usd, got, tc.up)
			}
			if got := NanoUSDDown(tc.usd); got != tc.down {
				t.Errorf("NanoUSDDown(%v) = %d, want %d", tc.usd, got, tc.down)
			}
		})
	}
}

func TestLedgerSum_AddTransition(t *testing.T) {
	paid := Usage{PromptTokens: 10, CandidateTokens: 5}
	tests := []struct {
		name    string
		t       Transition
		changed bool
		want    LedgerSum
	}{
		{"a bought answer", Transition{Outcome: Succeeded, Usage: paid, CostUSD: 0.002}, true, LedgerSum{Spent: 2_000_000, Paid: 1}},
		{"a reused answer", Transition{Outcome: Succeeded, Cached: true, SavedUSD: 0.002}, true, LedgerSum{Saved: 2_000_000, Cached: 1}},
		{"a dead letter billed", Transition{Outcome: DeadLettered, Usage: paid, CostUSD: 0.001}, true, LedgerSum{Spent: 1_000_000}},
		{"a skip: no money", Transition{Outcome: Succeeded}, false, LedgerSum{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s LedgerSum
			if changed := s.AddTransition(&tc.t); changed != tc.changed || s != tc.want {
				t.Errorf("AddTransition = %v, %+v; want %v, %+v", changed, s, tc.changed, tc.want)
			}
			var back LedgerSum
			back.AddLedger(s.Ledger())
			if back != s {
				t.Errorf("Ledger round trip %+v -> %+v", s, back)
			}
		})
	}
}
