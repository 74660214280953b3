package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

var testStages = []StageDef{{Name: "sanitize"}, {Name: "classify", Fingerprint: "m1"}, {Name: "aggregate"}}

// openTest opens a DB in t.TempDir and checks its consistency on cleanup.
// stageOutputs is every output of stage as ForEachOutput reads it, by id.
func stageOutputs(t testing.TB, db *DB, stage string) map[string]string {
	t.Helper()
	got := map[string]string{}
	if err := db.ForEachOutput(stage, func(rec pipeline.Record, out json.RawMessage) error {
		got[rec.ID] = string(out)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

func openTest(t testing.TB) *DB {
	t.Helper()
	db, err := Open(filepath.Join(t.TempDir(), "st.db"), Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if problems, err := db.Check(); err != nil || len(problems) > 0 {
			t.Errorf("check on cleanup: %v %v", err, problems)
		}
		db.Close()
	})
	return db
}

func recs(ids ...string) []pipeline.Record {
	var out []pipeline.Record
	for _, id := range ids {
		out = append(out, pipeline.Record{ID: id, Text: "text of " + id, Fields: map[string]string{"app": "a"}})
	}
	return out
}

func fact(label string) json.RawMessage {
	b, _ := json.Marshal(pipeline.Fact{Label: label, Groups: map[string]string{"app": "a"}})
	return b
}

// advance commits a success for every item queued at stage.
func advance(t testing.TB, db *DB, stage string, out func(id string) json.RawMessage) int {
	t.Helper()
	return commitQueued(t, db, stage, func(id string) pipeline.Transition {
		return pipeline.Transition{Outcome: pipeline.Succeeded, Result: pipeline.Result{Output: out(id)}}
	})
}

// deadLetterAll commits a permanent dead letter, message msg, for every
// item queued at stage.
func deadLetterAll(t testing.TB, db *DB, stage, msg string) {
	t.Helper()
	commitQueued(t, db, stage, func(string) pipeline.Transition {
		return pipeline.Transition{Outcome: pipeline.DeadLettered, Dead: pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: msg}}
	})
}

// commitQueued commits tr(id), given its stage, id and sequence, for
// every item queued at stage, and returns how many.
func commitQueued(t testing.TB, db *DB, stage string, tr func(id string) pipeline.Transition) int {
	t.Helper()
	qs, err := db.Queued(stage, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	ts := make([]pipeline.Transition, 0, len(qs))
	for _, q := range qs {
		x := tr(q.Item.ID)
		x.Stage, x.ID, x.Seq = stage, q.Item.ID, q.Seq
		ts = append(ts, x)
	}
	if err := db.Commit(ts); err != nil {
		t.Fatal(err)
	}
	return len(ts)
}

// numberedIDs are the ids fmt.Sprintf(format, i) for i from 0 to n-1.
func numberedIDs(format string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf(format, i)
	}
	return ids
}

// queuedAtClassify ingests recs, commits sanitize (jsonOut) for every
// item queued there and returns classify's queue, failing unless it
// holds just recs: the setup of every test of what classify's commits
// store (answers, their references and usage).
func queuedAtClassify(t testing.TB, db *DB, recs ...pipeline.Record) []pipeline.Queued {
	t.Helper()
	if _, err := db.Ingest(recs); err != nil {
		t.Fatal(err)
	}
	advance(t, db, "sanitize", jsonOut)
	qs, err := db.Queued("classify", 0, 1<<20)
	if err != nil || len(qs) != len(recs) {
		t.Fatalf("queued at classify: %d, %v; want the %d ingested", len(qs), err, len(recs))
	}
	return qs
}

func jsonOut(string) json.RawMessage { return json.RawMessage(`{"text":"x","label":"bug"}`) }

func counts(t testing.TB, db *DB) Counts {
	t.Helper()
	c, err := db.Counts()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDB_Transitions(t *testing.T) {
	db := openTest(t)
	st, err := db.Ingest(recs("a", "b", "c"))
	if err != nil || st.New != 3 {
		t.Fatalf("ingest: %+v %v", st, err)
	}
	if n := advance(t, db, "sanitize", jsonOut); n != 3 {
		t.Fatalf("sanitize advanced %d", n)
	}
	// classify: a succeeds, b is dead-lettered, c stays queued.
	qs, _ := db.Queued("classify", 0, 10)
	if len(qs) != 3 || string(qs[0].Item.Prev) == "" || qs[0].Item.Outputs["sanitize"] == nil {
		t.Fatalf("classify queue: %+v", qs)
	}
	bySeq := map[string]uint64{}
	for _, q := range qs {
		bySeq[q.Item.ID] = q.Seq
	}
	err = db.Commit([]pipeline.Transition{
		{Stage: "classify", ID: "a", Seq: bySeq["a"], Outcome: pipeline.Succeeded, Result: pipeline.Result{Output: jsonOut("a")}},
		{Stage: "classify", ID: "b", Seq: bySeq["b"], Outcome: pipeline.DeadLettered, Dead: pipeline.DeadLetter{Class: pipeline.ClassPermanent, Message: "blocked", Attempts: 1, First: time.Now(), Last: time.Now()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	advance(t, db, "aggregate", func(string) json.RawMessage { return fact("bug") })
	c := counts(t, db)
	want := Counts{Items: 3, Done: 1, Stages: []StageCounts{
		{Stage: "sanitize", Output: 3}, {Stage: "classify", Queued: 1, Dead: 1, Output: 1}, {Stage: "aggregate", Output: 1}}}
	if !equalJSON(c, want) {
		t.Fatalf("counts = %+v, want %+v", c, want)
	}
	tally, _ := db.Tally()
	if tally.Items != 1 || tally.Labels["bug"] != 1 || tally.Groups["app"]["a"]["bug"] != 1 {
		t.Fatalf("tally = %+v", tally)
	}
	loc, err := db.Locate("b")
	if err != nil || loc.Status != "dead" || loc.Stage != "classify" || loc.Dead == nil || loc.Dead.Message != "blocked" {
		t.Fatalf("locate b = %+v %v", loc, err)
	}
	if _, err := db.Locate("zzz"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("locate unknown: %v", err)
	}

	// Requeue b, finish everything.
	if n, err := db.Requeue("classify", []string{"b"}); err != nil || n != 1 {
		t.Fatalf("requeue: %d %v", n, err)
	}
	if _, err := db.Requeue("classify", []string{"b"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second requeue: %v", err)
	}
	advance(t, db, "classify", jsonOut)
	advance(t, db, "aggregate", func(string) json.RawMessage { return fact("ux") })
	c = counts(t, db)
	if c.Done != 3 {
		t.Fatalf("done = %d", c.Done)
	}
	tally, _ = db.Tally()
	if tally.Items != 3 || tally.Labels["bug"] != 1 || tally.Labels["ux"] != 2 {
		t.Fatalf("tally = %+v", tally)
	}

	// Rerun from classify: all three back at classify, tally empty.
	if n, err := db.Rerun("classify"); err != nil || n != 3 {
		t.Fatalf("rerun: %d %v", n, err)
	}
	c = counts(t, db)
	if c.Done != 0 || c.Stages[1].Queued != 3 || c.Stages[0].Output != 3 || c.Stages[1].Output != 0 {
		t.Fatalf("after rerun: %+v", c)
	}
	tally, _ = db.Tally()
	if tally.Items != 0 || len(tally.Labels) != 0 {
		t.Fatalf("tally after rerun = %+v", tally)
	}
}

func TestDB_CommitIsIdempotent(t *testing.T) {
	db := openTest(t)
	db.Ingest(recs("a"))
	qs, _ := db.Queued("sanitize", 0, 10)
	tr := []pipeline.Transition{{Stage: "sanitize", ID: "a", Seq: qs[0].Seq, Outcome: pipeline.Succeeded, Result: pipeline.Result{Output: jsonOut("a")}}}
	for i := 0; i < 3; i++ {
		if err := db.Commit(tr); err != nil {
			t.Fatal(err)
		}
	}
	c := counts(t, db)
	if c.Stages[0].Queued != 0 || c.Stages[1].Queued != 1 {
		t.Fatalf("counts after triple commit: %+v", c)
	}
	if qs, _ := db.Queued("classify", 0, 10); len(qs) != 1 {
		t.Fatalf("classify queue has %d entries, want 1", len(qs))
	}
}

func TestDB_IngestIdempotentAndEdits(t *testing.T) {
	db := openTest(t)
	db.Ingest(recs("a", "b"))
	advance(t, db, "sanitize", jsonOut)
	advance(t, db, "classify", jsonOut)
	advance(t, db, "aggregate", func(string) json.RawMessage { return fact("bug") })

	st, err := db.Ingest(recs("a", "b"))
	if err != nil || st != (IngestStats{Unchanged: 2}) {
		t.Fatalf("same file twice: %+v %v", st, err)
	}
	if c := counts(t, db); c.Done != 2 {
		t.Fatalf("done after re-ingest = %d", c.Done)
	}
	edited := recs("a")
	edited[0].Text = "edited"
	st, err = db.Ingest(append(edited, recs("c")...))
	if err != nil || st != (IngestStats{Changed: 1, New: 1}) {
		t.Fatalf("edit: %+v %v", st, err)
	}
	c := counts(t, db)
	if c.Done != 1 || c.Stages[0].Queued != 2 || c.Stages[1].Output != 1 {
		t.Fatalf("after edit: %+v", c)
	}
	tally, _ := db.Tally()
	if tally.Items != 1 || tally.Labels["bug"] != 1 {
		t.Fatalf("tally not corrected: %+v", tally)
	}
	loc, _ := db.Locate("a")
	if loc.Record.Text != "edited" || loc.Status != "queued" || loc.Stage != "sanitize" {
		t.Fatalf("a = %+v", loc)
	}
}

func TestOpen_Errors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	os.WriteFile(garbage, []byte(strings.Repeat("not a database ", 2000)), 0o600)
	truncated := filepath.Join(dir, "trunc.db")
	os.WriteFile(truncated, []byte("bolt"), 0o600)

	other := filepath.Join(dir, "other.db")
	bdb, _ := bolt.Open(other, 0o600, nil)
	bdb.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("x")); return err })
	bdb.Close()

	newer := filepath.Join(dir, "newer.db")
	db, err := Open(newer, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	db.bolt.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, []byte("99")) })
	db.Close()

	diffStages := filepath.Join(dir, "diff.db")
	db, _ = Open(diffStages, Options{Stages: testStages})
	db.Close()

	tests := []struct {
		name   string
		path   string
		stages []StageDef
		want   error
	}{
		{"garbage", garbage, testStages, ErrNotDatabase},
		{"four bytes", truncated, testStages, ErrNotDatabase},
		{"other bbolt file", other, testStages, ErrNotSawtooth},
		{"newer schema", newer, testStages, ErrNewerSchema},
		{"other stages", diffStages, []StageDef{{Name: "sanitize"}}, ErrDefinition},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db, err := Open(tc.path, Options{Stages: tc.stages, LockTimeout: 100 * time.Millisecond})
			if err == nil {
				db.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.path) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

func TestOpen_LockedAndMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", fi.Mode().Perm())
	}
	// bbolt's flock is per open file description, so a second Open in the
	// same process contends exactly as another process would.
	_, err = Open(path, Options{Stages: testStages, LockTimeout: 50 * time.Millisecond})
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "pid") {
		t.Fatalf("second open: %v", err)
	}
	if n := strings.Count(err.Error(), "in use"); n != 1 {
		t.Errorf("second open says %d times that the file is in use: %v", n, err)
	}
}

