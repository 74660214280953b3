package storetest

import (
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// testDeadLetterFacts: a dead letter reads back with every fact it was
// committed with (class, cause, message, attempts, times), from Locate and
// ForEachDead alike: the CLI words the next step from them.
func testDeadLetterFacts(t *testing.T, db pipeline.Database) {
	ingest(t, db, Record("a", "bug a", "x", ""), Record("b", "bug b", "x", ""))
	Advance(t, db, "sanitize")
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	want := map[string]pipeline.DeadLetter{
		"a": {Class: pipeline.ClassPermanent, Cause: pipeline.CauseClaimsExhausted, Message: "claimed 5 times and never finished", Attempts: 5, First: at, Last: at.Add(time.Minute)},
		"b": {Class: pipeline.ClassTransient, Message: "gave up after 3 attempts", Attempts: 3, First: at, Last: at},
	}
	var ts []pipeline.Transition
	for _, q := range queued(t, db, "classify") {
		ts = append(ts, pipeline.Transition{Stage: "classify", ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.DeadLettered, Dead: want[q.Item.ID]})
	}
	commit(t, db, ts...)
	same := func(got, want pipeline.DeadLetter) bool {
		return got.Class == want.Class && got.Cause == want.Cause && got.Message == want.Message && got.Attempts == want.Attempts &&
			got.First.Equal(want.First) && got.Last.Equal(want.Last)
	}
	for id, w := range want {
		if loc := locate(t, db, id); loc.Dead == nil || !same(*loc.Dead, w) {
			t.Errorf("Locate(%s).Dead = %+v, want %+v", id, loc.Dead, w)
		}
	}
	n := 0
	if err := db.ForEachDead("classify", func(e pipeline.DeadEntry) error {
		n++
		if !same(e.Dead, want[e.ID]) {
			t.Errorf("ForEachDead: %s = %+v, want %+v", e.ID, e.Dead, want[e.ID])
		}
		return nil
	}); err != nil || n != len(want) {
		t.Fatalf("ForEachDead: %d letters, %v; want %d", n, err, len(want))
	}
}
