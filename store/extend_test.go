package store

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// TestDB_InsertStage: a stage added between classify and aggregate runs
// for the items already done, and only from there: their sanitize and
// classify outputs stay; a dead item before the new stage stays dead.
func TestDB_InsertStage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "st.db")
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	qs := queuedAtClassify(t, db, recs("a", "b", "c")...)
	// c dies at classify; a and b go on to done.
	var dead, ok = qs[2], qs[:2]
	if err := db.Commit([]pipeline.Transition{{Stage: "classify", ID: dead.Item.ID, Seq: dead.Seq, Outcome: pipeline.DeadLettered,
		Dead: pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: "no"}}}); err != nil {
		t.Fatal(err)
	}
	for _, q := range ok {
		if err := db.Commit([]pipeline.Transition{{Stage: "classify", ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded,
			Result: pipeline.Result{Output: jsonOut(q.Item.ID)}}}); err != nil {
			t.Fatal(err)
		}
	}
	advance(t, db, "aggregate", fact)
	if c := counts(t, db); c.Done != 2 {
		t.Fatalf("counts = %+v", c)
	}
	if err := db.SaveJob([]byte(`{"yaml":"db: x"}`)); err != nil {
		t.Fatal(err)
	}
	db.Close()

	grown := []StageDef{testStages[0], testStages[1], {Name: "extract", Fingerprint: "e1"}, testStages[2]}
	db, err = Open(path, Options{Stages: grown})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := db.AddedStages(); len(got) != 1 || got[0] != "extract" {
		t.Errorf("AddedStages = %v", got)
	}
	if ch := db.ChangedStages(); len(ch) != 0 {
		t.Errorf("ChangedStages = %v, want none", ch)
	}
	c := counts(t, db)
	byStage := map[string]StageCounts{}
	for _, s := range c.Stages {
		byStage[s.Stage] = s
	}
	if c.Done != 0 || byStage["extract"].Queued != 2 || byStage["classify"].Dead != 1 || byStage["classify"].Output != 2 || byStage["aggregate"].Output != 0 {
		t.Fatalf("after insert: %+v", c)
	}
	if tally, _ := db.Tally(); tally.Items != 0 {
		t.Errorf("tally still counts %d items whose fact was dropped", tally.Items)
	}
	advance(t, db, "extract", func(string) json.RawMessage { return json.RawMessage(`{"severity":"high"}`) })
	advance(t, db, "aggregate", fact)
	if c := counts(t, db); c.Done != 2 {
		t.Fatalf("after the new stage: %+v", c)
	}
	if problems, err := db.Check(); err != nil || len(problems) > 0 {
		t.Errorf("check: %v %v", err, problems)
	}
	if job, err := db.Job(); err != nil || string(job) != `{"yaml":"db: x"}` {
		t.Errorf("Job = %s, %v", job, err)
	}
	db.Close()

	// A stage added while another changed: the change stays pending
	// (recorded with the old fingerprint) until accepted.
	changedToo := []StageDef{grown[0], {Name: "classify", Fingerprint: "m2"}, grown[2], {Name: "tone"}, grown[3]}
	db, err = Open(path, Options{Stages: changedToo})
	if err != nil {
		t.Fatal(err)
	}
	if ch := db.ChangedStages(); len(ch) != 1 || ch[0] != "classify" {
		t.Errorf("ChangedStages = %v, want [classify]", ch)
	}
	db.Close()
	db, err = Open(path, Options{Stages: changedToo})
	if err != nil {
		t.Fatal(err)
	}
	if ch := db.ChangedStages(); len(ch) != 1 || ch[0] != "classify" {
		t.Errorf("after reopening: ChangedStages = %v, want [classify] still", ch)
	}
	db.Close()
	grown = changedToo

	// The definition was recorded: opening again adds nothing; removing
	// or reordering stages is still refused.
	db, err = Open(path, Options{Stages: grown})
	if err != nil || len(db.AddedStages()) != 0 {
		t.Fatalf("reopen: %v, added %v", err, db.AddedStages())
	}
	db.Close()
	_, err = Open(path, Options{Stages: testStages})
	if !errors.Is(err, ErrDefinition) {
		t.Errorf("removing a stage: err = %v, want ErrDefinition", err)
	}
}
