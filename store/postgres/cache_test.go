package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// bought is claim c's answer at classify, bought under key for $0.25.
func bought(c pipeline.Claim, key, label string) pipeline.FencedTransition {
	paid := pipeline.Usage{PromptTokens: 100, CandidateTokens: 20, TotalTokens: 120}
	return pipeline.FencedTransition{Attempt: c.Attempt, Transition: pipeline.Transition{
		Stage: "classify", ID: c.Item.ID, Seq: c.Seq, Outcome: pipeline.Succeeded,
		Result: pipeline.Result{Output: json.RawMessage(fmt.Sprintf(`{"label":%q}`, label)), Usage: paid},
		Usage:  paid, CostUSD: 0.25, CacheKey: key}}
}

// toClassify ingests n items and moves them all to classify.
func toClassify(t *testing.T, db *DB, n int) {
	t.Helper()
	ingestN(t, db, n)
	storetest.Advance(t, db, "sanitize")
}

func ledgerOf(t *testing.T, db *DB, stage string) pipeline.Ledger {
	t.Helper()
	ls, err := db.Ledgers()
	if err != nil {
		t.Fatal(err)
	}
	return ls[stage]
}

// TestDB_FencedOutCommitRecordsNothing: a worker whose lease was taken
// over can neither cache its answer nor add to the ledger, with a
// success or with a billed give-back; the worker that holds the entry
// does both.
func TestDB_FencedOutCommitRecordsNothing(t *testing.T) {
	a, u := openNew(t, Options{Owner: "a"})
	b := worker(t, u, "b")
	ctx := context.Background()
	toClassify(t, a, 2)
	held := claim(t, a, "classify", 2)
	expireLeases(t, u)
	taken := claim(t, b, "classify", 2)
	if len(held) != 2 || len(taken) != 2 {
		t.Fatalf("a claimed %d, b %d; want 2 each", len(held), len(taken))
	}
	giveBack := pipeline.FencedTransition{Attempt: held[1].Attempt, Transition: pipeline.Transition{
		Stage: "classify", ID: held[1].Item.ID, Seq: held[1].Seq, Outcome: pipeline.Billed,
		Usage: pipeline.Usage{TotalTokens: 7}, CostUSD: 0.5}}
	rej, err := a.CommitFenced(ctx, []pipeline.FencedTransition{bought(held[0], "k", "bug"), giveBack})
	if err != nil || len(rej) != 1 || rej[0] != held[0].Seq {
		t.Fatalf("a's commit with lost leases: rejected %v, %v; want the success only (a give-back is never rejected)", rej, err)
	}
	if _, ok, err := a.CachedAnswer("classify", "k"); ok || err != nil {
		t.Fatalf("a fenced-out commit cached its answer (%v, %v)", ok, err)
	}
	if l := ledgerOf(t, a, "classify"); l != (pipeline.Ledger{}) {
		t.Fatalf("ledger after fenced-out commits = %+v, want nothing", l)
	}
	if rej, err := b.CommitFenced(ctx, []pipeline.FencedTransition{bought(taken[0], "k", "ux")}); err != nil || len(rej) != 0 {
		t.Fatalf("b's commit: rejected %v, %v", rej, err)
	}
	res, ok, err := a.CachedAnswer("classify", "k")
	if err != nil || !ok || string(res.Output) != `{"label":"ux"}` || res.Usage.TotalTokens != 120 {
		t.Fatalf("CachedAnswer = %s %+v %v %v; want b's answer and its usage", res.Output, res.Usage, ok, err)
	}
	if l := ledgerOf(t, a, "classify"); l.Paid != 1 || math.Abs(l.SpentUSD-0.25) > 1e-9 {
		t.Fatalf("ledger = %+v, want b's one paid answer, $0.25", l)
	}
	// The billed give-back of the entry b holds is recorded; the entry
	// stays queued and leased to b.
	back := pipeline.FencedTransition{Attempt: taken[1].Attempt, Transition: pipeline.Transition{
		Stage: "classify", ID: taken[1].Item.ID, Seq: taken[1].Seq, Outcome: pipeline.Billed,
		Usage: pipeline.Usage{TotalTokens: 7}, CostUSD: 0.5}}
	if rej, err := b.CommitFenced(ctx, []pipeline.FencedTransition{back}); err != nil || len(rej) != 0 {
		t.Fatalf("b's give-back: rejected %v, %v", rej, err)
	}
	if l := ledgerOf(t, a, "classify"); l.Paid != 1 || math.Abs(l.SpentUSD-0.75) > 1e-9 {
		t.Fatalf("ledger = %+v, want $0.75 spent (the give-back added, not paid)", l)
	}
	if n, err := a.QueuedThrough("classify"); err != nil || n != 1 {
		t.Fatalf("QueuedThrough(classify) = %d, %v; want 1 (the given-back item)", n, err)
	}
	if rej, err := b.CommitFenced(ctx, []pipeline.FencedTransition{fenced("classify", taken[1])}); err != nil || len(rej) != 0 {
		t.Fatalf("b's commit after its give-back: rejected %v, %v; the lease still holds", rej, err)
	}
	storetest.Invariants(t, a)
}

