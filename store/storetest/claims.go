package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// claimLease is long enough never to end during a test: the suite ends
// leases by Release, never by waiting.
const claimLease = time.Hour

// testClaims checks pipeline.Claimer, for a store that implements it: a
// claim leases each entry once, a release makes it claimable again at a
// new attempt, the old claim can then neither renew nor commit, the new
// one commits once, and a re-commit is refused. It is one script, kept
// whole: each step works on the claims the steps before it made.
func testClaims(t *testing.T, db pipeline.Database) {
	cl, ok := db.(pipeline.Claimer)
	if !ok {
		t.Skipf("%T does not implement pipeline.Claimer: one process owns its queues", db)
	}
	ctx := context.Background()
	for i := range 5 {
		id := fmt.Sprintf("c%d", i)
		ingest(t, db, Record(id, "bug "+id, "x", "4"))
	}
	claim := func(max int) []pipeline.Claim {
		t.Helper()
		cs, err := cl.Claim(ctx, "sanitize", max, claimLease)
		if err != nil {
			t.Fatalf("Claim: %v", err)
		}
		return cs
	}
	first, rest, none := claim(3), claim(10), claim(10)
	if len(first) != 3 || len(rest) != 2 || len(none) != 0 {
		t.Fatalf("claims of 3, 10, 10 from 5 entries got %d, %d, %d", len(first), len(rest), len(none))
	}
	var ids []string
	for _, c := range append(first, rest...) {
		if c.Attempt != 1 || c.Item.Text == "" {
			t.Errorf("claim %+v: want attempt 1 and the record", c)
		}
		ids = append(ids, c.Item.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"c0", "c1", "c2", "c3", "c4"}) {
		t.Fatalf("claimed %v, want each entry once", ids)
	}
	if lost, err := cl.Renew(ctx, "sanitize", first, claimLease); err != nil || len(lost) != 0 {
		t.Fatalf("Renew of live leases: lost %v, %v", lost, err)
	}

	old := first[0]
	if err := cl.Release(ctx, "sanitize", []pipeline.Claim{old}); err != nil {
		t.Fatal(err)
	}
	again := claim(10)
	if len(again) != 1 || again[0].Seq != old.Seq || again[0].Attempt != old.Attempt+1 {
		t.Fatalf("after a release, claimed %+v; want entry %d at attempt %d", again, old.Seq, old.Attempt+1)
	}
	if lost, err := cl.Renew(ctx, "sanitize", []pipeline.Claim{old}, claimLease); err != nil || !slices.Equal(lost, []uint64{old.Seq}) {
		t.Fatalf("Renew of a claim taken again: lost %v, %v; want [%d]", lost, err, old.Seq)
	}
	fence := func(c pipeline.Claim) pipeline.FencedTransition {
		return pipeline.FencedTransition{Transition: success("sanitize", c.Queued), Attempt: c.Attempt}
	}
	commitFenced := func(c pipeline.Claim) []uint64 {
		t.Helper()
		rej, err := cl.CommitFenced(ctx, []pipeline.FencedTransition{fence(c)})
		if err != nil {
			t.Fatalf("CommitFenced: %v", err)
		}
		return rej
	}
	if rej := commitFenced(old); !slices.Equal(rej, []uint64{old.Seq}) {
		t.Fatalf("stale claim's commit: rejected %v, want [%d]", rej, old.Seq)
	}
	wantAt(t, db, old.Item.ID, "sanitize", "queued")
	if rej := commitFenced(again[0]); len(rej) != 0 {
		t.Fatalf("current claim's commit rejected %v", rej)
	}
	wantAt(t, db, old.Item.ID, "classify", "queued")
	if rej := commitFenced(again[0]); !slices.Equal(rej, []uint64{old.Seq}) {
		t.Fatalf("a second commit of one claim: rejected %v, want [%d]", rej, old.Seq)
	}
	// A batch: applied ones move, a stale one does not.
	rej, err := cl.CommitFenced(ctx, []pipeline.FencedTransition{fence(first[1]), fence(rest[0]), {Transition: success("sanitize", first[2].Queued), Attempt: first[2].Attempt + 7}})
	if err != nil || !slices.Equal(rej, []uint64{first[2].Seq}) {
		t.Fatalf("batch with one wrong attempt: rejected %v, %v; want [%d]", rej, err, first[2].Seq)
	}
	wantAt(t, db, first[1].Item.ID, "classify", "queued")
	wantAt(t, db, first[2].Item.ID, "sanitize", "queued")
	if err := cl.Release(ctx, "sanitize", append(first[2:], rest[1:]...)); err != nil {
		t.Fatal(err)
	}
	Finish(t, db)
}
