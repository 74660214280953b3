package store

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// fixtureFormat1 was written by sawtooth at 925bf3a (format 1: JSON
// records, hex cache keys): 220 reviews run twice against the simulator,
// the second time with edited texts, new items and safety blocks, then
// one classify dead letter re-queued. It holds done, dead and queued
// items, dead-letter history, cached answers, two runs.
const fixtureFormat1 = "testdata/format1.db"

// copyFixture copies the format 1 fixture into a temporary directory.
func copyFixture(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "old.db")
	copyFile(t, fixtureFormat1, path)
	return path
}

// format1Snapshot is the fixture's content read straight from its
// buckets as format 1 wrote them, without this package's readers.
type format1Snapshot struct {
	items   map[string]pipeline.Record
	states  map[string]state
	outputs map[string]map[string]string // stage -> id -> JSON
	dead    map[string]map[string]pipeline.DeadLetter
	answers map[string]map[string]cachedAnswer
	history int
	meta    map[string]string
}

func readFormat1(t testing.TB, path string) format1Snapshot {
	t.Helper()
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	s := format1Snapshot{items: map[string]pipeline.Record{}, states: map[string]state{}, outputs: map[string]map[string]string{},
		dead: map[string]map[string]pipeline.DeadLetter{}, answers: map[string]map[string]cachedAnswer{}, meta: map[string]string{}}
	err = bdb.View(func(tx *bolt.Tx) error {
		if f, _ := fileFormat(tx.Bucket(bucketMeta)); f != 1 {
			t.Fatalf("fixture is format %d, want 1", f)
		}
		_ = tx.Bucket(bucketMeta).ForEach(func(k, v []byte) error { s.meta[string(k)] = string(v); return nil })
		_ = tx.Bucket(bucketItems).ForEach(func(k, v []byte) error {
			var r pipeline.Record
			if err := json.Unmarshal(v, &r); err != nil {
				t.Fatalf("fixture item %s: %v", k, err)
			}
			s.items[string(k)] = r
			return nil
		})
		_ = tx.Bucket(bucketState).ForEach(func(k, v []byte) error {
			st, ok := decodeState(v)
			if !ok {
				t.Fatalf("fixture state %s", k)
			}
			s.states[string(k)] = st
			return nil
		})
		for _, st := range testStages {
			s.outputs[st.Name], s.dead[st.Name], s.answers[st.Name] = map[string]string{}, map[string]pipeline.DeadLetter{}, map[string]cachedAnswer{}
			_ = tx.Bucket(outBucket(st.Name)).ForEach(func(k, v []byte) error { s.outputs[st.Name][string(k)] = string(v); return nil })
			_ = tx.Bucket(deadBucket(st.Name)).ForEach(func(k, v []byte) error {
				var dl pipeline.DeadLetter
				if err := json.Unmarshal(v, &dl); err != nil {
					t.Fatalf("fixture dead letter %s: %v", k, err)
				}
				s.dead[st.Name][string(k)] = dl
				return nil
			})
			if b := tx.Bucket(answersBucket(st.Name)); b != nil {
				_ = b.ForEach(func(k, v []byte) error {
					var a cachedAnswer
					if err := json.Unmarshal(v, &a); err != nil {
						t.Fatalf("fixture answer %s: %v", k, err)
					}
					s.answers[st.Name][string(k)] = a
					return nil
				})
			}
		}
		s.history = tx.Bucket(bucketHistory).Stats().KeyN
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkMigrated asserts db holds everything the format 1 snapshot held.
func checkMigrated(t *testing.T, db *DB, want format1Snapshot) {
	t.Helper()
	places := map[string]int{}
	for id, rec := range want.items {
		loc, err := db.Locate(id)
		if err != nil {
			t.Fatalf("Locate(%s): %v", id, err)
		}
		gotRec, _ := json.Marshal(loc.Record)
		wantRec, _ := json.Marshal(rec)
		if !bytes.Equal(gotRec, wantRec) {
			t.Errorf("item %s record = %s, want %s", id, gotRec, wantRec)
		}
		st := want.states[id]
		if loc.Status != st.Status.String() || loc.Stage != testStages[st.Stage].Name {
			t.Errorf("item %s is %s at %s, want %s at %s", id, loc.Status, loc.Stage, st.Status, testStages[st.Stage].Name)
		}
		places[loc.Status]++
		for stage, outs := range want.outputs {
			if w, ok := outs[id]; ok != (loc.Output[stage] != nil) || string(loc.Output[stage]) != w {
				t.Errorf("item %s out/%s = %s, want %s", id, stage, loc.Output[stage], w)
			}
		}
		if st.Status == pipeline.StatusDead {
			dl := want.dead[testStages[st.Stage].Name][id]
			if loc.Dead == nil || loc.Dead.Message != dl.Message || loc.Dead.Attempts != dl.Attempts {
				t.Errorf("item %s dead letter = %+v, want %+v", id, loc.Dead, dl)
			}
		}
	}
	if places["done"] == 0 || places["dead"] == 0 || places["queued"] == 0 {
		t.Errorf("the fixture should hold done, dead and queued items: %v", places)
	}
	n := 0
	for stage, answers := range want.answers {
		for key, a := range answers {
			n++
			res, ok, err := db.CachedAnswer(stage, key)
			if err != nil || !ok || string(res.Output) != string(a.Output) || res.Usage != a.Usage {
				t.Errorf("CachedAnswer(%s, %s) = %s %+v %v %v, want %s %+v", stage, key, res.Output, res.Usage, ok, err, a.Output, a.Usage)
			}
		}
	}
	if n == 0 {
		t.Error("the fixture holds no cached answer")
	}
	hist := 0
	for id := range want.items {
		h, err := db.DeadHistory(id)
		if err != nil {
			t.Fatal(err)
		}
		hist += len(h)
	}
	if hist != want.history || hist == 0 {
		t.Errorf("%d dead-letter history entries, want %d (and some)", hist, want.history)
	}
	if p, err := db.Check(); err != nil || len(p) > 0 {
		t.Errorf("Check after the migration: %v %v", p, err)
	}
}

func TestOpen_migratesFormat1(t *testing.T) {
	path := copyFixture(t)
	want := readFormat1(t, path)

	ro, err := Open(path, Options{Stages: testStages, ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open of a format 1 file: %v", err)
	}
	t.Run("read-only reads format 1", func(t *testing.T) { checkMigrated(t, ro, want) })
	ro.Close()

	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	t.Run("migrated", func(t *testing.T) { checkMigrated(t, db, want) })
	t.Run("format 2 records", func(t *testing.T) {
		_ = db.bolt.View(func(tx *bolt.Tx) error {
			if f, _ := fileFormat(tx.Bucket(bucketMeta)); f != FormatVersion {
				t.Errorf("format %d after the migration", f)
			}
			refs := 0
			for _, b := range []string{"items", "out/sanitize", "out/classify", "out/aggregate", "answers/classify"} {
				_ = tx.Bucket([]byte(b)).ForEach(func(k, v []byte) error {
					if isLegacyJSON(v) {
						t.Errorf("%s %q is still format 1", b, k)
					}
					if v[0] == tagAnswer {
						refs++
					}
					return nil
				})
			}
			_ = tx.Bucket(bucketState).ForEach(func(k, v []byte) error {
				if len(v) != stateLen {
					t.Errorf("state %q is still format 1", k)
				}
				return nil
			})
			if refs == 0 {
				t.Error("no output refers to its cached answer")
			}
			return nil
		})
	})
	t.Run("runs on", func(t *testing.T) {
		// The re-queued item goes through and a new item joins.
		if _, err := db.Ingest([]pipeline.Record{{ID: "new", Text: "fresh text", Fields: map[string]string{"app": "a"}}}); err != nil {
			t.Fatal(err)
		}
		for _, st := range testStages {
			advance(t, db, st.Name, func(string) json.RawMessage { return fact("bug") })
		}
		if p, err := db.Check(); err != nil || len(p) > 0 {
			t.Errorf("Check: %v %v", p, err)
		}
	})
}

// TestOpen_migrationKilled kills a real process (this test binary) with
// SIGKILL in the middle of the upgrade a writable open does, after the
// upgraded copy is written and before it replaces the file: the file
// must still be the intact format 1 file, and the next open upgrades it.
func TestOpen_migrationKilled(t *testing.T) {
	path := copyFixture(t)
	want := readFormat1(t, path)
	killInHook(t, "^TestHelperMigrate$", path)
	if _, err := os.Stat(path + ".compact"); err != nil {
		t.Fatalf("the kill came before the upgraded copy was written: %v", err)
	}
	if got := readFormat1(t, path); len(got.items) != len(want.items) {
		t.Fatalf("after the kill the file holds %d items, want %d", len(got.items), len(want.items))
	}
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatalf("open after a kill mid-migration: %v", err)
	}
	defer db.Close()
	checkMigrated(t, db, want)
}

// killInHook runs the helper test named by run in a child process of
// this test binary on path, waits until the child says it is inside its
// hook, and kills it with SIGKILL.
func killInHook(t *testing.T, run, path string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+run)
	cmd.Env = append(os.Environ(), "SAWTOOTH_HELPER_DB="+path)
	stdin, err := cmd.StdinPipe() // never written: the child blocks reading it
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	ready := false
	for !ready && sc.Scan() {
		ready = sc.Text() == helperReady
	}
	if !ready {
		_ = cmd.Wait()
		t.Fatalf("the child ended before its hook:\n%s", stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// helperReady is what a helper child prints when its hook is reached.
const helperReady = "HOOK-REACHED"

// blockInHook tells the parent the hook is reached and waits to be killed.
func blockInHook() {
	fmt.Println(helperReady)
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(3) // not killed: the parent reports it
}

// TestHelperMigrate is the child of TestOpen_migrationKilled: it opens
// the file for writing, and the hook stops it inside the migration.
func TestHelperMigrate(t *testing.T) {
	path := os.Getenv("SAWTOOTH_HELPER_DB")
	if path == "" {
		t.Skip("a helper process of TestOpen_migrationKilled")
	}
	compactHook = blockInHook
	_, _ = Open(path, Options{Stages: testStages})
}
