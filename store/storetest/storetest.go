// Package storetest is the contract every pipeline.Database passes: the
// bbolt store today, the PostgreSQL store and any in-memory fake
// tomorrow. Run drives a fresh database through every transition
// (ingest, success, dead letter, re-queue, re-run, edit, prune) and checks
// after each step the invariants the runner and the commands rely on:
// each item is in exactly one place, re-applying anything is a no-op,
// a transition made stale by an edit, a re-run or a re-queue is ignored,
// dead letters survive in their item's history, and the stored tally
// equals the one recomputed from the stored outputs.
//
// The suite plays the stages itself with deterministic outputs (see
// Output), so it needs no network and no stage implementation.
package storetest

import (
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Stages is the definition open must create the database with: a text
// stage, an LLM-like stage reading the text, and an aggregate reading the
// app and rating fields and folding a pipeline.Fact.
var Stages = []pipeline.StageDef{
	{Name: "sanitize", Fingerprint: "s1", Reads: []string{pipeline.TextField}},
	{Name: "classify", Fingerprint: "c1", Reads: []string{pipeline.TextField}},
	{Name: "aggregate", Fingerprint: "a1", Reads: []string{"app", "rating"}},
}

// Open returns a new, empty database defined by Stages, closed (and, for
// a store that can, checked) when the test ends.
type Open func(t testing.TB) pipeline.Database

// Run runs the contract against databases from open, one per subtest.
func Run(t *testing.T, open Open) {
	tests := []struct {
		name string
		fn   func(t *testing.T, db pipeline.Database)
	}{
		{"Definition", testDefinition},
		{"IngestNewUnchangedChanged", testIngest},
		{"TransitionsToDone", testTransitions},
		{"CommitIsIdempotent", testCommitIdempotent},
		{"StaleTransitionsIgnored", nil},
		{"FieldEditReentersAtFirstReader", testFieldEdits},
		{"Requeue", testRequeue},
		{"Rerun", testRerun},
		{"DeadLetterHistory", testHistory},
		{"Prune", testPrune},
		{"RatingsExact", testRatings},
		{"TallyEqualsRecomputation", testTallyRandom},
		{"Usage", testUsage},
		{"RunsAndSeries", testRuns},
		{"LearnedLimit", testLearnedLimit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fn == nil {
				testStale(t, open)
				return
			}
			db := open(t)
			if got := names(db.Stages()); !slices.Equal(got, names(Stages)) {
				t.Fatalf("open returned a database with stages %v, want storetest.Stages %v", got, names(Stages))
			}
			tc.fn(t, db)
			Invariants(t, db)
		})
	}
}

func names(defs []pipeline.StageDef) []string {
	out := make([]string, len(defs))
	for i, d := range defs {
		out[i] = d.Name
	}
	return out
}

// Record is the test record for id: its text, app and rating fields.
func Record(id, text, app, rating string) pipeline.Record {
	f := map[string]string{"app": app, "note": "n"}
	if rating != "" {
		f["rating"] = rating
	}
	return pipeline.Record{ID: id, Text: text, Fields: f}
}

