package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// TestExport_EveryItem exports a store whose items stand everywhere:
// done, skipped by a stage's condition, queued, dead. Every item has a
// row, its status says where it is, and each stage output carries the
// stage's recorded version.
func TestExport_EveryItem(t *testing.T) {
	defs := []store.StageDef{{Name: "sanitize", Fingerprint: "s1"}, {Name: "classify", Fingerprint: "c1"}, {Name: "extract", Fingerprint: "e1"}}
	db, err := store.Open(filepath.Join(t.TempDir(), "x.db"), store.Options{Stages: defs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var recs []pipeline.Record
	for _, id := range []string{"a", "b", "c", "d"} {
		recs = append(recs, pipeline.Record{ID: id, Text: "text " + id, Fields: map[string]string{"app": "TaskFlow"}})
	}
	if _, err := db.Ingest(recs); err != nil {
		t.Fatal(err)
	}
	outcome := map[string]map[string]string{ // stage -> id -> output, "" for a dead letter
		"sanitize": {"a": `{"text":"a"}`, "b": `{"text":"b"}`, "c": `{"text":"c"}`, "d": `{"text":"d"}`},
		"classify": {"a": `{"label":"praise"}`, "b": `{"label":"bug"}`, "c": `{"label":"bug"}`, "d": ""},
		"extract":  {"a": `{"skipped":true,"when":"classify.label == \"bug\""}`, "b": `{"component":"sync"}`},
	}
	for _, d := range defs {
		qs, err := db.Queued(d.Name, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		var ts []pipeline.Transition
		for _, q := range qs {
			out, ok := outcome[d.Name][q.Item.ID]
			switch {
			case !ok:
				continue // left queued
			case out == "":
				ts = append(ts, pipeline.Transition{Stage: d.Name, ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.DeadLettered,
					Dead: pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: "blocked"}})
			default:
				ts = append(ts, pipeline.Transition{Stage: d.Name, ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded,
					Result: pipeline.Result{Output: json.RawMessage(out)}})
			}
		}
		if err := db.Commit(ts); err != nil {
			t.Fatal(err)
		}
	}

	var b bytes.Buffer
	if err := Export(&b, db, ExportOptions{Format: FormatCSV}); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, h := range []string{"status", "dead_reason", "classify.label", "classify.version", "extract.component", "extract.skipped", "extract.version", "sanitize.version"} {
		if _, ok := col[h]; !ok {
			t.Fatalf("no column %s in %v", h, rows[0])
		}
	}
	want := map[string]map[string]string{
		"a": {"status": "skipped at extract", "classify.version": "c1", "extract.version": "e1", "extract.skipped": "true"},
		"b": {"status": "done", "classify.version": "c1", "extract.version": "e1", "extract.component": "sync"},
		"c": {"status": "queued at extract", "classify.version": "c1", "extract.version": ""},
		"d": {"status": "dead at classify", "dead_reason": "permanent: blocked", "sanitize.version": "s1", "classify.version": "", "classify.label": ""},
	}
	if len(rows) != 1+len(want) {
		t.Fatalf("%d rows, want %d:\n%v", len(rows)-1, len(want), rows)
	}
	for _, r := range rows[1:] {
		id := r[col["id"]]
		t.Run(id, func(t *testing.T) {
			for h, v := range want[id] {
				if got := r[col[h]]; got != v {
					t.Errorf("%s = %q, want %q", h, got, v)
				}
			}
		})
	}
}

func TestItemStatus(t *testing.T) {
	skipped := map[string]json.RawMessage{"extract": json.RawMessage(`{"skipped":true}`)}
	tests := []struct {
		name string
		in   pipeline.ItemState
		want string
	}{
		{"done", pipeline.ItemState{Stage: "extract", Status: pipeline.StatusDone}, "done"},
		{"done, skipped", pipeline.ItemState{Item: pipeline.Item{Outputs: skipped}, Stage: "extract", Status: pipeline.StatusDone}, "skipped at extract"},
		{"queued after a skip", pipeline.ItemState{Item: pipeline.Item{Outputs: skipped}, Stage: "aggregate", Status: pipeline.StatusQueued}, "queued at aggregate (skipped at extract)"},
		{"in batch", pipeline.ItemState{Stage: "classify", Status: pipeline.StatusInBatch}, "in batch at classify"},
		{"dead", pipeline.ItemState{Stage: "classify", Status: pipeline.StatusDead}, "dead at classify"},
		{"skipped false is not skipped", pipeline.ItemState{Item: pipeline.Item{Outputs: map[string]json.RawMessage{"extract": json.RawMessage(`{"skipped":false}`)}}, Status: pipeline.StatusDone}, "done"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ItemStatus(tt.in, []string{"sanitize", "classify", "extract", "aggregate"}); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
