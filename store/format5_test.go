package store

import (
	"path/filepath"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// fixtureFormat5 was written by sawtooth at 557931b (record format 5,
// outputs referring to their answers by 16 bytes of the key): `sawtooth
// run` of 156 reviews (reviewgen seed 7, its one long review replaced by
// a piece of README.md) against `sawtooth sim`, then `sawtooth compact`.
// format5.golden.json holds what that binary read from it.
const fixtureFormat5 = "testdata/format5.db"

// A file today's main wrote (format 5) reads as that sawtooth read it:
// read-only as it is, and after a writable open or a compact raised to
// format 6 with no record rewritten (its outputs keep their 16-byte
// references); an output committed afterwards refers to its answer by 8
// bytes beside them, and verify finds nothing.
func TestOpen_format5Fixture(t *testing.T) {
	stages := []StageDef{{Name: "sanitize"}, {Name: "classify"}, {Name: "aggregate"}}
	want := readGolden(t, "testdata/format5.golden.json")
	open := func(t *testing.T, path string, readOnly bool) *DB {
		t.Helper()
		db, err := Open(path, Options{Stages: stages, ReadOnly: readOnly})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	for _, tc := range []struct {
		name   string
		raise  func(t *testing.T, path string)
		format int
	}{
		{"read-only", func(*testing.T, string) {}, 5},
		{"writable open", func(t *testing.T, path string) {
			if err := open(t, path, false).Close(); err != nil {
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
			path := filepath.Join(t.TempDir(), "f5.db")
			copyFile(t, fixtureFormat5, path)
			if got := rawFormat(t, path); got != 5 {
				t.Fatalf("fixture is format %d, want 5", got)
			}
			tc.raise(t, path)
			if got := rawFormat(t, path); got != tc.format {
				t.Errorf("file is format %d, want %d", got, tc.format)
			}
			ro := open(t, path, true)
			assertReadsAs(t, ro, want)
			if n := storedLen(t, ro, "out/classify", "r000001"); n != 1+answerRefLen {
				t.Errorf("r000001's output is %d bytes, want the fixture's reference by 16 bytes", n)
			}
			if problems, err := ro.Check(); err != nil || len(problems) > 0 {
				t.Errorf("verify: %v %v", problems, err)
			}
		})
	}

	t.Run("new references beside old ones", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "f5.db")
		copyFile(t, fixtureFormat5, path)
		db := open(t, path, false)
		// The new item asks the question r000001 asked: its output is
		// that cached answer.
		old, err := db.Locate("r000001")
		if err != nil {
			t.Fatal(err)
		}
		var key string
		var res pipeline.Result
		if err := db.ForEachAnswer("classify", func(k string, r pipeline.Result) error {
			if string(r.Output) == string(old.Output["classify"]) {
				key, res = k, r
			}
			return nil
		}); err != nil || key == "" {
			t.Fatalf("no cached answer is r000001's output (%v)", err)
		}
		if _, err := db.Ingest([]pipeline.Record{{ID: "zz-new", Text: "a new review", Fields: map[string]string{"app": "a"}}}); err != nil {
			t.Fatal(err)
		}
		advance(t, db, "sanitize", jsonOut)
		qs, err := db.Queued("classify", 0, 10)
		if err != nil || len(qs) != 1 {
			t.Fatalf("queued at classify: %d, %v", len(qs), err)
		}
		if err := db.Commit([]pipeline.Transition{{Stage: "classify", ID: "zz-new", Seq: qs[0].Seq, Outcome: pipeline.Succeeded,
			Result: res, CacheKey: key, Cached: true}}); err != nil {
			t.Fatal(err)
		}
		if n := storedLen(t, db, "out/classify", "zz-new"); n != 1+shortRefLen {
			t.Errorf("the new output is %d bytes, want a reference by 8 bytes", n)
		}
		for _, id := range []string{"r000001", "zz-new"} {
			loc, err := db.Locate(id)
			if err != nil || string(loc.Output["classify"]) != string(old.Output["classify"]) {
				t.Errorf("%s: classify output %s, %v; want %s", id, loc.Output["classify"], err, old.Output["classify"])
			}
		}
		if problems, err := db.Check(); err != nil || len(problems) > 0 {
			t.Errorf("verify: %v %v", problems, err)
		}
	})
}
