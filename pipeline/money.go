package pipeline

import "math"

// NanoUSD is money in billionths of a US dollar. Money is summed as
// integers, so that a million calls' costs add up to the cent in any
// order and two stores, or a store and the simulator's bill, agree
// exactly; a price per token is far above a billionth of a dollar.
type NanoUSD int64

// NanoUSDOf is usd to the nearest billionth (halves away from zero).
func NanoUSDOf(usd float64) NanoUSD { return NanoUSD(math.Round(usd * 1e9)) }

// NanoUSDUp is usd rounded up to a billionth, for a reservation: what
// is held back never falls short of what it stands for.
func NanoUSDUp(usd float64) NanoUSD { return NanoUSD(math.Ceil(usd * 1e9)) }

// NanoUSDDown is usd rounded down to a billionth, for a limit: a cap is
// never raised by its rounding.
func NanoUSDDown(usd float64) NanoUSD { return NanoUSD(math.Floor(usd * 1e9)) }

// USD is n in dollars.
func (n NanoUSD) USD() float64 { return float64(n) / 1e9 }

func toNanos(usd float64) int64 { return int64(NanoUSDOf(usd)) }
func toUSD(n int64) float64     { return NanoUSD(n).USD() }

// LedgerSum is a stage's Ledger as the stores keep it: exact sums.
type LedgerSum struct {
	Spent, Saved NanoUSD
	Paid, Cached int64
}

// AddTransition adds what applied transition t does to the ledger:
// what it was billed, and for an answer reused from the cache what it
// saved; a bought answer counts as paid. It reports whether t changed
// anything, so that a store writes nothing for a transition that
// carries no money.
func (s *LedgerSum) AddTransition(t *Transition) bool {
	if t.CostUSD == 0 && !t.Cached && t.Usage == (Usage{}) {
		return false
	}
	s.Spent += NanoUSDOf(t.CostUSD)
	if t.Cached {
		s.Cached++
		s.Saved += NanoUSDOf(t.SavedUSD)
	} else if t.Outcome == Succeeded && t.Usage != (Usage{}) {
		s.Paid++
	}
	return true
}

// AddLedger adds a whole ledger (a copy from another store).
func (s *LedgerSum) AddLedger(l Ledger) {
	s.Spent += NanoUSDOf(l.SpentUSD)
	s.Saved += NanoUSDOf(l.SavedUSD)
	s.Paid += l.Paid
	s.Cached += l.Cached
}

// Ledger is s in dollars.
func (s LedgerSum) Ledger() Ledger {
	return Ledger{SpentUSD: s.Spent.USD(), SavedUSD: s.Saved.USD(), Paid: s.Paid, Cached: s.Cached}
}
