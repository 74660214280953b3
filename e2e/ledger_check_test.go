package e2e

import (
	"encoding/json"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
	bolt "go.etcd.io/bbolt"
)

// cleanLedger is three items, one done, one dead at classify, one queued
// at aggregate, each billed as it should be.
func cleanLedger() ledger {
	return ledger{
		stages:  cliStages,
		items:   3,
		places:  map[string][]string{"a": {"done"}, "b": {"dead/classify"}, "c": {"queued/aggregate"}},
		located: map[string]string{"a": "done", "b": "dead/classify", "c": "queued/aggregate"},
		outputs: map[string][]string{"a": {"sanitize", "classify", "aggregate"}, "b": {"sanitize"}, "c": {"sanitize", "classify"}},
		billed:  map[string]int64{"a": 1, "b": 0, "c": 1},
	}
}

// TestLedger_Problems feeds the checker doctored ledgers: each breach of
// "one place, paid once" must be reported, naming the item.
func TestLedger_Problems(t *testing.T) {
	for _, tc := range []struct {
		name    string
		doctor  func(l *ledger)
		excused func(id string) int64
		want    string // "" means no problem
	}{
		{"clean", func(*ledger) {}, nil, ""},
		{"answered twice", func(l *ledger) { l.billed["a"] = 2 }, nil, "item a: 2 answers billed"},
		{"answered twice after a kill that caught it", func(l *ledger) { l.billed["a"] = 2 }, func(string) int64 { return 1 }, ""},
		{"answered three times after one kill", func(l *ledger) { l.billed["a"] = 3 }, func(string) int64 { return 1 }, "item a: 3 answers billed"},
		{"paid for a dead item", func(l *ledger) { l.billed["b"] = 1 }, nil, "item b: 1 answers billed and no classify"},
		{"output without a billed answer", func(l *ledger) { l.billed["c"] = 0 }, nil, "item c has a classify output but no billed answer"},
		{"answer for a text no item holds", func(l *ledger) { l.unknownBilled = 4 }, nil, "4 answers billed for texts no item holds"},
		{"done and dead", func(l *ledger) { l.places["a"] = []string{"done", "dead/classify"} }, nil, "item a is in 2 places"},
		{"queued twice", func(l *ledger) { l.places["c"] = []string{"queued/aggregate", "queued/aggregate"} }, nil, "item c is in 2 places"},
		{"nowhere", func(l *ledger) { delete(l.places, "c") }, nil, "item c is in 0 places"},
		{"Locate disagrees", func(l *ledger) { l.located["b"] = "queued/classify" }, nil, "item b: Locate says queued/classify"},
		{"output at the dead stage", func(l *ledger) { l.outputs["b"] = []string{"sanitize", "classify"} }, nil, "item b (dead/classify) has outputs"},
		{"done without every output", func(l *ledger) { l.outputs["a"] = []string{"sanitize", "classify"} }, nil, "item a (done) has outputs"},
		{"more ids than items", func(l *ledger) { l.items = 2 }, nil, "hold 3 ids; the state bucket 2 items"},
		{"store check", func(l *ledger) { l.check = []string{"item x: orphan"} }, nil, "store check: item x: orphan"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := cleanLedger()
			l.places, l.located, l.outputs, l.billed = maps.Clone(l.places), maps.Clone(l.located), maps.Clone(l.outputs), maps.Clone(l.billed)
			tc.doctor(&l)
			got := l.problems(tc.excused)
			if tc.want == "" {
				if len(got) != 0 {
					t.Errorf("problems %q, want none", got)
				}
				return
			}
			if !strings.Contains(strings.Join(got, "\n"), tc.want) {
				t.Errorf("problems %q, want one holding %q", got, tc.want)
			}
		})
	}
}

// TestLedger_ScratchDB builds a DB through the store's API, audits it
// clean, then writes an item into a second place behind the store's back
// (what a double commit would leave) and wants the audit to see it.
func TestLedger_ScratchDB(t *testing.T) {
	path := filepath.Join(t.TempDir(), "scratch.db")
	defs := make([]store.StageDef, len(cliStages))
	for i, s := range cliStages {
		defs[i] = store.StageDef{Name: s}
	}
	db, err := store.Open(path, store.Options{Stages: defs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Ingest([]pipeline.Record{{ID: "a", Text: "one"}, {ID: "b", Text: "two"}}); err != nil {
		t.Fatal(err)
	}
	advance := func(stage, id string, out pipeline.Outcome) {
		t.Helper()
		qs, err := db.Queued(stage, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q.Item.ID != id {
				continue
			}
			tr := pipeline.Transition{Stage: stage, ID: id, Seq: q.Seq, Outcome: out,
				Result: pipeline.Result{Output: json.RawMessage(`{"text":"x","label":"bug"}`)},
				Dead:   pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: "blocked by the safety filter"}}
			if err := db.Commit([]pipeline.Transition{tr}); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Fatalf("%s is not queued at %s", id, stage)
	}
	for _, s := range cliStages {
		advance(s, "a", pipeline.Succeeded)
	}
	advance("sanitize", "b", pipeline.Succeeded)
	advance("classify", "b", pipeline.DeadLettered)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if ps := readLedger(t, path).problems(nil); len(ps) != 0 {
		t.Fatalf("a clean DB audits with problems: %q", ps)
	}

	// The done item a also gets a dead letter at classify.
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("dead/classify")).Put([]byte("a"), []byte(`{"class":"permanent","message":"doctored"}`))
	})
	if cerr := bdb.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(readLedger(t, path).problems(nil), "\n")
	for _, want := range []string{"item a is in 2 places [dead/classify done]", "store check: item \"a\": dead/classify"} {
		if !strings.Contains(got, want) {
			t.Errorf("problems after a double placement:\n%s\nwant one holding %q", got, want)
		}
	}
}
