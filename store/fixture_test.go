package store

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// The fixtures below are files an older sawtooth wrote, each with what
// that binary read from it (testdata/formatN.golden.json: every stage's
// outputs by item and the counts). A format 1 file is rewritten on
// upgrade (format_test.go); formats 2 to 6 are valid files of
// FormatVersion, raised in place by a writable open or a compact.
const (
	// fixtureFormat2 was written by sawtooth at 5088069 (record format
	// 2, before kept counts and shared outputs): the format 1 fixture
	// upgraded by that binary's `sawtooth compact`.
	fixtureFormat2 = "testdata/format2.db"
	// fixtureFormat3 was written by sawtooth at 2053787 (record format
	// 3, before edits of the text): `sawtooth run` of 156 generated
	// reviews, eight of them long ones in paragraphs, against `sawtooth
	// sim`, then `sawtooth compact`.
	fixtureFormat3 = "testdata/format3.db"
	// fixtureFormat4 was written by sawtooth at f555bb7 (record format 4,
	// long records deflated in items): `sawtooth run` of the 156 reviews
	// of fixtureFormat3's input, the five long ones replaced by pieces of
	// README.md, against `sawtooth sim`, then `sawtooth compact`.
	fixtureFormat4 = "testdata/format4.db"
	// fixtureFormat5 was written by sawtooth at 557931b (record format 5,
	// outputs referring to their answers by 16 bytes of the key):
	// `sawtooth run` of 156 reviews (reviewgen seed 7, its one long review
	// replaced by a piece of README.md) against `sawtooth sim`, then
	// `sawtooth compact`.
	fixtureFormat5 = "testdata/format5.db"
	// fixtureFormat6 was written by sawtooth at 2dca57f (record format 6,
	// answers keeping their usage beside their output): `sawtooth run` of
	// 156 reviews (reviewgen seed 11, r000016 replaced by 6,000 bytes of
	// README.md) against `sawtooth sim`, then `sawtooth compact`. Its
	// golden holds the cached answers too.
	fixtureFormat6 = "testdata/format6.db"
)

var fixtureStages = []StageDef{{Name: "sanitize"}, {Name: "classify"}, {Name: "aggregate"}}

type fixtureGolden struct {
	Outputs map[string]map[string]string `json:"outputs"`
	Counts  pipeline.Counts              `json:"counts"`
	// Answers is each stage's cached answers by key, in goldens written
	// since format 6.
	Answers map[string]map[string]goldenAnswer `json:"answers"`
}

type goldenAnswer struct {
	Output string         `json:"output"`
	Usage  pipeline.Usage `json:"usage"`
}

