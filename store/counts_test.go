package store

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// recounted counts db's state bucket from scratch.
func recounted(t testing.TB, db *DB) itemCounts {
	t.Helper()
	var c itemCounts
	if err := db.view(func(tx *bolt.Tx) error {
		var err error
		c, err = db.recount(tx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return c
}

// keptCounts is db's counts key; it fails the test when there is none.
func keptCounts(t testing.TB, db *DB) itemCounts {
	t.Helper()
	var c itemCounts
	var ok bool
	if err := db.view(func(tx *bolt.Tx) error {
		var err error
		c, ok, err = db.kept(tx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatal("no kept counts")
	}
	return c
}

// sameAsRecount fails when the kept counts differ from a recount.
func sameAsRecount(t testing.TB, db *DB) {
	t.Helper()
	if kept, got := keptCounts(t, db), recounted(t, db); !reflect.DeepEqual(kept, got) {
		t.Errorf("kept counts %+v, recount %+v", kept, got)
	}
}

// commitOne commits one outcome for the item queued at stage.
func commitOne(t *testing.T, db *DB, stage, id string, o pipeline.Outcome) {
	t.Helper()
	qs, err := db.Queued(stage, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Item.ID != id {
			continue
		}
		tr := pipeline.Transition{Stage: stage, ID: id, Seq: q.Seq, Outcome: o, Result: pipeline.Result{Output: fact("bug")}}
		if o == pipeline.DeadLettered {
			tr.Dead = pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: "no", Attempts: 1}
		}
		if err := db.Commit([]pipeline.Transition{tr, tr}); err != nil { // the second is stale
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("%s is not queued at %s", id, stage)
}

// TestDB_countsKept applies every kind of transition in turn and, after
// each, compares the kept counts with a recount of the state bucket.
func TestDB_countsKept(t *testing.T) {
	db := atClassify(t, "a", "b", "c", "d", "e", "f", "g")
	steps := []struct {
		name string
		op   func(t *testing.T)
	}{
		{"ingest new", func(t *testing.T) {
			if _, err := db.Ingest(recs("h", "i")); err != nil {
				t.Fatal(err)
			}
		}},
		{"ingest unchanged", func(t *testing.T) {
			if st, err := db.Ingest(recs("a", "h")); err != nil || st.Unchanged != 2 {
				t.Fatalf("%+v %v", st, err)
			}
		}},
		{"billed", func(t *testing.T) {
			qs, _ := db.Queued("classify", 0, 1)
			err := db.Commit([]pipeline.Transition{{Stage: "classify", ID: qs[0].Item.ID, Seq: qs[0].Seq, Outcome: pipeline.Billed,
				Usage: pipeline.Usage{TotalTokens: 3}}})
			if err != nil {
				t.Fatal(err)
			}
		}},
		{"success to the next stage", func(t *testing.T) { commitOne(t, db, "classify", "a", pipeline.Succeeded) }},
		{"success to done", func(t *testing.T) { commitOne(t, db, "aggregate", "a", pipeline.Succeeded) }},
		{"dead letter", func(t *testing.T) { commitOne(t, db, "classify", "b", pipeline.DeadLettered) }},
		{"requeue by id", func(t *testing.T) {
			if n, err := db.Requeue("classify", []string{"b"}); err != nil || n != 1 {
				t.Fatalf("%d %v", n, err)
			}
		}},
		{"requeue all", func(t *testing.T) {
			commitOne(t, db, "classify", "b", pipeline.DeadLettered)
			commitOne(t, db, "classify", "c", pipeline.DeadLettered)
			if n, err := db.Requeue("classify", nil); err != nil || n != 2 {
				t.Fatalf("%d %v", n, err)
			}
		}},
		{"edit re-enters", func(t *testing.T) {
			r := recs("a")
			r[0].Text = "edited"
			if st, err := db.Ingest(r); err != nil || st.Changed != 1 {
				t.Fatalf("%+v %v", st, err)
			}
		}},
		{"edit of a queued item's record", func(t *testing.T) {
			r := recs("d")
			r[0].Fields["app"] = "other"
			if st, err := db.Ingest(r); err != nil || st.Changed+st.Updated != 1 {
				t.Fatalf("%+v %v", st, err)
			}
		}},
		{"dead at the last stage", func(t *testing.T) {
			commitOne(t, db, "classify", "e", pipeline.Succeeded)
			commitOne(t, db, "aggregate", "e", pipeline.DeadLettered)
			commitOne(t, db, "classify", "f", pipeline.Succeeded)
			commitOne(t, db, "aggregate", "f", pipeline.Succeeded)
		}},
		{"rerun", func(t *testing.T) {
			if n, err := db.Rerun("aggregate"); err != nil || n != 2 {
				t.Fatalf("%d %v", n, err)
			}
		}},
		{"reserve a batch", func(t *testing.T) { reserve(t, db, 3) }},
		{"commit a batch", func(t *testing.T) {
			jobs, err := db.BatchJobs(true)
			if err != nil || len(jobs) != 1 {
				t.Fatalf("%v %v", jobs, err)
			}
			j := jobs[0]
			if _, err := db.CommitBatch(j.Num, []pipeline.Transition{result(j.Items[0], pipeline.Succeeded), result(j.Items[1], pipeline.DeadLettered)}); err != nil {
				t.Fatal(err)
			}
		}},
		{"return a batch", func(t *testing.T) {
			jobs, _ := db.BatchJobs(true)
			if n, err := db.ReturnBatch(jobs[0].Num, "expired", batchNow); err != nil || n != 1 {
				t.Fatalf("%d %v", n, err)
			}
		}},
		{"restore", func(t *testing.T) {
			locs := []pipeline.Location{
				{ID: "r1", Stage: "classify", Status: "queued", Record: recs("r1")[0], Output: map[string]json.RawMessage{"sanitize": json.RawMessage(`{"text":"x"}`)}},
				{ID: "r2", Stage: "sanitize", Status: "dead", Record: recs("r2")[0], Dead: &pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: "empty"}},
				{ID: "r3", Stage: "aggregate", Status: "done", Record: recs("r3")[0], Output: map[string]json.RawMessage{
					"sanitize": json.RawMessage(`{"text":"x"}`), "classify": jsonOut("r3"), "aggregate": fact("bug")}},
			}
			if err := db.Restore(locs); err != nil {
				t.Fatal(err)
			}
		}},
		{"prune", func(t *testing.T) {
			n, err := db.Prune(func(id string) bool { return !strings.ContainsAny(id, "bfr") }, false)
			if err != nil || n != 5 {
				t.Fatalf("%d %v", n, err)
			}
		}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			s.op(t)
			sameAsRecount(t, db)
		})
	}
	c := counts(t, db)
	if c.Items != 7 || c.Done != 0 || c.Stages[2].Queued != 2 || c.Stages[1].Output != 2 {
		t.Errorf("counts at the end = %+v", c)
	}
}

// TestDB_countsInsertStage keeps the counts right when an open adds a
// stage and renumbers every state.
func TestDB_countsInsertStage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "st.db")
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Ingest(recs("a", "b", "c")); err != nil {
		t.Fatal(err)
	}
	advance(t, db, "sanitize", jsonOut)
	advance(t, db, "classify", jsonOut)
	commitOne(t, db, "aggregate", "a", pipeline.Succeeded)
	commitOne(t, db, "aggregate", "b", pipeline.DeadLettered)
	db.Close()

	grown := []StageDef{testStages[0], {Name: "extract"}, testStages[1], testStages[2]}
	db, err = Open(path, Options{Stages: grown})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sameAsRecount(t, db)
	if c := counts(t, db); c.Stages[1].Queued != 3 || c.Items != 3 {
		t.Errorf("counts = %+v, want the 3 items at extract", c)
	}
}

// TestDB_countsOldFiles: a format 2 file written before the counts were
// kept is counted from its states by a read-only open and keeps them from
// its first writable open on; the format 1 fixture gets them by its
// migration.
func TestDB_countsOldFiles(t *testing.T) {
	t.Run("format 2 without the key", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "st.db")
		db, err := Open(path, Options{Stages: testStages})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Ingest(recs("a", "b", "c", "d")); err != nil {
			t.Fatal(err)
		}
		advance(t, db, "sanitize", jsonOut)
		commitOne(t, db, "classify", "a", pipeline.DeadLettered)
		commitOne(t, db, "classify", "b", pipeline.Succeeded)
		want := counts(t, db)
		// As today's main writes it: no counts key.
		if err := db.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Delete(keyCounts) }); err != nil {
			t.Fatal(err)
		}
		db.Close()

		ro, err := Open(path, Options{Stages: testStages, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if got := counts(t, ro); !reflect.DeepEqual(got, want) {
			t.Errorf("read-only counts %+v, want %+v", got, want)
		}
		ro.Close()

		db, err = Open(path, Options{Stages: testStages})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		sameAsRecount(t, db)
		if got := counts(t, db); !reflect.DeepEqual(got, want) {
			t.Errorf("counts after a writable open %+v, want %+v", got, want)
		}
		commitOne(t, db, "classify", "c", pipeline.Succeeded)
		sameAsRecount(t, db)
	})
	t.Run("format 1 fixture migrated", func(t *testing.T) {
		path := copyFixture(t)
		snap := readFormat1(t, path)
		want := itemCounts{stages: make([]stageCount, len(testStages))}
		for _, s := range snap.states {
			want.add(s, +1)
		}
		db, err := Open(path, Options{Stages: testStages})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if got := keptCounts(t, db); !reflect.DeepEqual(got, want) {
			t.Errorf("kept counts %+v, want %+v from the fixture's states", got, want)
		}
		if want.done == 0 || want.stages[1].dead == 0 {
			t.Errorf("the fixture should hold done and dead items: %+v", want)
		}
	})
}