// TestDB_WorkersBuyingOneKeyAtOnce: two workers answer the same keys at
// the same time, committing in opposite orders. Every commit succeeds,
// each key keeps one answer, every item keeps its own result, and the
// ledger counts every paid answer.
func TestDB_WorkersBuyingOneKeyAtOnce(t *testing.T) {
	const keys = 40
	a, u := openNew(t, Options{Owner: "a"})
	b := worker(t, u, "b")
	toClassify(t, a, 2*keys)
	mine, theirs := claim(t, a, "classify", keys), claim(t, b, "classify", keys)
	if len(mine) != keys || len(theirs) != keys {
		t.Fatalf("claimed %d and %d, want %d each", len(mine), len(theirs), keys)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2*keys)
	for i := range keys {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, errs[i] = a.CommitFenced(context.Background(), []pipeline.FencedTransition{
				bought(mine[i], fmt.Sprint("k", i), "a"), bought(mine[(i+1)%keys], fmt.Sprint("k", (i+1)%keys), "a")})
		}()
		go func() {
			defer wg.Done()
			j := keys - 1 - i
			_, errs[keys+i] = b.CommitFenced(context.Background(), []pipeline.FencedTransition{
				bought(theirs[j], fmt.Sprint("k", j), "b"), bought(theirs[(j+keys-1)%keys], fmt.Sprint("k", (j+keys-1)%keys), "b")})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	for i := range keys {
		res, ok, err := a.CachedAnswer("classify", fmt.Sprint("k", i))
		if err != nil || !ok || (string(res.Output) != `{"label":"a"}` && string(res.Output) != `{"label":"b"}`) {
			t.Fatalf("key k%d: %s %v %v; want one worker's answer", i, res.Output, ok, err)
		}
	}
	for _, c := range append(mine, theirs...) {
		loc, err := a.Locate(c.Item.ID)
		if err != nil {
			t.Fatal(err)
		}
		if loc.Output["classify"] == nil {
			t.Fatalf("item %s lost its result: %+v", c.Item.ID, loc)
		}
	}
	if l := ledgerOf(t, a, "classify"); l.Paid != 2*keys || math.Abs(l.SpentUSD-0.25*2*keys) > 1e-9 {
		t.Fatalf("ledger = %+v, want %d paid answers, $%.2f", l, 2*keys, 0.25*2*keys)
	}
	storetest.Invariants(t, a)
}

// TestOpen_MigratesAVersion1Pipeline: a pipeline written before the
// answer cache, the fleet's learned rate and worker sessions (schema version 1) is refused read-only, migrated by the
// first writable open with its items intact, and then caches.
func TestOpen_MigratesAVersion1Pipeline(t *testing.T) {
	db, u := openNew(t, Options{})
	toClassify(t, db, 3)
	db.Close()
	sql(t, u, downgradeRows+downgradeHash+`DROP TABLE cube_cell, cube_quote, cube_key; DROP TABLE batch_job; DROP SEQUENCE batch_job_seq; ALTER TABLE todo DROP COLUMN batch, DROP COLUMN batch_sends; DROP TABLE answer, ledger, answer_flight, worker_session; ALTER TABLE todo DROP COLUMN session; ALTER TABLE quota DROP COLUMN given_us, DROP COLUMN safe_rate, DROP COLUMN refused_rate, DROP COLUMN bounded, DROP COLUMN stairs, DROP COLUMN held, DROP COLUMN calm, DROP COLUMN granted, DROP COLUMN limited, DROP COLUMN mark_at, DROP COLUMN mark_sent, DROP COLUMN mark_limited, DROP COLUMN window_us, DROP COLUMN stage_at, DROP COLUMN stage_sent, DROP COLUMN prev_at, DROP COLUMN prev_sent; UPDATE meta SET value = '1' WHERE key = 'schema'`)
	var old *OldSchemaError
	if _, err := Open(context.Background(), u, Options{Stages: storetest.Stages, ReadOnly: true}); !errors.As(err, &old) || old.Version != 1 || old.Want != SchemaVersion || strings.Contains(err.Error(), "sawtooth migrate") {
		t.Fatalf("a read-only open of a version 1 schema: %v; want the versions, for the CLI to word", err)
	}
	a := worker(t, u, "a")
	c, err := a.Counts()
	if err != nil || c.Items != 3 {
		t.Fatalf("after the migration: counts %+v, %v; want the 3 items", c, err)
	}
	held := claim(t, a, "classify", 1)
	if rej, err := a.CommitFenced(context.Background(), []pipeline.FencedTransition{bought(held[0], "k", "bug")}); err != nil || len(rej) != 0 {
		t.Fatalf("commit after the migration: rejected %v, %v", rej, err)
	}
	if _, ok, err := a.CachedAnswer("classify", "k"); !ok || err != nil {
		t.Fatalf("no cached answer after the migration (%v, %v)", ok, err)
	}
}

// TestDB_AnswerFlights: one worker at a time holds a key's flight; its
// holder may take it again; it ends when its holder lands it, when its
// lease ends, or with the commit of the answer it flew for, applied or
// fenced off, and never by another worker's commit or landing.
func TestDB_AnswerFlights(t *testing.T) {
	a, u := openNew(t, Options{Owner: "a"})
	b := worker(t, u, "b")
	ctx := context.Background()
	take := func(db *DB, key string, want bool) {
		t.Helper()
		if got, err := db.TakeFlight(ctx, "classify", key, testLease); err != nil || got != want {
			t.Fatalf("%s takes %s: %v, %v; want %v", db.owner, key, got, err, want)
		}
	}
	take(a, "k1", true)
	take(b, "k1", false)
	take(a, "k1", true) // its own, again
	if err := b.LandFlight(ctx, "classify", "k1"); err != nil {
		t.Fatal(err)
	}
	take(b, "k1", false) // b's landing does not end a's flight
	if err := a.LandFlight(ctx, "classify", "k1"); err != nil {
		t.Fatal(err)
	}
	take(b, "k1", true)
	sql(t, u, `UPDATE answer_flight SET until = now() - interval '1 second'`)
	take(a, "k1", true) // b's lease ended

	// Commits: a flies for k2 and k3; b's commit carrying k2 leaves a's
	// flight; a's commits of k2 (applied) and k3 (fenced off) end them.
	toClassify(t, a, 3)
	take(a, "k2", true)
	take(a, "k3", true)
	held := claim(t, b, "classify", 1)
	if _, err := b.CommitFenced(ctx, []pipeline.FencedTransition{bought(held[0], "k2", "b")}); err != nil {
		t.Fatal(err)
	}
	take(b, "k2", false)
	mine := claim(t, a, "classify", 2)
	stale := bought(mine[1], "k3", "a")
	stale.Attempt-- // fenced off
	if rej, err := a.CommitFenced(ctx, []pipeline.FencedTransition{bought(mine[0], "k2", "a"), stale}); err != nil || len(rej) != 1 {
		t.Fatalf("a's commit: rejected %v, %v; want the stale one", rej, err)
	}
	take(b, "k2", true)
	take(b, "k3", true)
}
