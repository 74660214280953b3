package storetest

import (
	"math"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// testAnswerCache is the contract of the optional pipeline.AnswerCache,
// pipeline.Ledgers and pipeline.QueueCounter: a Succeeded transition
// carrying a cache key keeps its answer; cached, billed and dead-lettered
// transitions add to the stage's ledger with the transition; a stale
// transition records nothing; a Billed transition leaves its item queued.
// A store without them skips it (the runner then caches only within a
// run and refuses --budget-total).
func testAnswerCache(t *testing.T, db pipeline.Database) {
	ac, okCache := db.(pipeline.AnswerCache)
	lg, okLedger := db.(pipeline.Ledgers)
	qc, okCount := db.(pipeline.QueueCounter)
	if !okCache || !okLedger || !okCount {
		t.Skip("the store keeps no answer cache or ledger")
	}
	ingest(t, db, Record("a", "great app", "x", ""), Record("b", "great app", "x", ""), Record("c", "bug", "x", ""), Record("d", "bug d", "x", ""))
	Advance(t, db, "sanitize")
	qs := queued(t, db, "classify")
	paid := pipeline.Usage{PromptTokens: 100, CandidateTokens: 20, TotalTokens: 120}
	answered := success("classify", qs[0])
	answered.Result.Usage, answered.Usage, answered.CostUSD, answered.CacheKey = paid, paid, 0.25, "k1"
	reused := success("classify", qs[1])
	reused.CacheKey, reused.Cached, reused.SavedUSD = "k1", true, 0.25
	dead := deadLetter("classify", qs[2], "blocked")
	dead.Usage, dead.CostUSD = paid, 0.125
	billed := pipeline.Transition{Stage: "classify", ID: qs[3].Item.ID, Seq: qs[3].Seq, Outcome: pipeline.Billed, Usage: paid, CostUSD: 0.0625}
	commit(t, db, answered, reused, dead, billed)
	commit(t, db, answered, reused, dead) // stale: recorded once

	res, ok, err := ac.CachedAnswer("classify", "k1")
	if err != nil || !ok || string(res.Output) != string(answered.Result.Output) || res.Usage != paid {
		t.Fatalf("CachedAnswer(classify, k1) = %s %+v %v %v; want the answer and what it was billed", res.Output, res.Usage, ok, err)
	}
	if _, ok, _ := ac.CachedAnswer("aggregate", "k1"); ok {
		t.Error("an answer is shared between stages")
	}
	if _, ok, _ := ac.CachedAnswer("classify", "k2"); ok {
		t.Error("an unknown key has an answer")
	}
	ledgers, err := lg.Ledgers()
	if err != nil {
		t.Fatal(err)
	}
	l := ledgers["classify"]
	if math.Abs(l.SpentUSD-0.4375) > 1e-9 || math.Abs(l.SavedUSD-0.25) > 1e-9 || l.Paid != 1 || l.Cached != 1 {
		t.Errorf("ledger %+v, want $0.4375 spent, $0.25 saved, 1 paid, 1 cached", l)
	}
	wantAt(t, db, qs[3].Item.ID, "classify", "queued")
	if n, err := qc.QueuedThrough("classify"); err != nil || n != 1 {
		t.Errorf("QueuedThrough(classify) = %d, %v; want 1 (the billed item)", n, err)
	}
}
