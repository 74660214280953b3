package store

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// TestDB_AnswersAndLedger: a Succeeded transition carrying a cache key
// stores its answer; cached, billed and dead-lettered transitions add to
// the stage's ledger in their own transaction; a stale transition (applied
// already) records nothing; a Billed transition leaves its item queued.
func TestDB_AnswersAndLedger(t *testing.T) {
	db := openTest(t)
	qs := queuedAtClassify(t, db, recs("a", "b", "c", "d", "e")...)
	seq := map[string]uint64{}
	for _, q := range qs {
		seq[q.Item.ID] = q.Seq
	}
	paid := pipeline.Usage{PromptTokens: 100, CandidateTokens: 20, TotalTokens: 120}
	answer := json.RawMessage(`{"label":"praise"}`)
	ts := []pipeline.Transition{
		{Stage: "classify", ID: "a", Seq: seq["a"], Outcome: pipeline.Succeeded, Result: pipeline.Result{Output: answer, Usage: paid},
			Usage: paid, CostUSD: 0.25, CacheKey: "k1"},
		{Stage: "classify", ID: "b", Seq: seq["b"], Outcome: pipeline.Succeeded, Result: pipeline.Result{Output: answer},
			CacheKey: "k1", Cached: true, SavedUSD: 0.25},
		{Stage: "classify", ID: "c", Seq: seq["c"], Outcome: pipeline.DeadLettered, Dead: pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: "blocked"},
			Usage: paid, CostUSD: 0.125},
		{Stage: "classify", ID: "d", Seq: seq["d"], Outcome: pipeline.Billed, Usage: paid, CostUSD: 0.0625},
	}
	if err := db.Commit(ts); err != nil {
		t.Fatal(err)
	}
	// The outcomes again are stale: they record nothing more. (d's bill
	// is not sent again: its item is still queued, so a second bill would
	// be a new one.)
	if err := db.Commit(ts[:3]); err != nil {
		t.Fatal(err)
	}

	res, ok, err := db.CachedAnswer("classify", "k1")
	if err != nil || !ok || string(res.Output) != string(answer) || res.Usage != paid {
		t.Fatalf("CachedAnswer(k1) = %s %+v %v %v; want the answer and its usage", res.Output, res.Usage, ok, err)
	}
	if _, ok, _ := db.CachedAnswer("classify", "k2"); ok {
		t.Error("an unknown key has an answer")
	}
	if _, ok, _ := db.CachedAnswer("aggregate", "k1"); ok {
		t.Error("a key is shared between stages")
	}
	ledgers, err := db.Ledgers()
	if err != nil {
		t.Fatal(err)
	}
	l := ledgers["classify"]
	if math.Abs(l.SpentUSD-0.4375) > 1e-9 || math.Abs(l.SavedUSD-0.25) > 1e-9 || l.Paid != 1 || l.Cached != 1 {
		t.Errorf("ledger %+v, want $0.4375 spent, $0.25 saved, 1 paid, 1 cached", l)
	}
	usage, err := db.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if want := paid.Add(paid).Add(paid); usage["classify"] != want {
		t.Errorf("usage %+v, want %+v: a, c and d's billed calls", usage["classify"], want)
	}
	left, err := db.QueuedThrough("classify")
	if err != nil || left != 2 {
		t.Errorf("QueuedThrough(classify) = %d, %v; want d and e", left, err)
	}
	if left, _ := db.QueuedThrough("sanitize"); left != 0 {
		t.Errorf("QueuedThrough(sanitize) = %d, want 0", left)
	}
	if _, err := db.QueuedThrough("nope"); err == nil {
		t.Error("QueuedThrough of an unknown stage: no error")
	}
}

// TestDB_LedgerEmptyOnOldFiles: a file written before the cache and the
// ledger existed reads as having neither.
func TestDB_LedgerEmptyOnOldFiles(t *testing.T) {
	db := openTest(t)
	ledgers, err := db.Ledgers()
	if err != nil || len(ledgers) != 0 {
		t.Errorf("Ledgers = %v, %v; want none", ledgers, err)
	}
	if _, ok, err := db.CachedAnswer("classify", "k"); ok || err != nil {
		t.Errorf("CachedAnswer = %v, %v; want no answer, no error", ok, err)
	}
}
