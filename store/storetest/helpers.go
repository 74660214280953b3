package storetest

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Record is the test record for id: its text, app and rating fields.
func Record(id, text, app, rating string) pipeline.Record {
	f := map[string]string{"app": app, "note": "n"}
	if rating != "" {
		f["rating"] = rating
	}
	return pipeline.Record{ID: id, Text: text, Fields: f}
}

// Output is the deterministic output the suite commits for an item at a
// stage: sanitize echoes the text, classify labels it by its first word
// (with a confidence taken from the text's length), and aggregate turns the classify label, the app and the rating into a
// pipeline.Fact, as the real aggregate stage does.
func Output(stage string, it pipeline.Item) json.RawMessage {
	var v any
	switch stage {
	case "sanitize":
		v = map[string]string{"text": it.Text}
	case "classify":
		label, _, _ := strings.Cut(it.Text, " ")
		v = map[string]any{"label": label, "confidence": confidence(it.Text)}
	default:
		var c struct{ Label string }
		_ = json.Unmarshal(it.Outputs["classify"], &c)
		f := pipeline.Fact{Label: c.Label, Groups: map[string]string{"app": it.Fields["app"]}}
		if r, err := strconv.ParseFloat(it.Fields["rating"], 64); err == nil {
			f.Rating = &r
		}
		v = f
	}
	b, _ := json.Marshal(v)
	return b
}

// queued returns the stage's whole queue.
func queued(t testing.TB, db pipeline.Database, stage string) []pipeline.Queued {
	t.Helper()
	var out []pipeline.Queued
	var after uint64
	for {
		qs, err := db.Queued(stage, after, 7) // small pages: the cursor is exercised
		if err != nil {
			t.Fatalf("Queued(%s): %v", stage, err)
		}
		if len(qs) == 0 {
			return out
		}
		for _, q := range qs {
			if q.Seq <= after {
				t.Fatalf("Queued(%s, after %d) returned seq %d: not increasing", stage, after, q.Seq)
			}
			after = q.Seq
		}
		out = append(out, qs...)
	}
}

// seqOf is the sequence at which id is queued at stage, 0 if it is not.
func seqOf(t testing.TB, db pipeline.Database, stage, id string) uint64 {
	t.Helper()
	for _, q := range queued(t, db, stage) {
		if q.Item.ID == id {
			return q.Seq
		}
	}
	return 0
}

func success(stage string, q pipeline.Queued) pipeline.Transition {
	return pipeline.Transition{Stage: stage, ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded,
		Result: pipeline.Result{Output: Output(stage, q.Item)}}
}

func deadLetter(stage string, q pipeline.Queued, msg string) pipeline.Transition {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return pipeline.Transition{Stage: stage, ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.DeadLettered,
		Dead: pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: msg, Attempts: 1, First: at, Last: at}}
}

func commit(t testing.TB, db pipeline.Database, ts ...pipeline.Transition) {
	t.Helper()
	if err := db.Commit(ts); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

// Advance commits a success for every item queued at stage, except those
// in dead, which are dead-lettered. It returns how many moved.
func Advance(t testing.TB, db pipeline.Database, stage string, dead ...string) int {
	t.Helper()
	var ts []pipeline.Transition
	for _, q := range queued(t, db, stage) {
		if slices.Contains(dead, q.Item.ID) {
			ts = append(ts, deadLetter(stage, q, "no good: "+q.Item.ID))
		} else {
			ts = append(ts, success(stage, q))
		}
	}
	commit(t, db, ts...)
	return len(ts)
}

// Finish advances every queued item through every stage.
func Finish(t testing.TB, db pipeline.Database) {
	t.Helper()
	for _, s := range Stages {
		Advance(t, db, s.Name)
	}
}

func ingest(t testing.TB, db pipeline.Database, recs ...pipeline.Record) pipeline.IngestStats {
	t.Helper()
	st, err := db.Ingest(recs)
	if err != nil {
		t.Fatalf("Ingest: %v", err)
	}
	return st
}

func locate(t testing.TB, db pipeline.Database, id string) pipeline.Location {
	t.Helper()
	loc, err := db.Locate(id)
	if err != nil {
		t.Fatalf("Locate(%q): %v", id, err)
	}
	return loc
}

// wantAt fails unless id is at stage with status.
func wantAt(t testing.TB, db pipeline.Database, id, stage, status string) pipeline.Location {
	t.Helper()
	loc := locate(t, db, id)
	if loc.Status != status || (status != "done" && loc.Stage != stage) {
		t.Fatalf("item %q is %s at %s, want %s at %s", id, loc.Status, loc.Stage, status, stage)
	}
	return loc
}