func TestDB_FingerprintChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	db, _ := Open(path, Options{Stages: testStages})
	db.Close()
	changed := []StageDef{{Name: "sanitize"}, {Name: "classify", Fingerprint: "m2"}, {Name: "aggregate"}}
	db, err := Open(path, Options{Stages: changed})
	if err != nil {
		t.Fatal(err)
	}
	if got := db.ChangedStages(); len(got) != 1 || got[0] != "classify" {
		t.Fatalf("changed = %v", got)
	}
	if err := db.AcceptDefinition(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, _ = Open(path, Options{Stages: changed})
	defer db.Close()
	if got := db.ChangedStages(); len(got) != 0 {
		t.Fatalf("changed after accept = %v", got)
	}
}

// TestNewRunID: ids sort by start time, and runs started in the same
// millisecond (a fleet's workers started together) get distinct ids.
func TestNewRunID(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, int(time.Millisecond), time.UTC)
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		id := NewRunID(at)
		if seen[id] {
			t.Fatalf("run id %s given twice for one millisecond", id)
		}
		seen[id] = true
		if later := NewRunID(at.Add(time.Millisecond)); later <= id {
			t.Fatalf("run id %s of a later start sorts before %s", later, id)
		}
	}
}

func TestDB_RunsAndSamples(t *testing.T) {
	db := openTest(t)
	for i := 0; i < 3; i++ {
		r := pipeline.RunSummary{ID: NewRunID(time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)), Status: "complete"}
		if err := db.SaveRun(r); err != nil {
			t.Fatal(err)
		}
	}
	runs, _ := db.Runs(2)
	if len(runs) != 2 || runs[0].ID <= runs[1].ID {
		t.Fatalf("runs = %+v", runs)
	}
	db.AppendSamples("r1", []pipeline.Sample{{Limit: 1}, {Limit: 2}})
	db.AppendSamples("r1", []pipeline.Sample{{Limit: 3}})
	s, _ := db.Samples("r1")
	if len(s) != 3 {
		t.Fatalf("samples = %+v", s)
	}
	if err := db.SetLearnedLimit("classify", 17); err != nil || db.LearnedLimit("classify") != 17 {
		t.Fatalf("learned limit: %v %d", err, db.LearnedLimit("classify"))
	}
}