// Output is the deterministic output the suite commits for an item at a
// stage: sanitize echoes the text, classify labels it by its first word,
// and aggregate turns the classify label, the app and the rating into a
// pipeline.Fact, as the real aggregate stage does.
func Output(stage string, it pipeline.Item) json.RawMessage {
	var v any
	switch stage {
	case "sanitize":
		v = map[string]string{"text": it.Text}
	case "classify":
		label, _, _ := strings.Cut(it.Text, " ")
		v = map[string]string{"label": label}
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

// Invariants checks what must hold after any sequence of operations: each
// item is in exactly one place (queued once at one stage, or dead at one
// stage, or done) and Counts, Queued, ForEachDead and Locate agree on
// it; every item has the outputs of exactly the stages it passed; the
// stored tally equals the tally recomputed from the done items' last
// outputs; and the store's own Check finds nothing.
func Invariants(t testing.TB, db pipeline.Database) {
	t.Helper()
	counts, err := db.Counts()
	if err != nil {
		t.Fatalf("Counts: %v", err)
	}
	place := map[string]string{}
	put := func(id, where string) {
		if prev, ok := place[id]; ok {
			t.Errorf("item %q is in two places: %s and %s", id, prev, where)
		}
		place[id] = where
	}
	queuedN, deadN := 0, 0
	for i, s := range Stages {
		qs := queued(t, db, s.Name)
		if counts.Stages[i].Queued != len(qs) {
			t.Errorf("Counts says %d queued at %s, the queue holds %d", counts.Stages[i].Queued, s.Name, len(qs))
		}
		for _, q := range qs {
			put(q.Item.ID, "queued at "+s.Name)
			if i > 0 && len(q.Item.Prev) == 0 {
				t.Errorf("item %q queued at %s has no output of %s", q.Item.ID, s.Name, Stages[i-1].Name)
			}
		}
		queuedN += len(qs)
		n := 0
		err := db.ForEachDead(s.Name, func(e pipeline.DeadEntry) error {
			n++
			put(e.ID, "dead at "+s.Name)
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
	var recomputed pipeline.Tally
	done := 0
	last := Stages[len(Stages)-1].Name
	err = db.ForEachDone(func(it pipeline.Item) error {
		done++
		put(it.ID, "done")
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
	if counts.Done != done || counts.Items != queuedN+deadN+done || counts.Items != len(place) {
		t.Errorf("Counts = %+v; found %d queued, %d dead, %d done, %d distinct items", counts, queuedN, deadN, done, len(place))
	}
	for id, where := range place {
		loc, err := db.Locate(id)
		if err != nil {
			t.Errorf("Locate(%q): %v", id, err)
			continue
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
			want := loc.Status == "done" || i < slices.Index(names(Stages), loc.Stage)
			if (loc.Output[s.Name] != nil) != want {
				t.Errorf("item %q (%s): output of %s present %v, want %v", id, where, s.Name, !want, want)
			}
		}
	}
	stored, err := db.Tally()
	if err != nil {
		t.Fatalf("Tally: %v", err)
	}
	for _, d := range stored.Diff(recomputed) {
		t.Errorf("stored tally != recomputed: %s", d)
	}
	problems, err := db.Check()
	if err != nil || len(problems) > 0 {
		t.Errorf("Check: %v %v", err, problems)
	}
}

func testDefinition(t *testing.T, db pipeline.Database) {
	def, err := db.StoredDefinition()
	if err != nil || !slices.Equal(names(def), names(Stages)) {
		t.Fatalf("StoredDefinition = %v, %v", def, err)
	}
	if c := db.ChangedStages(); len(c) != 0 {
		t.Fatalf("ChangedStages of a new database = %v", c)
	}
	if err := db.AcceptDefinition(); err != nil {
		t.Fatal(err)
	}
	if db.Path() == "" {
		t.Error("Path is empty")
	}
}

func testIngest(t *testing.T, db pipeline.Database) {
	st := ingest(t, db, Record("a", "bug a", "x", "1"), Record("b", "ux b", "x", "2"))
	if st != (pipeline.IngestStats{New: 2}) {
		t.Fatalf("first ingest = %+v", st)
	}
	Invariants(t, db)
	if st := ingest(t, db, Record("a", "bug a", "x", "1"), Record("b", "ux b", "x", "2")); st != (pipeline.IngestStats{Unchanged: 2}) {
		t.Fatalf("same records again = %+v", st)
	}
	Finish(t, db)
	st = ingest(t, db, Record("a", "praise a", "x", "1"), Record("c", "bug c", "y", ""))
	if st != (pipeline.IngestStats{Changed: 1, New: 1, Unchanged: 0}) {
		t.Fatalf("edit + new = %+v", st)
	}
	loc := wantAt(t, db, "a", "sanitize", "queued")
	if loc.Record.Text != "praise a" || len(loc.Output) != 0 {
		t.Fatalf("edited item = %+v", loc)
	}
	if _, err := db.Locate("nope"); err == nil {
		t.Fatal("Locate of an unknown id succeeded")
	}
	Finish(t, db)
	tally, _ := db.Tally()
	if tally.Items != 3 || tally.Labels["praise"] != 1 || tally.Labels["bug"] != 1 || tally.Labels["ux"] != 1 {
		t.Fatalf("tally after edit = %+v", tally)
	}
}

func testTransitions(t *testing.T, db pipeline.Database) {
	ingest(t, db, Record("a", "bug a", "x", ""), Record("b", "bug b", "x", ""), Record("c", "ux c", "x", ""))
	if n := Advance(t, db, "sanitize"); n != 3 {
		t.Fatalf("sanitize advanced %d", n)
	}
	qs := queued(t, db, "classify")
	if len(qs) != 3 || qs[0].Item.Outputs["sanitize"] == nil || string(qs[0].Item.Prev) != string(qs[0].Item.Outputs["sanitize"]) {
		t.Fatalf("classify queue lacks the sanitize output: %+v", qs)
	}
	// a succeeds, b is dead-lettered, c stays queued.
	commit(t, db, success("classify", qs[0]), deadLetter("classify", qs[1], "blocked"))
	Invariants(t, db)
	loc := wantAt(t, db, "b", "classify", "dead")
	if loc.Dead == nil || loc.Dead.Message != "blocked" || loc.Dead.Class != pipeline.ClassPermanent {
		t.Fatalf("dead letter = %+v", loc.Dead)
	}
	wantAt(t, db, "c", "classify", "queued")
	Advance(t, db, "aggregate")
	wantAt(t, db, "a", "", "done")
	c, _ := db.Counts()
	if c.Done != 1 || c.Items != 3 || c.Stages[1].Dead != 1 || c.Stages[1].Queued != 1 || c.Stages[0].Output != 3 || c.Stages[2].Output != 1 {
		t.Fatalf("counts = %+v", c)
	}
	n := 0
	err := db.ForEachOutput("classify", func(rec pipeline.Record, out json.RawMessage) error {
		n++
		if rec.ID != "a" || !strings.Contains(string(out), "bug") {
			t.Errorf("classify output of %q = %s", rec.ID, out)
		}
		return nil
	})
	if err != nil || n != 1 {
		t.Fatalf("ForEachOutput: %d outputs, %v", n, err)
	}
	if err := db.Commit([]pipeline.Transition{{Stage: "nope", ID: "a", Seq: 1, Outcome: pipeline.Succeeded}}); err == nil {
		t.Error("a transition at an unknown stage was accepted")
	}
}

func testCommitIdempotent(t *testing.T, db pipeline.Database) {
	ingest(t, db, Record("a", "bug a", "x", "3"))
	q := queued(t, db, "sanitize")
	for range 3 {
		commit(t, db, success("sanitize", q[0]))
	}
	if got := queued(t, db, "classify"); len(got) != 1 {
		t.Fatalf("classify queue after a triple commit holds %d entries", len(got))
	}
	Advance(t, db, "classify")
	q = queued(t, db, "aggregate")
	tr := success("aggregate", q[0])
	commit(t, db, tr, tr) // twice in one batch, then again
	commit(t, db, tr)
	tally, _ := db.Tally()
	if tally.Items != 1 || tally.Ratings["bug"].Count != 1 {
		t.Fatalf("a fact folded more than once: %+v", tally)
	}
}

// testStale: a transition computed before an edit, a re-run or a re-queue
// moved its item must be ignored when it is committed late: the item
// stays where the operation put it, with no output from the old work.
func testStale(t *testing.T, open Open) {
	tests := []struct {
		name string
		// prepare brings item "a" to stage and returns the stale
		// transition; move then moves the item to a new queue entry at
		// wantStage.
		stage     string
		prepare   func(t *testing.T, db pipeline.Database) pipeline.Transition
		move      func(t *testing.T, db pipeline.Database)
		wantStage string
	}{
		{
			name:  "after an edited re-ingest",
			stage: "sanitize",
			prepare: func(t *testing.T, db pipeline.Database) pipeline.Transition {
				return success("sanitize", queued(t, db, "sanitize")[0])
			},
			move: func(t *testing.T, db pipeline.Database) {
				if st := ingest(t, db, Record("a", "praise a (edited)", "x", "")); st.Changed != 1 {
					t.Fatalf("edit = %+v", st)
				}
			},
			wantStage: "sanitize",
		},
		{
			name:  "after a rerun",
			stage: "classify",
			prepare: func(t *testing.T, db pipeline.Database) pipeline.Transition {
				Advance(t, db, "sanitize")
				tr := success("classify", queued(t, db, "classify")[0])
				Finish(t, db)
				return tr
			},
			move: func(t *testing.T, db pipeline.Database) {
				if n, err := db.Rerun("classify"); err != nil || n != 1 {
					t.Fatalf("Rerun = %d, %v", n, err)
				}
			},
			wantStage: "classify",
		},
		{
			name:  "after a requeue",
			stage: "classify",
			prepare: func(t *testing.T, db pipeline.Database) pipeline.Transition {
				Advance(t, db, "sanitize")
				q := queued(t, db, "classify")[0]
				commit(t, db, deadLetter("classify", q, "blocked"))
				return success("classify", q)
			},
			move: func(t *testing.T, db pipeline.Database) {
				if n, err := db.Requeue("classify", []string{"a"}); err != nil || n != 1 {
					t.Fatalf("Requeue = %d, %v", n, err)
				}
			},
			wantStage: "classify",
		},
		{
			name:  "after it was applied",
			stage: "classify",
			prepare: func(t *testing.T, db pipeline.Database) pipeline.Transition {
				Advance(t, db, "sanitize")
				return success("classify", queued(t, db, "classify")[0])
			},
			move: func(t *testing.T, db pipeline.Database) {
				Advance(t, db, "classify")
			},
			wantStage: "aggregate",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db := open(t)
			ingest(t, db, Record("a", "bug a", "x", "4"))
			stale := tc.prepare(t, db)
			tc.move(t, db)
			before := locate(t, db, "a")
			seq := seqOf(t, db, tc.wantStage, "a")
			if seq == 0 || seq == stale.Seq && tc.wantStage == tc.stage {
				t.Fatalf("after the move, a is at %s seq %d (stale seq %d): the move did not re-queue it", tc.wantStage, seq, stale.Seq)
			}
			commit(t, db, stale)
			after := wantAt(t, db, "a", tc.wantStage, "queued")
			if got := seqOf(t, db, tc.wantStage, "a"); got != seq {
				t.Fatalf("the stale transition moved a from seq %d to %d", seq, got)
			}
			if b, _ := json.Marshal(after.Output); string(b) != string(mustJSON(before.Output)) {
				t.Fatalf("the stale transition changed a's outputs: %s, was %s", b, mustJSON(before.Output))
			}
			Invariants(t, db)
		})
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func testFieldEdits(t *testing.T, db pipeline.Database) {
	ingest(t, db, Record("a", "bug a", "x", "1"), Record("b", "bug b", "x", "1"))
	Finish(t, db)
	ingest(t, db, Record("q", "bug q", "x", "1")) // stays queued at sanitize
	qSeq := seqOf(t, db, "sanitize", "q")

	tests := []struct {
		name      string
		rec       pipeline.Record
		want      pipeline.IngestStats
		wantStage string // "" = done
		kept      []string
	}{
		{"a field no stage reads", withField(Record("a", "bug a", "x", "1"), "note", "changed"), pipeline.IngestStats{Updated: 1}, "", nil},
		{"the app, read only by the aggregate", Record("a", "bug a", "y", "1"), pipeline.IngestStats{Changed: 1}, "aggregate", []string{"sanitize", "classify"}},
		{"the rating, field name in another case", withField(Record("b", "bug b", "x", ""), "Rating", "5"), pipeline.IngestStats{Changed: 1}, "aggregate", []string{"sanitize", "classify"}},
		{"the text", Record("b", "ux b", "x", "1"), pipeline.IngestStats{Changed: 1}, "sanitize", nil},
		{"the app of an item not yet aggregated", Record("q", "bug q", "z", "1"), pipeline.IngestStats{Updated: 1}, "sanitize", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if st := ingest(t, db, tc.rec); st != tc.want {
				t.Fatalf("ingest = %+v, want %+v", st, tc.want)
			}
			loc := locate(t, db, tc.rec.ID)
			if tc.wantStage == "" && loc.Status != "done" || tc.wantStage != "" && (loc.Status != "queued" || loc.Stage != tc.wantStage) {
				t.Fatalf("item %q is %s at %s, want queued at %q (\"\" = done)", tc.rec.ID, loc.Status, loc.Stage, tc.wantStage)
			}
			if !equalRecords(loc.Record, tc.rec) {
				t.Fatalf("stored record %+v, want %+v", loc.Record, tc.rec)
			}
			for _, s := range tc.kept {
				if loc.Output[s] == nil {
					t.Errorf("output of %s was dropped", s)
				}
			}
			if st := ingest(t, db, tc.rec); st != (pipeline.IngestStats{Unchanged: 1}) {
				t.Fatalf("the same edit again = %+v", st)
			}
			Invariants(t, db)
		})
	}
	if got := seqOf(t, db, "sanitize", "q"); got != qSeq {
		t.Errorf("an edit nothing had read yet re-queued q (seq %d -> %d)", qSeq, got)
	}
	Finish(t, db)
	tally, _ := db.Tally()
	if tally.Groups["app"]["y"]["bug"] != 1 || tally.Groups["app"]["z"]["bug"] != 1 || tally.Labels["ux"] != 1 {
		t.Fatalf("the tally does not follow the edits: %+v", tally.Groups)
	}
}

func withField(r pipeline.Record, k, v string) pipeline.Record {
	r.Fields[k] = v
	return r
}

func equalRecords(a, b pipeline.Record) bool {
	return a.ID == b.ID && a.Text == b.Text && string(mustJSON(a.Fields)) == string(mustJSON(b.Fields))
}

func testRequeue(t *testing.T, db pipeline.Database) {
	ingest(t, db, Record("a", "bug a", "x", ""), Record("b", "bug b", "x", ""), Record("c", "bug c", "x", ""))
	Advance(t, db, "sanitize")
	Advance(t, db, "classify", "a", "b", "c")
	if _, err := db.Requeue("classify", []string{"zzz"}); err == nil {
		t.Fatal("requeue of an id with no dead letter succeeded")
	}
	if _, err := db.Requeue("nope", nil); err == nil {
		t.Fatal("requeue at an unknown stage succeeded")
	}
	if n, err := db.Requeue("classify", []string{"b"}); err != nil || n != 1 {
		t.Fatalf("Requeue(b) = %d, %v", n, err)
	}
	if _, err := db.Requeue("classify", []string{"b"}); err == nil {
		t.Fatal("a second requeue of b succeeded")
	}
	wantAt(t, db, "b", "classify", "queued")
	if n, err := db.Requeue("classify", nil); err != nil || n != 2 {
		t.Fatalf("Requeue(all) = %d, %v", n, err)
	}
	if n, err := db.Requeue("classify", nil); err != nil || n != 0 {
		t.Fatalf("Requeue(all) again = %d, %v", n, err)
	}
	Invariants(t, db)
	Finish(t, db)
	if c, _ := db.Counts(); c.Done != 3 {
		t.Fatalf("done = %d", c.Done)
	}
}

func testRerun(t *testing.T, db pipeline.Database) {
	ingest(t, db, Record("a", "bug a", "x", "2"), Record("b", "ux b", "x", ""), Record("c", "bug c", "x", ""), Record("d", "bug d", "x", ""))
	Advance(t, db, "sanitize", "d") // d dead before classify: untouched
	Advance(t, db, "classify")
	Advance(t, db, "aggregate", "c") // c dead at aggregate: re-run
	if _, err := db.Rerun("nope"); err == nil {
		t.Fatal("rerun of an unknown stage succeeded")
	}
	n, err := db.Rerun("classify")
	if err != nil || n != 3 {
		t.Fatalf("Rerun(classify) = %d, %v", n, err)
	}
	for _, id := range []string{"a", "b", "c"} {
		loc := wantAt(t, db, id, "classify", "queued")
		if loc.Output["sanitize"] == nil || loc.Output["classify"] != nil || loc.Output["aggregate"] != nil {
			t.Fatalf("%s outputs after rerun: %v", id, loc.Output)
		}
	}
	wantAt(t, db, "d", "sanitize", "dead")
	if tally, _ := db.Tally(); tally.Items != 0 || len(tally.Labels) != 0 || len(tally.Ratings) != 0 {
		t.Fatalf("tally after rerun = %+v", tally)
	}
	if h, _ := db.DeadHistory("c"); len(h) != 1 || h[0].Reason != "rerun" || h[0].Stage != "aggregate" {
		t.Fatalf("c's dead letter was not kept in its history: %+v", h)
	}
	Invariants(t, db)
	Finish(t, db)
	if n, err := db.Rerun("aggregate"); err != nil || n != 3 {
		t.Fatalf("Rerun(aggregate) = %d, %v", n, err)
	}
}

func testHistory(t *testing.T, db pipeline.Database) {
	ingest(t, db, Record("a", "bug a", "x", ""))
	Advance(t, db, "sanitize")
	Advance(t, db, "classify", "a")
	db.Requeue("classify", []string{"a"})
	Advance(t, db, "classify", "a")
	if n, err := db.Requeue("classify", nil); err != nil || n != 1 {
		t.Fatalf("Requeue = %d, %v", n, err)
	}
	Advance(t, db, "classify", "a")
	ingest(t, db, Record("a", "bug a, edited", "x", ""))
	h, err := db.DeadHistory("a")
	if err != nil || len(h) != 3 {
		t.Fatalf("history = %+v, %v; want 3 dead letters", h, err)
	}
	for i, want := range []string{"requeue", "requeue", "edited"} {
		if h[i].Reason != want || h[i].Stage != "classify" || h[i].Dead.Message != "no good: a" || h[i].Retired.IsZero() {
			t.Errorf("history[%d] = %+v, want reason %s", i, h[i], want)
		}
	}
	loc := locate(t, db, "a")
	if len(loc.History) != 3 || loc.History[2].Reason != "edited" {
		t.Fatalf("Locate history = %+v", loc.History)
	}
	if _, err := db.DeadHistory("nope"); err == nil {
		t.Error("DeadHistory of an unknown id succeeded")
	}
	ingest(t, db, Record("b", "bug b", "x", ""))
	if h, err := db.DeadHistory("b"); err != nil || len(h) != 0 {
		t.Fatalf("history of b = %+v, %v", h, err)
	}
}

func testPrune(t *testing.T, db pipeline.Database) {
	ingest(t, db, Record("a", "bug a", "x", "1"), Record("b", "bug b", "x", "2"), Record("c", "ux c", "x", "3"), Record("d", "bug d", "y", ""), Record("e", "bug e", "y", ""))
	Advance(t, db, "sanitize")
	Advance(t, db, "classify", "d")
	db.Requeue("classify", []string{"d"})
	Advance(t, db, "classify", "d") // d dead, with a history
	Advance(t, db, "aggregate")
	ingest(t, db, Record("f", "bug f", "z", "")) // queued
	keep := func(id string) bool { return id == "a" || id == "e" }
	before, _ := db.Counts()
	beforeTally, _ := db.Tally()
	if n, err := db.Prune(keep, true); err != nil || n != 4 {
		t.Fatalf("Prune dry run = %d, %v; want 4", n, err)
	}
	if after, _ := db.Counts(); string(mustJSON(after)) != string(mustJSON(before)) {
		t.Fatalf("a dry run changed the counts: %+v -> %+v", before, after)
	}
	if tally, _ := db.Tally(); len(tally.Diff(beforeTally)) != 0 {
		t.Fatal("a dry run changed the tally")
	}
	if n, err := db.Prune(keep, false); err != nil || n != 4 {
		t.Fatalf("Prune = %d, %v; want 4", n, err)
	}
	for _, id := range []string{"b", "c", "d", "f"} {
		if _, err := db.Locate(id); err == nil {
			t.Errorf("pruned %q is still there", id)
		}
	}
	c, _ := db.Counts()
	tally, _ := db.Tally()
	if c.Items != 2 || c.Done != 2 || tally.Items != 2 || tally.Labels["ux"] != 0 || tally.Ratings["bug"].Count != 1 {
		t.Fatalf("after prune: counts %+v, tally %+v", c, tally)
	}
	if n, err := db.Prune(keep, false); err != nil || n != 0 {
		t.Fatalf("Prune again = %d, %v", n, err)
	}
	// A pruned id that comes back is new.
	if st := ingest(t, db, Record("d", "bug d", "y", "")); st.New != 1 {
		t.Fatalf("re-ingest of a pruned id = %+v", st)
	}
	if h, _ := db.DeadHistory("d"); len(h) != 0 {
		t.Fatalf("a pruned item's history survived: %+v", h)
	}
}

// testRatings: sums stay exact, so an average corrected by an edit is
// right and huge ratings do not overflow.
func testRatings(t *testing.T, db pipeline.Database) {
	ingest(t, db, Record("a", "bug a", "x", "3"), Record("b", "bug b", "x", "1e17"),
		Record("h1", "huge h1", "x", "1e308"), Record("h2", "huge h2", "x", "1e308"),
		Record("t1", "tenth t1", "x", "0.1"), Record("t2", "tenth t2", "x", "0.2"))
	Finish(t, db)
	ingest(t, db, Record("b", "bug b", "x", "5"))
	Finish(t, db)
	tally, err := db.Tally()
	if err != nil {
		t.Fatal(err)
	}
	if got := tally.Ratings["bug"]; got.Count != 2 || got.Mean() != 4 {
		t.Errorf("3 and 1e17 corrected to 5: mean %v over %d, want 4 over 2", got.Mean(), got.Count)
	}
	if got := tally.Ratings["huge"]; got.Count != 2 || got.Mean() != 1e308 {
		t.Errorf("1e308 twice: mean %v over %d, want 1e308", got.Mean(), got.Count)
	}
	want, _ := new(big.Int).SetString("300000000", 10) // 0.3 at the fixed scale
	if got := tally.Ratings["tenth"]; got.Scaled == nil || got.Scaled.Cmp(want) != 0 {
		t.Errorf("0.1 + 0.2 = %v (scaled), want exactly %v", got.Scaled, want)
	}
}

// testTallyRandom applies a long deterministic mix of operations and
// checks the invariants (stored tally = recomputed) after each.
func testTallyRandom(t *testing.T, db pipeline.Database) {
	state := uint64(42)
	rnd := func(n int) int { // xorshift: deterministic, no shared source
		state ^= state << 13
		state ^= state >> 7
		state ^= state << 17
		return int(state % uint64(n))
	}
	labels := []string{"bug", "ux", "praise"}
	rec := func() pipeline.Record {
		id := fmt.Sprintf("i%02d", rnd(40))
		return Record(id, labels[rnd(3)]+" "+id, []string{"x", "y"}[rnd(2)], []string{"", "1", "2.5", "1e17"}[rnd(4)])
	}
	for step := range 60 {
		switch op := rnd(7); op {
		case 0, 1:
			ingest(t, db, rec(), rec(), rec())
		case 2:
			var dead []string
			for range 3 {
				dead = append(dead, fmt.Sprintf("i%02d", rnd(40)))
			}
			Advance(t, db, Stages[rnd(3)].Name, dead...)
		case 3:
			Finish(t, db)
		case 4:
			if _, err := db.Rerun(Stages[rnd(3)].Name); err != nil {
				t.Fatal(err)
			}
		case 5:
			if _, err := db.Requeue(Stages[rnd(3)].Name, nil); err != nil {
				t.Fatal(err)
			}
		case 6:
			cut := rnd(40)
			if _, err := db.Prune(func(id string) bool { n, _ := strconv.Atoi(id[1:]); return n != cut }, false); err != nil {
				t.Fatal(err)
			}
		}
		Invariants(t, db)
		if t.Failed() {
			t.Fatalf("invariants broken at step %d", step)
		}
	}
}

func testUsage(t *testing.T, db pipeline.Database) {
	ingest(t, db, Record("a", "bug a", "x", ""), Record("b", "bug b", "x", ""))
	Advance(t, db, "sanitize")
	qs := queued(t, db, "classify")
	u := pipeline.Usage{PromptTokens: 100, CandidateTokens: 10, TotalTokens: 110}
	ok := success("classify", qs[0])
	ok.Usage = u
	dl := deadLetter("classify", qs[1], "blocked")
	dl.Usage = pipeline.Usage{PromptTokens: 7, TotalTokens: 7}
	commit(t, db, ok, dl)
	commit(t, db, ok) // already applied: recorded once
	got, err := db.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if want := u.Add(dl.Usage); got["classify"] != want || got["sanitize"] != (pipeline.Usage{}) {
		t.Fatalf("Usage = %+v, want classify %+v", got, want)
	}
}

func testRuns(t *testing.T, db pipeline.Database) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		r := pipeline.RunSummary{ID: fmt.Sprintf("run-%d", i), Started: base.Add(time.Duration(i) * time.Minute), Ended: base.Add(time.Duration(i)*time.Minute + time.Second), Status: "complete"}
		if err := db.SaveRun(r); err != nil {
			t.Fatal(err)
		}
	}
	r := pipeline.RunSummary{ID: "run-1", Status: "stopped", Message: "interrupted"}
	if err := db.SaveRun(r); err != nil {
		t.Fatal(err)
	}
	runs, err := db.Runs(2)
	if err != nil || len(runs) != 2 || runs[0].ID != "run-2" || runs[1].ID != "run-1" || runs[1].Status != "stopped" {
		t.Fatalf("Runs(2) = %+v, %v", runs, err)
	}
	if all, _ := db.Runs(100); len(all) != 3 {
		t.Fatalf("Runs(100) returned %d, want 3 (a replaced record counts once)", len(all))
	}
	db.AppendSamples("run-2", []pipeline.Sample{{At: base.Add(2 * time.Second), Limit: 2}, {At: base.Add(time.Second), Limit: 1}})
	db.AppendSamples("run-2", []pipeline.Sample{{At: base.Add(3 * time.Second), Limit: 3}})
	db.AppendSamples("run-2", nil)
	s, err := db.Samples("run-2")
	if err != nil || len(s) != 3 || s[0].Limit != 1 || s[2].Limit != 3 {
		t.Fatalf("Samples = %+v, %v", s, err)
	}
	if s, err := db.Samples("none"); err != nil || len(s) != 0 {
		t.Fatalf("Samples of an unknown run = %+v, %v", s, err)
	}
}

func testLearnedLimit(t *testing.T, db pipeline.Database) {
	if n := db.LearnedLimit("classify"); n != 0 {
		t.Fatalf("LearnedLimit of a new database = %d", n)
	}
	if err := db.SetLearnedLimit("classify", 17); err != nil {
		t.Fatal(err)
	}
	db.SetLearnedLimit("sanitize", 3)
	if n := db.LearnedLimit("classify"); n != 17 {
		t.Fatalf("LearnedLimit = %d, want 17", n)
	}
}
