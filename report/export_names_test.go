package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// TestExport_ColumnsFromStoreSameAsTwoPasses exports a store whose
// records and outputs take every stored form (packed, a stage's shared
// record, a cached answer, typed fields, keys with escapes, differing
// field sets) and items that stand everywhere: the columns the store
// names without a pass over the rows, and so the whole export, are byte
// for byte those of the export as it was (a first pass over every row),
// for every item and for each stage's (`export --stage`).
func TestExport_ColumnsFromStoreSameAsTwoPasses(t *testing.T) {
	defs := []store.StageDef{{Name: "sanitize", Fingerprint: "s1"}, {Name: "classify", Fingerprint: "c1"}, {Name: "aggregate", Fingerprint: "a1"}}
	db, err := store.Open(filepath.Join(t.TempDir(), "x.db"), store.Options{Stages: defs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var recs []pipeline.Record
	for i := range 40 {
		r := pipeline.Record{ID: fmt.Sprintf("r%02d", i), Text: fmt.Sprintf("text <%d> of r%02d", i, i), Fields: map[string]string{"app": "TaskFlow"}}
		switch i % 5 {
		case 1:
			r.Fields["rating"] = fmt.Sprint(i % 6)
			r.Types = map[string]pipeline.FieldType{"rating": pipeline.FieldNumber}
		case 2:
			r.Fields = nil
		case 3:
			r.Fields["k\u00e9y \"q\""] = "x"
			r.Fields["status"] = "an input field named status"
			r.Fields["label"] = "an input field named as classify's" // input.label in --stage classify
		}
		if i == 39 { // never sanitized: in no --stage export's columns
			r.Fields["only_unsanitized"] = "x"
		}
		recs = append(recs, r)
	}
	if _, err := db.Ingest(recs); err != nil {
		t.Fatal(err)
	}
	commit := func(stage string, out func(i int, q pipeline.Queued) (pipeline.Transition, bool)) {
		t.Helper()
		qs, err := db.Queued(stage, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var ts []pipeline.Transition
		for i, q := range qs {
			if tr, ok := out(i, q); ok {
				tr.Stage, tr.ID, tr.Seq = stage, q.Item.ID, q.Seq
				ts = append(ts, tr)
			}
		}
		if err := db.Commit(ts); err != nil {
			t.Fatal(err)
		}
	}
	ok := func(s string) pipeline.Transition {
		return pipeline.Transition{Outcome: pipeline.Succeeded, Result: pipeline.Result{Output: json.RawMessage(s)}}
	}
	commit("sanitize", func(i int, q pipeline.Queued) (pipeline.Transition, bool) {
		if i == 0 {
			return ok(`{"clean":"changed","note":"cut"}`), true
		}
		b, _ := json.Marshal(map[string]string{"text": q.Item.Text}) // the shared record
		return ok(string(b)), i < 36
	})
	commit("classify", func(i int, q pipeline.Queued) (pipeline.Transition, bool) {
		switch {
		case i%7 == 0:
			return pipeline.Transition{Outcome: pipeline.DeadLettered, Dead: pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: "blocked"}}, true
		case i%3 == 0:
			tr := ok(`{"label":"bug","confidence":0.8300000000000001,"cached":true}`)
			tr.CacheKey = fmt.Sprintf("%064x", i%2)
			return tr, true
		case i%3 == 1:
			return ok(fmt.Sprintf(`{"label":"ux","reason":"r%d","n\u0065sted":{"b":1,"a":[0.1]}}`, i)), true
		}
		return ok(`{"label":"praise","version":"own"}`), i < 25
	})
	commit("aggregate", func(i int, q pipeline.Queued) (pipeline.Transition, bool) {
		return ok(`{"label":"bug","groups":{"app":"TaskFlow"}}`), i%2 == 0
	})

	names := []string{"sanitize", "classify", "aggregate"}
	versions := map[string]string{"sanitize": "s1", "classify": "c1", "aggregate": "a1"}
	twoPasses := func(fn func(FlatItem) error) error {
		return db.ForEachItem(func(is pipeline.ItemState) error {
			it := FlatItem{Record: is.Record, Status: ItemStatus(is, names), Outputs: is.Outputs}
			if is.Dead != nil {
				it.DeadReason = fmt.Sprintf("%s: %s", is.Dead.Class, is.Dead.Message)
			}
			return fn(it)
		})
	}
	inputs, outputs, err := db.FieldNames()
	if err != nil {
		t.Fatal(err)
	}
	if len(outputs) != 3 || !outputs["sanitize"]["note"] || !outputs["sanitize"]["text"] || !outputs["classify"]["cached"] || !inputs["k\u00e9y \"q\""] {
		t.Errorf("FieldNames = %v, %v", inputs, outputs)
	}
	for _, format := range []string{FormatJSONL, FormatCSV, FormatTSV} {
		t.Run(format, func(t *testing.T) {
			var got, want bytes.Buffer
			if err := Export(&got, db, ExportOptions{Format: format}); err != nil {
				t.Fatal(err)
			}
			if err := refWriteFlat(&want, twoPasses, FlatOptions{Format: format, Stages: names, Versions: versions}); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Errorf("differs from the export as it was:\n%s", firstDiff(got.String(), want.String()))
			}
			if n := bytes.Count(want.Bytes(), []byte("\n")); format == FormatJSONL && n != len(recs) {
				t.Errorf("%d rows, want %d", n, len(recs))
			}
		})
	}
	for _, stage := range names {
		for _, format := range []string{FormatJSONL, FormatCSV} {
			t.Run(stage+" "+format, func(t *testing.T) {
				var got, want bytes.Buffer
				if err := Export(&got, db, ExportOptions{Stage: stage, Format: format}); err != nil {
					t.Fatal(err)
				}
				twoPasses := func(fn func(FlatItem) error) error {
					return db.ForEachOutput(stage, func(rec pipeline.Record, out json.RawMessage) error {
						return fn(FlatItem{Record: rec, Status: "done", Outputs: map[string]json.RawMessage{stage: out}})
					})
				}
				if err := refWriteFlat(&want, twoPasses, FlatOptions{Format: format, Stage: stage, Stages: names}); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got.Bytes(), want.Bytes()) {
					t.Errorf("differs from the export as it was:\n%s", firstDiff(got.String(), want.String()))
				}
				if bytes.Contains(got.Bytes(), []byte("only_unsanitized")) {
					t.Error("a field of an item without the stage's output is a column")
				}
				if stage == "classify" && !bytes.Contains(got.Bytes(), []byte("input.label")) {
					t.Error("the input field named as an output field is not input.label")
				}
			})
		}
	}
}
