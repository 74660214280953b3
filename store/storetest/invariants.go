package storetest

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Invariants checks what must hold after any sequence of operations: each
// item is in exactly one place (queued once at one stage, or dead at one
// stage, or done) and Counts, Queued, ForEachDead and Locate agree on
// it; every item has the outputs of exactly the stages it passed; the
// stored tally equals the tally recomputed from the done items' last
// outputs; a stored cube equals the one recomputed from the done items
// (CubeMatchesRecount); and the store's own Check finds nothing.
func Invariants(t testing.TB, db pipeline.Database) {
	t.Helper()
	counts, err := db.Counts()
	if err != nil {
		t.Fatalf("Counts: %v", err)
	}
	pl := places{t: t, at: map[string]string{}}
	queuedN, deadN := queuedAndDead(t, db, counts, &pl)
	done, recomputed := doneItems(t, db, &pl)
	held := heldItems(t, db, pl.put)
	if counts.Done != done || counts.Items != queuedN+deadN+done+held || counts.Items != len(pl.at) {
		t.Errorf("Counts = %+v; found %d queued, %d dead, %d done, %d in batch jobs, %d distinct items", counts, queuedN, deadN, done, held, len(pl.at))
	}
	for id, where := range pl.at {
		locateAgrees(t, db, id, where)
	}
	stored, err := db.Tally()
	if err != nil {
		t.Fatalf("Tally: %v", err)
	}
	for _, d := range stored.Diff(recomputed) {
		t.Errorf("stored tally != recomputed: %s", d)
	}
	CubeMatchesRecount(t, db, false)
	problems, err := db.Check()
	if err != nil || len(problems) > 0 {
		t.Errorf("Check: %v %v", err, problems)
	}
}

// places is where the walks of Invariants found each item.
type places struct {
	t  testing.TB
	at map[string]string
}

// put records item id at where; an item found twice is an error.
func (p *places) put(id, where string) {
	p.t.Helper()
	if prev, ok := p.at[id]; ok {
		p.t.Errorf("item %q is in two places: %s and %s", id, prev, where)
	}
	p.at[id] = where
}

// queuedAndDead walks each stage's queue and dead letters into pl,
// checking them against counts, and returns how many it found.
func queuedAndDead(t testing.TB, db pipeline.Database, counts pipeline.Counts, pl *places) (queuedN, deadN int) {
	t.Helper()
	for i, s := range Stages {
		qs := queued(t, db, s.Name)
		if counts.Stages[i].Queued != len(qs) {
			t.Errorf("Counts says %d queued at %s, the queue holds %d", counts.Stages[i].Queued, s.Name, len(qs))
		}
		for _, q := range qs {
			pl.put(q.Item.ID, "queued at "+s.Name)
			if i > 0 && len(q.Item.Prev) == 0 {
				t.Errorf("item %q queued at %s has no output of %s", q.Item.ID, s.Name, Stages[i-1].Name)
			}
		}
		queuedN += len(qs)
		n := 0
		err := db.ForEachDead(s.Name, func(e pipeline.DeadEntry) error {
			n++
			pl.put(e.ID, "dead at "+s.Name)
			return nil
		})
		if err != nil {
			t.Fatalf("ForEachDead(%s): %v", s.Name, err)
		}
		if counts.Stages[i].Dead != n {
			t.Errorf("Counts says %d dead at %s, ForEachDead lists %d", counts.Stages[i].Dead, s.Name, n)
		}
		deadN += n
	}
	return queuedN, deadN
}

// doneItems walks the done items into pl, checking each has every
// stage's output, and returns how many and the tally recomputed from
// their last outputs.
func doneItems(t testing.TB, db pipeline.Database, pl *places) (int, pipeline.Tally) {
	t.Helper()
	var recomputed pipeline.Tally
	done := 0
	last := Stages[len(Stages)-1].Name
	err := db.ForEachDone(func(it pipeline.Item) error {
		done++
		pl.put(it.ID, "done")
		for _, s := range Stages {
			if it.Outputs[s.Name] == nil {
				t.Errorf("done item %q has no output of %s", it.ID, s.Name)
			}
		}
		var f pipeline.Fact
		if err := json.Unmarshal(it.Outputs[last], &f); err == nil && f.Label != "" {
			recomputed.Fold(it.ID, f, +1)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("ForEachDone: %v", err)
	}
	return done, recomputed
}

// locateAgrees checks that Locate puts item id where the walks found it,
// with a dead letter exactly when dead and the outputs of exactly the
// stages it passed.
func locateAgrees(t testing.TB, db pipeline.Database, id, where string) {
	t.Helper()
	loc, err := db.Locate(id)
	if err != nil {
		t.Errorf("Locate(%q): %v", id, err)
		return
	}
	got := loc.Status + " at " + loc.Stage
	if loc.Status == "done" {
		got = "done"
	}
	if got != where {
		t.Errorf("Locate(%q) says %s, the buckets say %s", id, got, where)
	}
	if (loc.Status == "dead") != (loc.Dead != nil) {
		t.Errorf("Locate(%q): status %s with dead letter %v", id, loc.Status, loc.Dead)
	}
	for i, s := range Stages {
		want := loc.Status == "done" || i < slices.Index(pipeline.StageNames(Stages), loc.Stage)
		if (loc.Output[s.Name] != nil) != want {
			t.Errorf("item %q (%s): output of %s present %v, want %v", id, where, s.Name, !want, want)
		}
	}
}
