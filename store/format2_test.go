package store

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// fixtureFormat2 was written by sawtooth at 5088069 (record format 2,
// before kept counts and shared outputs): the format 1 fixture upgraded
// by that binary's `sawtooth compact`. format2.golden.json holds what
// that binary read from it: every stage's outputs by item and the counts.
const fixtureFormat2 = "testdata/format2.db"

// TestOpen_format2FixtureRaisedInPlace: a writable open raises a file
// written by a format 2 sawtooth in place; every output reads back as
// that sawtooth read it, the counts are kept and verify finds nothing.
func TestOpen_format2FixtureRaisedInPlace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f2.db")
	copyFile(t, fixtureFormat2, path)
	if got := rawFormat(t, path); got != 2 {
		t.Fatalf("fixture is format %d, want 2", got)
	}
	var want struct {
		Outputs map[string]map[string]string `json:"outputs"`
		Counts  pipeline.Counts              `json:"counts"`
	}
	b, err := os.ReadFile("testdata/format2.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	stages := []StageDef{{Name: "sanitize"}, {Name: "classify"}, {Name: "aggregate"}}
	db, err := Open(path, Options{Stages: stages})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stages {
		got := map[string]string{}
		if err := db.ForEachOutput(s.Name, func(rec pipeline.Record, out json.RawMessage) error {
			got[rec.ID] = string(out)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want.Outputs[s.Name]) {
			t.Errorf("%s: %d outputs, the format 2 sawtooth read %d", s.Name, len(got), len(want.Outputs[s.Name]))
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
	if problems, err := db.Check(); err != nil || len(problems) > 0 {
		t.Errorf("verify: %v %v", problems, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if got := rawFormat(t, path); got != FormatVersion {
		t.Errorf("after a writable open the file is format %d, want %d", got, FormatVersion)
	}
}

func copyFile(t *testing.T, from, to string) {
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
