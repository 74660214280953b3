package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/sawtooth-dev/sawtooth/store"
)

// cliStages is the pipeline the sawtooth binary runs, in order.
var cliStages = []string{"sanitize", "classify", "aggregate"}

// apiStage is the stage whose calls the simulator bills.
const apiStage = "classify"

// ledger is a pipeline seen from both sides: where the store says each item
// is, read bucket by bucket through the store's own API (not an export of a
// bucket keyed by id, which cannot hold an id twice), and how many answers
// the simulators billed for it.
type ledger struct {
	stages []string
	// items is the number of items in the state bucket (store.Counts).
	items int
	// places lists, per id, every place a bucket holds it: "queued/<stage>"
	// (the stage's queue), "dead/<stage>" (its dead letters) or "done".
	places map[string][]string
	// located is, per id, the one place store.Locate names.
	located map[string]string
	// outputs lists, per id, the stages holding an output for it.
	outputs map[string][]string
	// check is what store.Check reports.
	check []string
	// billed is, per id, the answers the simulators billed (OutcomeOK);
	// nil when billing is not audited. unknownBilled is the answers billed
	// for a text no item holds.
	billed        map[string]int64
	unknownBilled int64
}

// readLedger reads db (which no process may hold) and, when sims are
// given, their per-item accounting. An item's simulator key is the hash of
// the text classify sent: its sanitize output, or its record's text.
func readLedger(t testing.TB, path string, sims ...*geminisim.Server) ledger {
	t.Helper()
	defs := make([]store.StageDef, len(cliStages))
	for i, s := range cliStages {
		defs[i] = store.StageDef{Name: s}
	}
	db, err := store.Open(path, store.Options{Stages: defs, ReadOnly: true, LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("open %s to audit it: %v", path, err)
	}
	defer db.Close()
	l := ledger{stages: cliStages, places: map[string][]string{}, located: map[string]string{}, outputs: map[string][]string{}}
	counts, err := db.Counts()
	if err != nil {
		t.Fatal(err)
	}
	l.items = counts.Items
	sent := map[string]string{} // id -> the text classify was sent
	for _, stage := range cliStages {
		queued, err := db.Queued(stage, 0, counts.Items+1)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range queued {
			l.places[q.Item.ID] = append(l.places[q.Item.ID], "queued/"+stage)
		}
		err = db.ForEachDead(stage, func(e store.DeadEntry) error {
			l.places[e.ID] = append(l.places[e.ID], "dead/"+stage)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		err = db.ForEachOutput(stage, func(rec pipeline.Record, out json.RawMessage) error {
			l.outputs[rec.ID] = append(l.outputs[rec.ID], stage)
			if stage == "sanitize" {
				var s struct{ Text string }
				if json.Unmarshal(out, &s) == nil {
					sent[rec.ID] = s.Text
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	err = db.ForEachDone(func(it pipeline.Item) error {
		l.places[it.ID] = append(l.places[it.ID], "done")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for id := range l.places {
		ids[id] = true
	}
	for id := range l.outputs {
		ids[id] = true
	}
	for id := range ids {
		loc, err := db.Locate(id)
		if err != nil {
			l.located[id] = "nowhere: " + err.Error()
			continue
		}
		l.located[id] = placeName(loc.Status, loc.Stage)
		if _, ok := sent[id]; !ok {
			sent[id] = loc.Record.Text
		}
	}
	if l.check, err = db.Check(); err != nil {
		t.Fatal(err)
	}
	if len(sims) > 0 {
		l.billed = map[string]int64{}
		byItem := okCalls(sims...) // keyed as the simulator keys items: by id
		for id := range sent {
			k := geminisim.ItemID(id)
			l.billed[id] = byItem[k]
			delete(byItem, k)
		}
		for _, n := range byItem {
			l.unknownBilled += n
		}
	}
	return l
}

// placeName names a place as ledger.places does.
func placeName(status, stage string) string {
	if status == "done" {
		return "done"
	}
	return status + "/" + stage
}

// problems lists every way the ledger breaks the store's contract or the
// billing rule, one line each, in id order. An item must be in exactly one
// place, the one Locate names, with an output of every stage before it
// (all of them once done) and none other. Billing, when audited: an item
// with an API output was billed at least one answer and at most one more
// per call excused(id) allows (a kill that caught it in flight); an item
// without one at most excused(id). excused nil excuses nothing.
func (l ledger) problems(excused func(id string) int64) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if len(l.places) != l.items {
		add("the queues, dead letters and done items hold %d ids; the state bucket %d items", len(l.places), l.items)
	}
	ids := make([]string, 0, len(l.located))
	for id := range l.located {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		ps := l.places[id]
		if len(ps) != 1 {
			add("item %s is in %d places %v, want exactly one", id, len(ps), ps)
		}
		if len(ps) > 0 && l.located[id] != ps[0] {
			add("item %s: Locate says %s, the buckets %v", id, l.located[id], ps)
		}
		var want []string
		for _, s := range l.stages {
			if l.located[id] != "done" && (l.located[id] == "queued/"+s || l.located[id] == "dead/"+s) {
				break
			}
			want = append(want, s)
		}
		if !slices.Equal(l.outputs[id], want) {
			add("item %s (%s) has outputs of %v, want %v", id, l.located[id], l.outputs[id], want)
		}
		if l.billed == nil {
			continue
		}
		var e int64
		if excused != nil {
			e = excused(id)
		}
		n, answered := l.billed[id], slices.Contains(l.outputs[id], apiStage)
		switch {
		case answered && n < 1:
			add("item %s has a %s output but no billed answer: the ledger cannot see its calls", id, apiStage)
		case answered && n > 1+e:
			add("item %s: %d answers billed for one %s output (%d excused)", id, n, apiStage, e)
		case !answered && n > e:
			add("item %s: %d answers billed and no %s output (%d excused)", id, n, apiStage, e)
		}
	}
	if l.unknownBilled > 0 {
		add("%d answers billed for texts no item holds", l.unknownBilled)
	}
	for _, p := range l.check {
		add("store check: %s", p)
	}
	return out
}

// audit checks that every item of db is in exactly one place and, given
// sims, that no item was paid for more often than excused allows (see
// ledger.problems). It reports each problem and returns how many there
// were: the "duplicates" figure of the suites.
func audit(t testing.TB, db string, excused func(id string) int64, sims ...*geminisim.Server) int {
	t.Helper()
	ps := readLedger(t, db, sims...).problems(excused)
	for _, p := range ps {
		t.Errorf("%s: %s", db, p)
	}
	return len(ps)
}
