package ingest_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// drain commits a success for every item queued at stage.
func drain(t *testing.T, db *store.DB, stage string, out func(id string) json.RawMessage) {
	t.Helper()
	qs, err := db.Queued(stage, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var ts []pipeline.Transition
	for _, q := range qs {
		ts = append(ts, pipeline.Transition{Stage: stage, ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded, Result: pipeline.Result{Output: out(q.Item.ID)}})
	}
	if err := db.Commit(ts); err != nil {
		t.Fatal(err)
	}
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// TestLoad_refusedFileChangesNothing: a DB whose 40 items are done, then
// a wrong file that shares 10 of their ids with edited text and whose
// other 90 lines fail. The file is refused and the DB is byte for byte as
// it was: no output deleted, nothing folded out of the tally. The same
// edits in a file that is accepted do change it, so the test can fail.
func TestLoad_refusedFileChangesNothing(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "t.db")
	stages := []store.StageDef{{Name: "sanitize"}, {Name: "classify", Fingerprint: "m1"}, {Name: "aggregate"}}
	db, err := store.Open(dbPath, store.Options{Stages: stages})
	if err != nil {
		t.Fatal(err)
	}
	var good strings.Builder
	for i := range 40 {
		fmt.Fprintf(&good, `{"id":"r%d","text":"review %d","app":"a","rating":"4"}`+"\n", i, i)
	}
	ctx := context.Background()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ingestAll := func(path string) (ingest.Result, error) {
		return ingest.Load(ctx, path, ingest.Options{Format: ingest.JSONL}, 7, func(recs []pipeline.Record) error {
			_, err := db.Ingest(recs)
			return err
		})
	}
	if _, err := ingestAll(write("good.jsonl", good.String())); err != nil {
		t.Fatal(err)
	}
	drain(t, db, "sanitize", func(string) json.RawMessage { return json.RawMessage(`{"text":"x"}`) })
	drain(t, db, "classify", func(string) json.RawMessage { return json.RawMessage(`{"label":"bug"}`) })
	drain(t, db, "aggregate", func(id string) json.RawMessage {
		b, _ := json.Marshal(pipeline.Fact{Label: "bug", Groups: map[string]string{"app": "a"}})
		return b
	})
	before, err := db.Counts()
	if err != nil || before.Done != 40 {
		t.Fatalf("setup: %+v %v", before, err)
	}
	tallyBefore, _ := db.Tally()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	sumBefore := fileSum(t, dbPath)

	// The first 10 lines edit shared ids (the accepted, written ones in a
	// one-pass ingest); then 90 lines that are not JSON.
	var edits strings.Builder
	for i := range 10 {
		fmt.Fprintf(&edits, `{"id":"r%d","text":"edited %d"}`+"\n", i, i)
	}
	wrong := edits.String() + strings.Repeat("not json at all\n", 90)

	if db, err = store.Open(dbPath, store.Options{Stages: stages}); err != nil {
		t.Fatal(err)
	}
	res, err := ingestAll(write("wrong.jsonl", wrong))
	var refused *ingest.RefusedError
	if !errors.As(err, &refused) {
		t.Fatalf("wrong file: err = %v, want a *RefusedError", err)
	}
	if res.Lines != 100 || res.BadLines != 90 || !strings.Contains(err.Error(), "90 of 100 lines could not be read") || !strings.Contains(err.Error(), "Nothing was ingested") {
		t.Errorf("refusal: %+v, %q", res, err)
	}
	after, _ := db.Counts()
	tallyAfter, _ := db.Tally()
	if !reflect.DeepEqual(after, before) || !reflect.DeepEqual(tallyAfter, tallyBefore) {
		t.Errorf("after the refused file: counts %+v tally %+v, want %+v %+v", after, tallyAfter, before, tallyBefore)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if fileSum(t, dbPath) != sumBefore {
		t.Errorf("the refused file changed the DB file")
	}

	// The same edits in an accepted file re-queue the 10 items.
	if db, err = store.Open(dbPath, store.Options{Stages: stages}); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := ingestAll(write("edits.jsonl", edits.String())); err != nil {
		t.Fatal(err)
	}
	if c, _ := db.Counts(); c.Done != 30 {
		t.Errorf("after the accepted edits: %d done, want 30", c.Done)
	}
}

// TestLoad_typesStored: the database keeps each field's type with the
// record; a record stored before types were kept (no "types" in its JSON)
// reads back with text fields, and the same input again leaves it
// unchanged (types are not part of the content hash), so nothing re-runs.
func TestLoad_typesStored(t *testing.T) {
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "t.db"), store.Options{Stages: []store.StageDef{{Name: "classify", Fingerprint: "m1"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	old := pipeline.Record{ID: "old", Text: "x", Fields: map[string]string{"rating": "2"}}
	if _, err := db.Ingest([]pipeline.Record{old}); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(in, []byte(`{"id":"old","text":"x","rating":2}`+"\n"+`{"id":"new","text":"y","rating":2}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stats pipeline.IngestStats
	if _, err := ingest.Load(context.Background(), in, ingest.Options{Format: ingest.JSONL}, 0, func(recs []pipeline.Record) error {
		st, err := db.Ingest(recs)
		stats = st
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if stats.New != 1 || stats.Unchanged != 1 {
		t.Errorf("ingest stats %+v, want 1 new and 1 unchanged", stats)
	}
	for id, want := range map[string]map[string]pipeline.FieldType{"new": {"rating": pipeline.FieldNumber}, "old": nil} {
		loc, err := db.Locate(id)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(loc.Record.Types, want) || loc.Record.Fields["rating"] != "2" {
			t.Errorf("%s: stored %+v, want types %v and the text 2", id, loc.Record, want)
		}
	}
}