// A file an older sawtooth wrote (formats 2 to 6) reads as that sawtooth
// read it: read-only as it is, and after a writable open or a compact
// raised to FormatVersion with no record rewritten, the records it holds
// kept in their old form (kept); the database that raised it reads it
// so too, records written afterwards take the new form beside them
// (beside), and verify finds nothing.
func TestOpen_fixtures(t *testing.T) {
	for _, fx := range []struct {
		path   string
		golden string
		format int
		// kept checks, on the file read-only after each raise, that the
		// fixture's records were not rewritten.
		kept func(t *testing.T, ro *DB)
		// beside writes into the writable db what the newer formats
		// store differently and checks it reads back; want is the
		// golden, to update with what it adds.
		beside func(t *testing.T, db *DB, want fixtureGolden)
	}{
		{fixtureFormat2, "testdata/format2.golden.json", 2, nil, newEditBesideOldRecords},
		{fixtureFormat3, "testdata/format3.golden.json", 3, nil, newEditBesideOldRecords},
		{fixtureFormat4, "testdata/format4.golden.json", 4, func(t *testing.T, ro *DB) {
			if _, longs := itemValue(t, ro, "r000131"); longs != 0 {
				t.Errorf("the longs bucket holds %d chunks, want none: no record is rewritten", longs)
			}
		}, newLongRecordsBesideOldOnes},
		{fixtureFormat5, "testdata/format5.golden.json", 5, func(t *testing.T, ro *DB) {
			if n := storedLen(t, ro, "out/classify", "r000001"); n != 1+answerRefLen {
				t.Errorf("r000001's output is %d bytes, want the fixture's reference by 16 bytes", n)
			}
		}, newReferencesBesideOldOnes},
		{fixtureFormat6, "testdata/format6.golden.json", 6, func(t *testing.T, ro *DB) {
			if n := answersTagged(t, ro, "classify")[tagCached]; n != 148 {
				t.Errorf("%d answers keep their usage beside the output, want the fixture's 148: no record is rewritten", n)
			}
		}, newAnswersBesideOldOnes},
	} {
		t.Run(filepath.Base(fx.path), func(t *testing.T) {
			fixture := func(t *testing.T) string {
				t.Helper()
				path := filepath.Join(t.TempDir(), filepath.Base(fx.path))
				copyFile(t, fx.path, path)
				if got := rawFormat(t, path); got != fx.format {
					t.Fatalf("fixture is format %d, want %d", got, fx.format)
				}
				return path
			}
			for _, tc := range []struct {
				name   string
				raise  func(t *testing.T, path string)
				format int
			}{
				{"read-only", func(*testing.T, string) {}, fx.format},
				{"writable open", func(t *testing.T, path string) {
					if err := openFixture(t, path, false).Close(); err != nil {
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
					path := fixture(t)
					tc.raise(t, path)
					if got := rawFormat(t, path); got != tc.format {
						t.Errorf("file is format %d, want %d", got, tc.format)
					}
					ro := openFixture(t, path, true)
					assertReadsAs(t, ro, readGolden(t, fx.golden))
					if fx.kept != nil {
						fx.kept(t, ro)
					}
					if problems, err := ro.Check(); err != nil || len(problems) > 0 {
						t.Errorf("verify: %v %v", problems, err)
					}
				})
			}
			t.Run("new records beside old ones", func(t *testing.T) {
				db := openFixture(t, fixture(t), false)
				want := readGolden(t, fx.golden)
				assertReadsAs(t, db, want)
				fx.beside(t, db, want)
				if problems, err := db.Check(); err != nil || len(problems) > 0 {
					t.Errorf("verify: %v %v", problems, err)
				}
			})
		})
	}
}

// openFixture opens path with fixtureStages, closed when the test ends.
func openFixture(t *testing.T, path string, readOnly bool) *DB {
	t.Helper()
	db, err := Open(path, Options{Stages: fixtureStages, ReadOnly: readOnly})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// newEditBesideOldRecords: an item sanitized in a raised format 2 or 3
// file is stored as an edit of its text (editFormat).
func newEditBesideOldRecords(t *testing.T, db *DB, want fixtureGolden) {
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
}

// newLongRecordsBesideOldOnes: a long item ingested or edited in a
// raised format 4 file is kept in chunks (longFormat) beside the
// fixture's deflated records.
func newLongRecordsBesideOldOnes(t *testing.T, db *DB, _ fixtureGolden) {
	old, err := db.Locate("r000131")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := itemValue(t, db, "r000131"); v[0] != tagFlate {
		t.Fatalf("fixture's r000131 is stored with tag %d, want a deflated record in items", v[0])
	}
	edited := old.Record
	edited.Fields = map[string]string{"app": "edited-app"}
	for k, v := range old.Record.Fields {
		if k != "app" {
			edited.Fields[k] = v
		}
	}
	added := pipeline.Record{ID: "zz-new-long", Text: proseOf(4, 8000), Fields: map[string]string{"app": "a"}}
	if _, err := db.Ingest([]pipeline.Record{edited, added}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []pipeline.Record{edited, added} {
		if v, _ := itemValue(t, db, r.ID); v[0] != tagLong {
			t.Errorf("%s is stored with tag %d, want in chunks", r.ID, v[0])
		}
		loc, err := db.Locate(r.ID)
		if err != nil || loc.Record.Text != r.Text || loc.Record.Fields["app"] != r.Fields["app"] {
			t.Errorf("%s read back %d bytes, app %q, %v", r.ID, len(loc.Record.Text), loc.Record.Fields["app"], err)
		}
	}
}

// newReferencesBesideOldOnes: in a raised format 5 file, an output
// committed as a cached answer refers to it by 8 bytes (shortRefFormat)
// while the fixture's outputs keep their 16-byte references.
func newReferencesBesideOldOnes(t *testing.T, db *DB, _ fixtureGolden) {
	// The new item asks the question r000001 asked: its output is that
	// cached answer.
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
	qs := queuedAtClassify(t, db, pipeline.Record{ID: "zz-new", Text: "a new review", Fields: map[string]string{"app": "a"}})
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
}

// newAnswersBesideOldOnes: in a raised format 6 file, an answer whose
// output carries its usage keeps it once (usageInFormat) while the
// fixture's answers keep theirs beside the output.
func newAnswersBesideOldOnes(t *testing.T, db *DB, want fixtureGolden) {
	// The new item's answer is one of the fixture's with new figures.
	var old goldenAnswer
	for _, a := range want.Answers["classify"] {
		old = a
		break
	}
	usage := pipeline.Usage{PromptTokens: 1234, CandidateTokens: 56, TotalTokens: 1290}
	var out map[string]any
	if err := json.Unmarshal([]byte(old.Output), &out); err != nil {
		t.Fatal(err)
	}
	out["usage"] = usage
	res := pipeline.Result{Usage: usage}
	res.Output, _ = json.Marshal(out)
	qs := queuedAtClassify(t, db, pipeline.Record{ID: "zz-new", Text: "a new review", Fields: map[string]string{"app": "a"}})
	key := strings.Repeat("e7", 32)
	if err := db.Commit([]pipeline.Transition{{Stage: "classify", ID: "zz-new", Seq: qs[0].Seq, Outcome: pipeline.Succeeded,
		Result: res, CacheKey: key}}); err != nil {
		t.Fatal(err)
	}
	if n := answersTagged(t, db, "classify"); n[tagUsageIn] != 1 || n[tagCached] != len(want.Answers["classify"]) {
		t.Errorf("answers by tag %v, want the new one with its usage in its output beside the fixture's %d", n, len(want.Answers["classify"]))
	}
	got, ok, err := db.CachedAnswer("classify", key)
	if err != nil || !ok || string(got.Output) != string(res.Output) || got.Usage != usage {
		t.Errorf("new answer %s %+v (%v %v), want %s %+v", got.Output, got.Usage, ok, err, res.Output, usage)
	}
	loc, err := db.Locate("zz-new")
	if err != nil || string(loc.Output["classify"]) != string(res.Output) {
		t.Errorf("zz-new: classify output %s, %v; want %s", loc.Output["classify"], err, res.Output)
	}
	want.Answers["classify"][key] = goldenAnswer{string(res.Output), usage}
	for i := range want.Counts.Stages {
		if s := want.Counts.Stages[i].Stage; s == "sanitize" || s == "classify" {
			want.Counts.Stages[i].Output++
		}
		if want.Counts.Stages[i].Stage == "aggregate" {
			want.Counts.Stages[i].Queued++
		}
	}
	want.Counts.Items++
	want.Outputs["sanitize"]["zz-new"] = string(jsonOut("zz-new"))
	want.Outputs["classify"]["zz-new"] = string(res.Output)
	assertReadsAs(t, db, want)
}

// answersTagged counts stage's stored answers by their tag.
func answersTagged(t *testing.T, db *DB, stage string) map[byte]int {
	t.Helper()
	n := map[byte]int{}
	if err := db.view(func(tx *bolt.Tx) error {
		return tx.Bucket(answersBucket(stage)).ForEach(func(_, v []byte) error {
			if len(v) > 0 {
				n[v[0]]++
			}
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	return n
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
	for stage, answers := range want.Answers {
		n := 0
		if err := db.ForEachAnswer(stage, func(key string, r pipeline.Result) error {
			n++
			if w, ok := answers[key]; !ok || string(r.Output) != w.Output || r.Usage != w.Usage {
				t.Errorf("%s answer %s:\n got %s %+v\nwant %s %+v", stage, key, r.Output, r.Usage, w.Output, w.Usage)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if n != len(answers) {
			t.Errorf("%s: %d answers, the golden has %d", stage, n, len(answers))
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

// copyFile copies the file from into the new file to.
func copyFile(t testing.TB, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// rawFormat reads the record format straight from the file's meta.
func rawFormat(t *testing.T, path string) int {
	t.Helper()
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	f := 0
	if err := bdb.View(func(tx *bolt.Tx) error {
		var err error
		f, err = fileFormat(tx.Bucket(bucketMeta))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return f
}
