package store

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
	bolt "go.etcd.io/bbolt"
)

// cleanOut is the sanitize stage's output for text (its JSON shape, in
// its field order), for the two changes mixedRecs needs: the store must
// not import the stages.
func cleanOut(t testing.TB, text string) json.RawMessage {
	t.Helper()
	clean := strings.Join(strings.Fields(strings.ReplaceAll(text, "\u200b", "")), " ")
	changes := []string{}
	if strings.Contains(text, "\u200b") {
		changes = append(changes, "format")
	}
	if clean != strings.ReplaceAll(text, "\u200b", "") {
		changes = append(changes, "whitespace")
	}
	b, err := json.Marshal(struct {
		Text          string   `json:"text"`
		Chars         int      `json:"chars"`
		Truncated     bool     `json:"truncated"`
		OriginalChars int      `json:"original_chars"`
		Changes       []string `json:"changes"`
	}{clean, utf8.RuneCountInString(clean), false, utf8.RuneCountInString(text), changes})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sanitizeAll commits the real sanitize output of every item queued at
// sanitize, and returns them by id.
func sanitizeAll(t testing.TB, db *DB) map[string]json.RawMessage {
	t.Helper()
	want := map[string]json.RawMessage{}
	advance(t, db, "sanitize", func(id string) json.RawMessage {
		loc, err := db.Locate(id)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = cleanOut(t, loc.Record.Text)
		return want[id]
	})
	return want
}

// bucketKeys counts the entries of bucket name.
func bucketKeys(t testing.TB, db *DB, name string) int {
	t.Helper()
	n := 0
	_ = db.view(func(tx *bolt.Tx) error {
		n = tx.Bucket([]byte(name)).Stats().KeyN
		return nil
	})
	return n
}

// mixedRecs are clean texts and two that sanitizing changes.
func mixedRecs() []pipeline.Record {
	var out []pipeline.Record
	for i := range 20 {
		out = append(out, pipeline.Record{ID: "c" + strconv.Itoa(i), Text: "a clean review, number " + strconv.Itoa(i),
			Fields: map[string]string{"app": "a"}})
	}
	return append(out,
		pipeline.Record{ID: "d0", Text: "  spaces   around\tand inside ", Fields: map[string]string{"app": "a"}},
		pipeline.Record{ID: "d1", Text: "zero\u200bwidth", Fields: map[string]string{"app": "a"}})
}

// outputsRead collects what every reader returns as the sanitize output.
func outputsRead(t *testing.T, db *DB) map[string]map[string]string {
	t.Helper()
	got := map[string]map[string]string{"Queued": {}, "Locate": {}, "ForEachItem": {}, "ForEachOutput": {}}
	qs, err := db.Queued("classify", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if !bytes.Equal(q.Item.Prev, q.Item.Outputs["sanitize"]) {
			t.Errorf("%s: Prev %s differs from Outputs %s", q.Item.ID, q.Item.Prev, q.Item.Outputs["sanitize"])
		}
		got["Queued"][q.Item.ID] = string(q.Item.Prev)
		loc, err := db.Locate(q.Item.ID)
		if err != nil {
			t.Fatal(err)
		}
		got["Locate"][q.Item.ID] = string(loc.Output["sanitize"])
	}
	if err := db.ForEachItem(func(is pipeline.ItemState) error {
		got["ForEachItem"][is.ID] = string(is.Outputs["sanitize"])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var order []string
	if err := db.ForEachOutput("sanitize", func(r pipeline.Record, out json.RawMessage) error {
		got["ForEachOutput"][r.ID] = string(out)
		order = append(order, r.ID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.IsSorted(order) {
		t.Errorf("ForEachOutput order %v, want id order", order)
	}
	return got
}

// TestDB_sharedOutputs: a sanitize output that changed nothing leaves no
// entry in out/sanitize, only a bit in the item's state, and every
// reader returns it byte for byte; a changed text is stored and read as
// it was given.
func TestDB_sharedOutputs(t *testing.T) {
	db := openTest(t)
	if _, err := db.Ingest(mixedRecs()); err != nil {
		t.Fatal(err)
	}
	want := sanitizeAll(t, db)
	if n := bucketKeys(t, db, "out/sanitize"); n != 2 {
		t.Errorf("out/sanitize holds %d entries, want only the 2 changed texts", n)
	}
	for reader, got := range outputsRead(t, db) {
		if len(got) != len(want) {
			t.Errorf("%s read %d outputs, want %d", reader, len(got), len(want))
		}
		for id, w := range want {
			if got[id] != string(w) {
				t.Errorf("%s %s = %s, want %s", reader, id, got[id], w)
			}
		}
	}
	_ = db.view(func(tx *bolt.Tx) error {
		for _, id := range []string{"c0", "d0"} {
			v := tx.Bucket(bucketState).Get([]byte(id))
			if s, _ := decodeState(v); (s.Shared != 0) != (id == "c0") || len(v) > stateLen+1 {
				t.Errorf("state of %s: %d bytes, shared %b", id, len(v), s.Shared)
			}
		}
		return nil
	})
	if c := counts(t, db); c.Stages[0].Output != 22 {
		t.Errorf("sanitize outputs counted %d, want 22", c.Stages[0].Output)
	}
}

// TestDB_sharedOutputsMove carries the shared bits through the moves an
// item makes, and drops them with the outputs they stand for.
func TestDB_sharedOutputsMove(t *testing.T) {
	cases := []struct {
		name string
		move func(t *testing.T, db *DB)
		// kept says whether c0 still has its sanitize output after move.
		kept bool
	}{
		{"to done", func(t *testing.T, db *DB) {
			advance(t, db, "classify", jsonOut)
			advance(t, db, "aggregate", fact)
		}, true},
		{"dead and requeued", func(t *testing.T, db *DB) {
			commitOne(t, db, "classify", "c0", pipeline.DeadLettered)
			if _, err := db.Requeue("classify", nil); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"batch reserved, answered, returned", func(t *testing.T, db *DB) {
			job := reserve(t, db, 30)
			if _, err := db.CommitBatch(job.Num, []pipeline.Transition{result("c1", pipeline.Succeeded)}); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ReturnBatch(job.Num, "expired", batchNow); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"rerun from classify", func(t *testing.T, db *DB) {
			advance(t, db, "classify", jsonOut)
			if _, err := db.Rerun("classify"); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"rerun from sanitize", func(t *testing.T, db *DB) {
			if _, err := db.Rerun("sanitize"); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"text edited", func(t *testing.T, db *DB) {
			r := mixedRecs()[:1]
			r[0].Text = "an edited review"
			if _, err := db.Ingest(r); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"pruned", func(t *testing.T, db *DB) {
			if _, err := db.Prune(func(id string) bool { return id != "c0" }, false); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			db := openTest(t)
			if _, err := db.Ingest(mixedRecs()); err != nil {
				t.Fatal(err)
			}
			want := sanitizeAll(t, db)
			tc.move(t, db)
			sameAsRecount(t, db)
			var got json.RawMessage
			_ = db.view(func(tx *bolt.Tx) error {
				var err error
				got, err = db.output(tx, "sanitize", []byte("c0"), db.textOf(tx, []byte("c0")))
				if err != nil {
					t.Error(err)
				}
				return nil
			})
			if tc.kept && string(got) != string(want["c0"]) {
				t.Errorf("c0's sanitize output %s, want %s", got, want["c0"])
			}
			if !tc.kept && got != nil {
				t.Errorf("c0's sanitize output %s, want none", got)
			}
			// openTest's cleanup runs Check on what the move left.
		})
	}
}

// TestDB_sharedOutputUnshared: an edit that no stage reads keeps the
// outputs, and a shared one still reads as the stage gave it, from the
// old text.
func TestDB_sharedOutputUnshared(t *testing.T) {
	defs := []StageDef{{Name: "sanitize", Reads: []string{"app"}}, {Name: "classify", Reads: []string{"app"}}, {Name: "aggregate", Reads: []string{"app"}}}
	db, err := Open(filepath.Join(t.TempDir(), "st.db"), Options{Stages: defs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Ingest(mixedRecs()); err != nil {
		t.Fatal(err)
	}
	want := sanitizeAll(t, db)
	r := mixedRecs()[:1]
	r[0].Text = "an edited review that nothing reads"
	if st, err := db.Ingest(r); err != nil || st.Updated != 1 {
		t.Fatalf("%+v %v", st, err)
	}
	loc, err := db.Locate("c0")
	if err != nil {
		t.Fatal(err)
	}
	if string(loc.Output["sanitize"]) != string(want["c0"]) || loc.Record.Text != r[0].Text {
		t.Errorf("after the edit: text %q, sanitize output %s, want %s", loc.Record.Text, loc.Output["sanitize"], want["c0"])
	}
	if p, err := db.Check(); err != nil || len(p) > 0 {
		t.Errorf("Check: %v %v", p, err)
	}
}

// TestDB_sharedOutputsFormat2: a format 2 file (outputs of clean texts
// stored in out/sanitize) is raised to format 3 in place by a writable
// open, reads its stored outputs as before, and shares new ones.
func TestDB_sharedOutputsFormat2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "st.db")
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	db.format = 2 // writes as today's main does
	if _, err := db.Ingest(mixedRecs()[:10]); err != nil {
		t.Fatal(err)
	}
	want := sanitizeAll(t, db)
	if err := db.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyFormat, []byte("2")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	ro := mustOpen(t, path, true)
	if n := bucketKeys(t, ro, "out/sanitize"); n != 10 {
		t.Fatalf("the format 2 file holds %d sanitize outputs, want 10", n)
	}
	ro.Close()

	db = mustOpen(t, path, false)
	if db.format != FormatVersion {
		t.Errorf("format %d after a writable open, want %d", db.format, FormatVersion)
	}
	if _, err := db.Ingest(mixedRecs()[10:]); err != nil {
		t.Fatal(err)
	}
	for id, o := range sanitizeAll(t, db) {
		want[id] = o
	}
	if n := bucketKeys(t, db, "out/sanitize"); n != 12 {
		t.Errorf("out/sanitize holds %d entries, want the 10 old ones and the 2 changed texts", n)
	}
	got := outputsRead(t, db)["ForEachOutput"]
	for id, w := range want {
		if got[id] != string(w) {
			t.Errorf("%s = %s, want %s", id, got[id], w)
		}
	}
	if p, err := db.Check(); err != nil || len(p) > 0 {
		t.Errorf("Check: %v %v", p, err)
	}
}

func mustOpen(t *testing.T, path string, readOnly bool) *DB {
	t.Helper()
	db, err := Open(path, Options{Stages: testStages, ReadOnly: readOnly})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestTextOnly(t *testing.T) {
	db := openTest(t)
	text := "a review of some length"
	cases := []struct {
		name string
		json string
		want bool
	}{
		{"clean sanitize output", `{"text":"a review of some length","chars":23,"truncated":false,"original_chars":23,"changes":[]}`, true},
		{"changed text", `{"text":"a review","chars":8,"truncated":true,"original_chars":23,"changes":["truncate"]}`, false},
		{"no text", `{"label":"bug","chars":23}`, false},
		{"the id", `{"text":"a review of some length","id":"x1"}`, false},
		{"another number", `{"text":"a review of some length","n":7}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var v []byte
			_ = db.update(func(tx *bolt.Tx) error {
				var err error
				v, err = db.encodeRecord(tx, []byte(tc.json), packCtx{id: "x1", text: func() string { return text }})
				return err
			})
			if got := textOnly(v); got != tc.want {
				t.Errorf("textOnly(%x) = %v, want %v", v, got, tc.want)
			}
		})
	}
}

func TestState_sharedRoundTrip(t *testing.T) {
	s := state{Stage: 2, Status: pipeline.StatusQueued, Seq: 9, Hash: "00112233445566778899aabbccddeeff", Shared: 0b11}
	got, ok := decodeState(s.encode())
	if !ok || got != s || len(s.encode()) != stateLen+1 {
		t.Errorf("round trip %+v (%v), want %+v", got, ok, s)
	}
	s.Shared = 0
	if len(s.encode()) != stateLen {
		t.Errorf("a state without shared bits takes %d bytes, want %d", len(s.encode()), stateLen)
	}
}

// TestCompact_format2 compacts a format 2 file: a copy, not a migration
// (its records are format 3 records), marked format 3.
func TestCompact_format2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "st.db")
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	db.format = 2
	if _, err := db.Ingest(mixedRecs()); err != nil {
		t.Fatal(err)
	}
	want := sanitizeAll(t, db)
	if err := db.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keyFormat, []byte("2")) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	st, err := Compact(path, 0)
	if err != nil || !st.Migrated {
		t.Fatalf("compact: %+v %v", st, err)
	}
	ro := mustOpen(t, path, true)
	if ro.format != FormatVersion {
		t.Errorf("format %d after compact, want %d", ro.format, FormatVersion)
	}
	got := outputsRead(t, ro)["ForEachItem"]
	for id, w := range want {
		if got[id] != string(w) {
			t.Errorf("%s = %s, want %s", id, got[id], w)
		}
	}
	if p, err := ro.Check(); err != nil || len(p) > 0 {
		t.Errorf("Check: %v %v", p, err)
	}
}

// TestDB_sharedOutputOfAnInvalidUTF8TextKeptAcrossAFieldEdit: a field
// edit of an item whose text is not valid UTF-8 keeps its text-only
// output shared: the text it reads as (the stored record's, the bad
// byte replaced) did not change, though it differs from the one given.
func TestDB_sharedOutputOfAnInvalidUTF8TextKeptAcrossAFieldEdit(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "utf8.db"), Options{Stages: storetest.Stages})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Ingest([]pipeline.Record{storetest.Record("u1", "bad \xff byte", "x", "4")}); err != nil {
		t.Fatal(err)
	}
	want := sanitizeAll(t, db)
	shared := func() uint8 {
		var s state
		_ = db.view(func(tx *bolt.Tx) error {
			s, _ = decodeState(tx.Bucket(bucketState).Get([]byte("u1")))
			return nil
		})
		return s.Shared
	}
	if shared() == 0 || bucketKeys(t, db, "out/sanitize") != 0 {
		t.Fatalf("before the edit: shared %b, out/sanitize %d entries; want the output shared", shared(), bucketKeys(t, db, "out/sanitize"))
	}
	if _, err := db.Ingest([]pipeline.Record{storetest.Record("u1", "bad \xff byte", "x", "5")}); err != nil {
		t.Fatal(err)
	}
	if shared() == 0 || bucketKeys(t, db, "out/sanitize") != 0 {
		t.Errorf("after a rating edit: shared %b, out/sanitize %d entries; want the output still shared", shared(), bucketKeys(t, db, "out/sanitize"))
	}
	if loc, err := db.Locate("u1"); err != nil || string(loc.Output["sanitize"]) != string(want["u1"]) {
		t.Errorf("sanitize output after the edit = %s, %v; want %s", loc.Output["sanitize"], err, want["u1"])
	}
	if problems, err := db.Check(); err != nil || len(problems) > 0 {
		t.Errorf("check: %v %v", err, problems)
	}
}
