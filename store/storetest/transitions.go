package storetest

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

func testDefinition(t *testing.T, db pipeline.Database) {
	def, err := db.StoredDefinition()
	if err != nil || !slices.Equal(pipeline.StageNames(def), pipeline.StageNames(Stages)) {
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
// One table, kept whole: each case is how the stale transition was made
// and what moved the item.
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
