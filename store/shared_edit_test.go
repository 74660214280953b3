package store

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// canShare compares len(encode()) >= stateLen, but the V1 encoding
// (43 bytes) is longer than V2 (27): it is true for every state, also
// for one whose encoding drops Shared.
func TestState_canShareOnlyWhereSharedIsKept(t *testing.T) {
	s := state{Stage: 0, Status: pipeline.StatusQueued, Seq: 1, Hash: strings.Repeat("z", 32)}
	if s.canShare() {
		t.Errorf("canShare() = true for a hash encode keeps in V1, which has no Shared byte")
	}
}

// A queued item whose state is V1 (a hash this version does not write)
// gets a clean sanitize output: putOutput calls it shared, writes no
// out/ entry, and the V1 state drops the bit: the output is lost.
func TestDB_sharedOutputOddHashKept(t *testing.T) {
	db := openTest(t)
	if _, err := db.Ingest(mixedRecs()[:2]); err != nil {
		t.Fatal(err)
	}
	odd := strings.Repeat("z", 32)
	if err := db.update(func(tx *bolt.Tx) error {
		w := db.writer(tx)
		for _, id := range []string{"c0", "c1"} {
			s, _ := w.state([]byte(id))
			s.Hash = odd
			if err := w.stateB.Put([]byte(id), s.encode()); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := sanitizeAll(t, db)
	for _, id := range []string{"c0", "c1"} {
		loc, err := db.Locate(id)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(loc.Output["sanitize"], want[id]) {
			t.Errorf("%s: sanitize output %q, want %q", id, loc.Output["sanitize"], want[id])
		}
	}
}

// An edit of a field only a later stage reads (the text unchanged)
// moves the item's shared sanitize output into out/sanitize: unshare
// runs even when old == text.
func TestDB_sharedOutputFieldEditKeepsShared(t *testing.T) {
	defs := []StageDef{{Name: "sanitize", Reads: []string{pipeline.TextField}}, {Name: "classify", Reads: []string{pipeline.TextField}}, {Name: "aggregate", Reads: []string{"app"}}}
	db, err := Open(filepath.Join(t.TempDir(), "st.db"), Options{Stages: defs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Ingest(mixedRecs()); err != nil {
		t.Fatal(err)
	}
	sanitizeAll(t, db)
	advance(t, db, "classify", jsonOut)
	before := bucketKeys(t, db, "out/sanitize")
	r := mixedRecs()[:1]
	r[0].Fields = map[string]string{"app": "b"}
	if st, err := db.Ingest(r); err != nil || st.Changed != 1 {
		t.Fatalf("%+v %v", st, err)
	}
	if after := bucketKeys(t, db, "out/sanitize"); after != before {
		t.Errorf("out/sanitize holds %d entries after a field-only edit, %d before: the text did not change", after, before)
	}
}

// TestDB_sharedOutputsFormat2 and TestCompact_format2 make their
// "format 2" file with db.format = 2, but the packer writes pRunes
// whatever the format: the file's records are format 3 records a
// format 2 sawtooth cannot read, so the tests do not exercise a real
// format 2 file.
