package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

func TestDB_ForEachItem(t *testing.T) {
	db := openTest(t)
	qs := queuedAtClassify(t, db, recs("d", "a", "c", "b")...)
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
	err := db.ForEachItem(func(it pipeline.ItemState) error {
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

// TestDB_ForEachItem_outputsOwnTheirBytes: the outputs ForEachItem hands
// over read as Locate reads them, whatever their sizes (an item's
// outputs share one buffer, sized from the items before), stay valid
// after the walk, and an append to one output cannot write over another.
func TestDB_ForEachItem_outputsOwnTheirBytes(t *testing.T) {
	db := openTest(t)
	var in []pipeline.Record
	for i, n := range []int{1, 40, 5000, 3, 900, 20000, 2, 64} {
		text := strings.Repeat("word ", n)
		if i%3 == 0 {
			text += "  spaced" // sanitizing changes it: stored, not shared
		}
		in = append(in, pipeline.Record{ID: fmt.Sprintf("i%02d", i), Text: text, Fields: map[string]string{"app": "a"}})
	}
	if _, err := db.Ingest(in); err != nil {
		t.Fatal(err)
	}
	sanitizeAll(t, db)
	advance(t, db, "classify", func(id string) json.RawMessage {
		return json.RawMessage(`{"label":"bug","reason":"` + strings.Repeat("r", len(id)*300) + `"}`)
	})
	kept := map[string]map[string]json.RawMessage{}
	err := db.ForEachItem(func(is pipeline.ItemState) error {
		kept[is.ID] = is.Outputs
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != len(in) {
		t.Fatalf("%d items walked, want %d", len(kept), len(in))
	}
	for id, outs := range kept {
		loc, err := db.Locate(id)
		if err != nil {
			t.Fatal(err)
		}
		if len(outs) != 2 || len(loc.Output) != 2 {
			t.Fatalf("%s: %d outputs walked, %d located, want 2", id, len(outs), len(loc.Output))
		}
		for stage, want := range loc.Output {
			if !bytes.Equal(outs[stage], want) {
				t.Errorf("%s at %s: walked %.60s, located %.60s", id, stage, outs[stage], want)
			}
		}
		before := string(outs["classify"])
		_ = append(outs["sanitize"], "XXXXXXXX"...)
		if string(outs["classify"]) != before {
			t.Errorf("%s: an append to the sanitize output changed the classify output", id)
		}
	}
}