func BenchmarkDB_Commit(b *testing.B) {
	db, _ := Open(filepath.Join(b.TempDir(), "b.db"), Options{Stages: testStages})
	defer db.Close()
	for i := 0; i < b.N; i += 1000 {
		var rs []pipeline.Record
		for j := 0; j < 1000; j++ {
			rs = append(rs, pipeline.Record{ID: "item-" + strconv.Itoa(i+j), Text: "t"})
		}
		db.Ingest(rs)
		advance(b, db, "sanitize", jsonOut)
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestAgg_MatchesTallyFold folds the same facts in and out through the
// store's counters and through pipeline.Tally and expects the same tally.
func TestAgg_MatchesTallyFold(t *testing.T) {
	// Not openTest: the facts are folded without items, which Check
	// rightly reports as a tally that disagrees with the outputs.
	db, err := Open(filepath.Join(t.TempDir(), "agg.db"), Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r := func(v float64) *float64 { return &v }
	facts := []struct {
		id   string
		f    pipeline.Fact
		sign int
	}{
		{"a", pipeline.Fact{Label: "bug", Groups: map[string]string{"app": "x", "month": "2026-01"}, Rating: r(1)}, +1},
		{"b", pipeline.Fact{Label: "bug", Groups: map[string]string{"app": "y", "month": "2026-01"}, Rating: r(2)}, +1},
		{"c", pipeline.Fact{Label: "ux", Groups: map[string]string{"app": "x", "month": "2026-02"}}, +1},
		{"a", pipeline.Fact{Label: "bug", Groups: map[string]string{"app": "x", "month": "2026-01"}, Rating: r(1)}, -1},
		{"d", pipeline.Fact{Label: "praise", Groups: map[string]string{"app": "x\x00odd", "month": "unknown"}, Rating: r(5)}, +1},
	}
	var want pipeline.Tally
	err = db.update(func(tx *bolt.Tx) error {
		for _, f := range facts {
			want.Fold(f.id, f.f, f.sign)
			if err := foldAgg(tx.Bucket(bucketAgg), nil, f.id, f.f, f.sign); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := db.Tally()
	if err != nil {
		t.Fatal(err)
	}
	if d := got.Diff(want); len(d) > 0 {
		t.Fatalf("store tally differs from pipeline.Tally: %v", d)
	}
	if !equalJSON(got.Examples, want.Examples) {
		t.Errorf("examples %v, want %v", got.Examples, want.Examples)
	}
}

// TestReadDefinition_Errors: the stage list read alone (run's start, the
// read-only commands) refuses what Open refuses, with Open's words: a
// newer sawtooth's file says to upgrade sawtooth, whatever its definition
// has become, and another program's bbolt file is not "empty".
func TestReadDefinition_Errors(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other.db")
	bdb, err := bolt.Open(other, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	bdb.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("x")); return err })
	bdb.Close()
	newer := func(name string, key []byte) string {
		path := filepath.Join(dir, name)
		db, err := Open(path, Options{Stages: testStages})
		if err != nil {
			t.Fatal(err)
		}
		db.bolt.Update(func(tx *bolt.Tx) error {
			meta := tx.Bucket(bucketMeta)
			if err := meta.Put(key, []byte("99")); err != nil {
				return err
			}
			return meta.Put(keyDef, []byte(`{"stages":{"v99":[]}}`))
		})
		db.Close()
		return path
	}
	tests := []struct {
		name string
		path string
		want error
		says string
	}{
		{"other bbolt file", other, ErrNotSawtooth, AnotherDB},
		{"newer schema", newer("schema.db", keySchema), ErrNewerSchema, "upgrade sawtooth"},
		{"newer record format", newer("format.db", keyFormat), ErrNewerSchema, "upgrade sawtooth"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadDefinition(tc.path, 100*time.Millisecond)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("err = %v, want %v saying %q", err, tc.want, tc.says)
			}
		})
	}
}
