package store

import (
	"encoding/json"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

func TestDB_ForEachItem(t *testing.T) {
	db := openTest(t)
	if _, err := db.Ingest(recs("d", "a", "c", "b")); err != nil {
		t.Fatal(err)
	}
	advance(t, db, "sanitize", jsonOut)
	qs, err := db.Queued("classify", 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var ts []pipeline.Transition
	for _, q := range qs {
		switch q.Item.ID {
		case "b":
			ts = append(ts, pipeline.Transition{Stage: "classify", ID: "b", Seq: q.Seq, Outcome: pipeline.DeadLettered,
				Dead: pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: "blocked"}})
		case "a", "c":
			ts = append(ts, pipeline.Transition{Stage: "classify", ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded,
				Result: pipeline.Result{Output: json.RawMessage(`{"label":"bug"}`)}})
		}
	}
	if err := db.Commit(ts); err != nil {
		t.Fatal(err)
	}
	qs, _ = db.Queued("aggregate", 0, 10)
	for _, q := range qs {
		if q.Item.ID == "a" {
			if err := db.Commit([]pipeline.Transition{{Stage: "aggregate", ID: "a", Seq: q.Seq, Outcome: pipeline.Succeeded,
				Result: pipeline.Result{Output: fact("bug")}}}); err != nil {
				t.Fatal(err)
			}
		}
	}

	type seen struct {
		stage   string
		status  pipeline.Status
		outputs int
		dead    string
	}
	want := map[string]seen{
		"a": {"aggregate", pipeline.StatusDone, 3, ""},
		"b": {"classify", pipeline.StatusDead, 1, "blocked"},
		"c": {"aggregate", pipeline.StatusQueued, 2, ""},
		"d": {"classify", pipeline.StatusQueued, 1, ""},
	}
	var order []string
	err = db.ForEachItem(func(it pipeline.ItemState) error {
		order = append(order, it.ID)
		got := seen{stage: it.Stage, status: it.Status, outputs: len(it.Outputs)}
		if it.Dead != nil {
			got.dead = it.Dead.Message
		}
		if got != want[it.ID] {
			t.Errorf("item %s: got %+v, want %+v", it.ID, got, want[it.ID])
		}
		if it.Text != "text of "+it.ID {
			t.Errorf("item %s: text %q", it.ID, it.Text)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(order); got != 4 || order[0] != "a" || order[3] != "d" {
		t.Errorf("order %v, want a b c d", order)
	}
}
