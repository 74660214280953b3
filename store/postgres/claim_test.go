package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

const testLease = time.Minute

// worker opens another handle on the pipeline at url, as another process
// would, named owner.
func worker(t testing.TB, url, owner string) *DB {
	t.Helper()
	db, err := Open(context.Background(), url, Options{Stages: storetest.Stages, Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func ingestN(t testing.TB, db *DB, n int) {
	t.Helper()
	recs := make([]pipeline.Record, n)
	for i := range recs {
		recs[i] = storetest.Record(fmt.Sprintf("i%05d", i), fmt.Sprintf("%s i%05d", []string{"bug", "ux", "praise"}[i%3], i), "x", fmt.Sprint(i%5+1))
	}
	if _, err := db.Ingest(recs); err != nil {
		t.Fatal(err)
	}
}

func claim(t testing.TB, db *DB, stage string, max int) []pipeline.Claim {
	t.Helper()
	cs, err := db.Claim(context.Background(), stage, max, testLease)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return cs
}

// fenced is the success of claim c at stage.
func fenced(stage string, c pipeline.Claim) pipeline.FencedTransition {
	return pipeline.FencedTransition{Attempt: c.Attempt, Transition: pipeline.Transition{
		Stage: stage, ID: c.Item.ID, Seq: c.Seq, Outcome: pipeline.Succeeded,
		Result: pipeline.Result{Output: storetest.Output(stage, c.Item)}, Usage: pipeline.Usage{TotalTokens: 1}}}
}

// expireLeases ends every lease of stage on the database's clock, as
// time passing would.
func expireLeases(t testing.TB, url string) {
	t.Helper()
	sql(t, url, `UPDATE todo SET visible_at = now() - interval '1 second' WHERE visible_at > now()`)
}

func TestDB_ClaimLeasesEachEntryOnce(t *testing.T) {
	a, u := openNew(t, Options{Owner: "a"})
	b := worker(t, u, "b")
	ingestN(t, a, 10)
	first := claim(t, a, "sanitize", 4)
	rest := claim(t, b, "sanitize", 100)
	if len(first) != 4 || len(rest) != 6 {
		t.Fatalf("claims of 4 and 100 from 10 entries got %d and %d", len(first), len(rest))
	}
	seen := map[uint64]bool{}
	for _, c := range append(first, rest...) {
		if seen[c.Seq] || c.Attempt != 1 || c.Item.Text == "" {
			t.Fatalf("claim %+v: repeated, or attempt not 1, or no record", c)
		}
		seen[c.Seq] = true
	}
	if more := claim(t, a, "sanitize", 100); len(more) != 0 {
		t.Fatalf("%d entries claimed while all are leased", len(more))
	}
	hs, err := a.Holders(context.Background())
	if err != nil || len(hs) != 2 || hs[0].Owner != "a" || hs[0].Held != 4 || hs[1].Owner != "b" || hs[1].Held != 6 || hs[1].Stage != "sanitize" {
		t.Fatalf("Holders = %+v, %v; want a holding 4 and b 6 at sanitize", hs, err)
	}
	if err := b.Release(context.Background(), "sanitize", rest[:2]); err != nil {
		t.Fatal(err)
	}
	again := claim(t, a, "sanitize", 100)
	if len(again) != 2 || again[0].Seq != rest[0].Seq || again[0].Attempt != 2 {
		t.Fatalf("after a release of 2, claimed %+v", again)
	}
	if _, err := a.Claim(context.Background(), "sanitize", 1, 0); !errors.Is(err, errLease) {
		t.Fatalf("a zero lease: %v", err)
	}
}

// TestDB_LostLeaseCannotCommit: worker a's lease runs out, b claims the
// entry, and a can neither renew nor commit it; b commits it once.
func TestDB_LostLeaseCannotCommit(t *testing.T) {
	a, u := openNew(t, Options{Owner: "a"})
	b := worker(t, u, "b")
	ctx := context.Background()
	ingestN(t, a, 3)
	held := claim(t, a, "sanitize", 3)
	if lost, err := a.Renew(ctx, "sanitize", held, testLease); err != nil || len(lost) != 0 {
		t.Fatalf("Renew of live leases: lost %v, %v", lost, err)
	}
	expireLeases(t, u)
	// An expired lease nobody claimed since still fences: a commits the
	// first entry.
	if rej, err := a.CommitFenced(ctx, []pipeline.FencedTransition{fenced("sanitize", held[0])}); err != nil || len(rej) != 0 {
		t.Fatalf("commit after expiry, unclaimed: rejected %v, %v", rej, err)
	}
	taken := claim(t, b, "sanitize", 10)
	if len(taken) != 2 || taken[0].Attempt != 2 {
		t.Fatalf("b claimed %+v, want the 2 expired entries at attempt 2", taken)
	}
	lost, err := a.Renew(ctx, "sanitize", held, testLease)
	if err != nil || !slices.Equal(lost, []uint64{held[0].Seq, held[1].Seq, held[2].Seq}) {
		t.Fatalf("a's Renew after b's claim: lost %v, %v; want all three", lost, err)
	}
	stale := []pipeline.FencedTransition{fenced("sanitize", held[1]), fenced("sanitize", held[2])}
	rej, err := a.CommitFenced(ctx, stale)
	if err != nil || len(rej) != 2 {
		t.Fatalf("a's commit with a lost lease: rejected %v, %v; want both", rej, err)
	}
	if q := claim(t, a, "classify", 10); len(q) != 1 {
		t.Fatalf("after a's fenced-off commit, classify holds %d entries, want 1", len(q))
	}
	if rej, err := b.CommitFenced(ctx, []pipeline.FencedTransition{fenced("sanitize", taken[0]), fenced("sanitize", taken[1])}); err != nil || len(rej) != 0 {
		t.Fatalf("b's commit: rejected %v, %v", rej, err)
	}
	if usage, _ := a.Usage(); usage["sanitize"].TotalTokens != 3 {
		t.Fatalf("usage = %+v, want 3 tokens (the rejected commits record none)", usage)
	}
	storetest.Invariants(t, a)
}

// TestDB_WorkersDrainOnePipeline: workers on their own handles claim and
// commit concurrently until every stage is empty; each item is done
// exactly once and the tally equals its recomputation.
func TestDB_WorkersDrainOnePipeline(t *testing.T) {
	const items, workers = 300, 4
	db, u := openNew(t, Options{})
	ingestN(t, db, items)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		h := worker(t, u, fmt.Sprint("w", w))
		wg.Go(func() {
			for {
				idle := true
				for _, s := range storetest.Stages {
					cs, err := h.Claim(ctx, s.Name, 7, testLease)
					if err != nil {
						errs <- err
						return
					}
					var ts []pipeline.FencedTransition
					for _, c := range cs {
						ts = append(ts, fenced(s.Name, c))
					}
					if rej, err := h.CommitFenced(ctx, ts); err != nil || len(rej) > 0 {
						errs <- fmt.Errorf("commit: rejected %v, %v", rej, err)
						return
					}
					idle = idle && len(cs) == 0
				}
				if idle {
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// A worker stops when it finds every stage empty at one pass; items
	// another worker was still committing may remain: finish them.
	storetest.Finish(t, db)
	c, err := db.Counts()
	if err != nil || c.Done != items {
		t.Fatalf("Counts = %+v, %v; want %d done", c, err, items)
	}
	usage, _ := db.Usage()
	for _, s := range storetest.Stages {
		if got := usage[s.Name].TotalTokens; got != items {
			t.Errorf("%s applied %d transitions (one token each), want exactly %d", s.Name, got, items)
		}
	}
	storetest.Invariants(t, db)
}

// TestDB_WorkersBesideEdits: while workers claim and commit, another
// process edits records, re-runs a stage and re-queues dead letters.
// Nothing deadlocks for good, no stale result lands, and once drained
// every item is done exactly once with a tally equal to its
// recomputation.
func TestDB_WorkersBesideEdits(t *testing.T) {
	const items, workers = 200, 3
	db, u := openNew(t, Options{})
	ingestN(t, db, items)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, workers+1)
	for w := range workers {
		h := worker(t, u, fmt.Sprint("w", w))
		wg.Go(func() {
			for ctx.Err() == nil {
				for i, s := range storetest.Stages {
					cs, err := h.Claim(ctx, s.Name, 5, testLease)
					if err != nil {
						if ctx.Err() == nil {
							errs <- err
						}
						return
					}
					ts := make([]pipeline.FencedTransition, len(cs))
					for j, c := range cs {
						ts[j] = fenced(s.Name, c)
						if i == 1 && j == 0 { // some dead letters at classify
							ts[j].Outcome = pipeline.DeadLettered
							ts[j].Dead = pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: "no"}
						}
					}
					if _, err := h.CommitFenced(ctx, ts); err != nil {
						if ctx.Err() == nil {
							errs <- err
						}
						return
					}
				}
			}
		})
	}
	editor := worker(t, u, "editor")
	for round := range 15 {
		var recs []pipeline.Record
		for i := round; i < items; i += 15 {
			recs = append(recs, storetest.Record(fmt.Sprintf("i%05d", i), fmt.Sprintf("ux edited %d", round), "y", fmt.Sprint(round%5)))
		}
		if _, err := editor.Ingest(recs); err != nil {
			t.Fatal(err)
		}
		if round%5 == 4 {
			if _, err := editor.Rerun("classify"); err != nil {
				t.Fatal(err)
			}
			if _, err := editor.Requeue("classify", nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	storetest.Finish(t, db)
	if _, err := db.Requeue("classify", nil); err != nil {
		t.Fatal(err)
	}
	storetest.Finish(t, db)
	if c, err := db.Counts(); err != nil || c.Done != items {
		t.Fatalf("Counts = %+v, %v; want %d done", c, err, items)
	}
	storetest.Invariants(t, db)
}