// TestDB_Check_counts: verify reports kept counts that disagree with the
// states.
func TestDB_Check_counts(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "st.db"), Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Ingest(recs("a", "b")); err != nil {
		t.Fatal(err)
	}
	wrong := recounted(t, db)
	wrong.stages[0].queued++
	wrong.done = 7
	if err := db.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyCounts, wrong.encode()) }); err != nil {
		t.Fatal(err)
	}
	problems, err := db.Check()
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(problems, "\n")
	for _, want := range []string{"3 queued at sanitize kept, 2 in the state bucket", "7 done kept, 0 in the state bucket"} {
		if !strings.Contains(joined, want) {
			t.Errorf("Check = %q, want a line with %q", joined, want)
		}
	}
}

func TestDecodeCounts(t *testing.T) {
	c := itemCounts{stages: []stageCount{{1, 2, 3}, {0, 0, 1 << 40}}, done: 5}
	cases := []struct {
		name    string
		raw     []byte
		stages  int
		ok, bad bool
	}{
		{"round trip", c.encode(), 2, true, false},
		{"absent", nil, 2, false, false},
		{"another stage list", c.encode(), 3, false, false},
		{"truncated", c.encode()[:5], 2, false, true},
		{"trailing bytes", append(c.encode(), 0), 2, false, true},
		{"unknown version", append([]byte{9}, c.encode()[1:]...), 2, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := decodeCounts(tc.raw, tc.stages)
			if ok != tc.ok || (err != nil) != tc.bad {
				t.Fatalf("ok %v err %v", ok, err)
			}
			if ok && !reflect.DeepEqual(got, c) {
				t.Errorf("got %+v, want %+v", got, c)
			}
		})
	}
}
