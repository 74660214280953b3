package store

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// fixtureFormat3 was written by sawtooth at 2053787 (record format 3,
// before edits of the text): `sawtooth run` of 156 generated reviews,
// eight of them long ones in paragraphs, against `sawtooth sim`, then
// `sawtooth compact`. format3.golden.json holds what that binary read
// from it: every stage's outputs by item and the counts.
const fixtureFormat3 = "testdata/format3.db"

type fixtureGolden struct {
	Outputs map[string]map[string]string `json:"outputs"`
	Counts  pipeline.Counts              `json:"counts"`
}

func readGolden(t *testing.T, path string) fixtureGolden {
	t.Helper()
	var g fixtureGolden
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// assertReadsAs checks that db reads every output and count as want.
func assertReadsAs(t *testing.T, db *DB, want fixtureGolden) {
	t.Helper()
	for _, s := range db.stages {
		got := map[string]string{}
		if err := db.ForEachOutput(s.Name, func(rec pipeline.Record, out json.RawMessage) error {
			got[rec.ID] = string(out)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want.Outputs[s.Name]) {
			t.Errorf("%s: %d outputs, the golden has %d", s.Name, len(got), len(want.Outputs[s.Name]))
		}
		for id, w := range want.Outputs[s.Name] {
			if got[id] != w {
				t.Errorf("%s output of %s:\n got %s\nwant %s", s.Name, id, got[id], w)
			}
		}
	}
	c, err := db.Counts()
	if err != nil {
		t.Fatal(err)
	}
	cj, _ := json.Marshal(c)
	wj, _ := json.Marshal(want.Counts)
	if string(cj) != string(wj) {
		t.Errorf("counts %s, want %s", cj, wj)
	}
}

// A file today's main wrote (format 3) reads as that sawtooth read it:
// read-only as it is, and after a writable open or a compact raised to
// format 4 with no record rewritten; an item sanitized afterwards is
// stored as an edit beside the old records, and verify finds nothing.
func TestOpen_format3Fixture(t *testing.T) {
	stages := []StageDef{{Name: "sanitize"}, {Name: "classify"}, {Name: "aggregate"}}
	want := readGolden(t, "testdata/format3.golden.json")
	for _, tc := range []struct {
		name   string
		raise  func(t *testing.T, path string)
		format int
	}{
		{"read-only", func(*testing.T, string) {}, 3},
		{"writable open", func(t *testing.T, path string) {
			db, err := Open(path, Options{Stages: stages})
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		}, FormatVersion},
		{"compact", func(t *testing.T, path string) {
			if _, err := Compact(path, 0); err != nil {
				t.Fatal(err)
			}
		}, FormatVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f3.db")
			copyFile(t, fixtureFormat3, path)
			if got := rawFormat(t, path); got != 3 {
				t.Fatalf("fixture is format %d, want 3", got)
			}
			tc.raise(t, path)
			if got := rawFormat(t, path); got != tc.format {
				t.Errorf("file is format %d, want %d", got, tc.format)
			}
			ro, err := Open(path, Options{Stages: stages, ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			assertReadsAs(t, ro, want)
			if problems, err := ro.Check(); err != nil || len(problems) > 0 {
				t.Errorf("verify: %v %v", problems, err)
			}
			if err := ro.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}

	t.Run("new edits beside old records", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "f3.db")
		copyFile(t, fixtureFormat3, path)
		db, err := Open(path, Options{Stages: stages})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		rec := pipeline.Record{ID: "new-long", Text: longReview, Fields: map[string]string{"app": "a"}}
		if _, err := db.Ingest([]pipeline.Record{rec}); err != nil {
			t.Fatal(err)
		}
		out := sanitizeOut(t, longReview)
		qs, err := db.Queued("sanitize", 0, 10)
		if err != nil || len(qs) != 1 {
			t.Fatalf("queued %d, %v; want the new item", len(qs), err)
		}
		if err := db.Commit([]pipeline.Transition{{Stage: "sanitize", ID: rec.ID, Seq: qs[0].Seq,
			Outcome: pipeline.Succeeded, Result: pipeline.Result{Output: out}}}); err != nil {
			t.Fatal(err)
		}
		want.Outputs["sanitize"][rec.ID] = string(out)
		want.Counts.Items++
		for i := range want.Counts.Stages {
			if want.Counts.Stages[i].Stage == "sanitize" {
				want.Counts.Stages[i].Output++
			}
			if want.Counts.Stages[i].Stage == "classify" {
				want.Counts.Stages[i].Queued++
			}
		}
		assertReadsAs(t, db, want)
		if n := storedLen(t, db, "out/sanitize", rec.ID); n > 300 {
			t.Errorf("the new sanitize output is %d bytes, want an edit of the text", n)
		}
		if problems, err := db.Check(); err != nil || len(problems) > 0 {
			t.Errorf("verify: %v %v", problems, err)
		}
	})
}

// storedLen is the length of the value under key in bucket.
func storedLen(t *testing.T, db *DB, bucket, key string) int {
	t.Helper()
	n := -1
	if err := db.view(func(tx *bolt.Tx) error {
		if v := tx.Bucket([]byte(bucket)).Get([]byte(key)); v != nil {
			n = len(v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n < 0 {
		t.Fatalf("%s has no %s", bucket, key)
	}
	return n
}
