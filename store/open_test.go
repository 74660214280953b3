package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// TestOpen_NotADatabase: only a path that does not exist gets a new
// database; anything else that is not a bbolt file is refused with a
// message saying what it is, and left as it was.
func TestOpen_NotADatabase(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.db")
	os.WriteFile(empty, nil, 0o600)
	text := filepath.Join(dir, "notes.txt")
	os.WriteFile(text, []byte(strings.Repeat("id,text\n1,hello\n", 600)), 0o600)
	sub := filepath.Join(dir, "adir")
	os.Mkdir(sub, 0o700)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling.db")
	os.Symlink(filepath.Join(dir, "missing", "x.db"), dangling)

	tests := []struct {
		name, path string
		want       string // the message that says what the path is
	}{
		{"zero-length file", empty, "the file is empty (0 bytes)"},
		{"foreign file", text, "it is not a bbolt database"},
		{"directory", sub, "it is a directory"},
		{"FIFO", fifo, "it is not a regular file"},
		{"dangling symlink", dangling, "symlink to a missing file"},
	}
	for _, tc := range tests {
		for _, mode := range []struct {
			name string
			opt  Options
		}{
			{"create", Options{}},
			{"must exist", Options{MustExist: true}},
			{"read-only", Options{ReadOnly: true}},
		} {
			t.Run(tc.name+"/"+mode.name, func(t *testing.T) {
				var before []byte
				if fi, err := os.Stat(tc.path); err == nil && fi.Mode().IsRegular() {
					before, _ = os.ReadFile(tc.path) // not a FIFO: reading would block
				}
				opt := mode.opt
				opt.Stages, opt.LockTimeout = testStages, 100*time.Millisecond
				db, err := Open(tc.path, opt)
				if err == nil {
					db.Close()
					t.Fatal("Open succeeded")
				}
				if !errors.Is(err, ErrNotDatabase) || errors.Is(err, ErrCorrupt) {
					t.Fatalf("err = %v, want ErrNotDatabase (and not ErrCorrupt)", err)
				}
				if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) || strings.Contains(err.Error(), "backup") {
					t.Fatalf("err = %q, want it to name %s and say %q, without a backup hint", err, tc.path, tc.want)
				}
				if before != nil {
					if after, _ := os.ReadFile(tc.path); !bytes.Equal(before, after) {
						t.Fatal("the file was changed")
					}
				}
				if _, err := os.Lstat(tc.path + ".pid"); err == nil {
					t.Fatal("a pid file was created")
				}
			})
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "missing")); err == nil {
		t.Error("the dangling symlink's target directory was created")
	}
}

// writeRaw overwrites bytes of a closed DB file.
func writeRaw(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// rewriteMeta sets the uint64 at off within both meta pages' meta and
// fixes their checksums, as a bug or a bit flip before the checksum was
// computed would leave them.
func rewriteMeta(t *testing.T, path string, off int, v uint64) {
	t.Helper()
	for _, page := range []int64{0, 4096} {
		buf := make([]byte, metaLen)
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		f.ReadAt(buf, page)
		f.Close()
		binary.NativeEndian.PutUint64(buf[metaOffset+off:], v)
		h := fnv.New64a()
		h.Write(buf[metaSumStart:metaSumEnd])
		binary.NativeEndian.PutUint64(buf[metaSumEnd:], h.Sum64())
		writeRaw(t, path, page, buf)
	}
}

// bestMeta reads the meta bbolt would use.
func bestMeta(t *testing.T, path string) metaInfo {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m0, _, ok0 := readMeta(f, 0)
	m1, _, ok1 := readMeta(f, 4096)
	if !ok0 || !ok1 {
		t.Fatal("fixture meta pages invalid")
	}
	if m1.txid > m0.txid {
		return m1
	}
	return m0
}

// TestOpen_CheapCheck: the check on open catches damage to the pages
// every open relies on (meta, root, free list) and calls it corrupt, the
// only case that suggests a backup.
func TestOpen_CheapCheck(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, path string, m metaInfo)
		want   string
	}{
		{"both meta checksums", func(t *testing.T, path string, m metaInfo) {
			writeRaw(t, path, metaOffset+12, []byte{0xff, 0xff})
			writeRaw(t, path, 4096+metaOffset+12, []byte{0xff, 0xff})
		}, "both meta pages fail their checks"},
		{"free list page header", func(t *testing.T, path string, m metaInfo) {
			writeRaw(t, path, int64(m.freelist*m.pageSize)+8, []byte{0x02, 0x00})
		}, "free list page"},
		{"free list entry out of range", func(t *testing.T, path string, m metaInfo) {
			writeRaw(t, path, int64(m.freelist*m.pageSize)+10, []byte{1, 0})
			writeRaw(t, path, int64(m.freelist*m.pageSize)+pageHeaderLen, binary.NativeEndian.AppendUint64(nil, m.pgid+10))
		}, "not a free page"},
		{"free list pointer past the last page", func(t *testing.T, path string, m metaInfo) {
			rewriteMeta(t, path, 32, m.pgid+5)
		}, "free list is page"},
		{"root pointer past the last page", func(t *testing.T, path string, m metaInfo) {
			rewriteMeta(t, path, 16, m.pgid+5)
		}, "root bucket is page"},
		{"root page", func(t *testing.T, path string, m metaInfo) {
			writeRaw(t, path, int64(m.root*m.pageSize), make([]byte, pageHeaderLen))
		}, "root bucket"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path, _ := filledDB(t, 300)
			tc.damage(t, path, bestMeta(t, path))
			for _, ro := range []bool{false, true} {
				db, err := Open(path, Options{Stages: testStages, ReadOnly: ro})
				if err == nil {
					db.Close()
				}
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "restore it from a backup") {
					t.Fatalf("read-only %v: err = %v, want ErrCorrupt saying %q", ro, err, tc.want)
				}
			}
		})
	}
}

// TestOpen_ChangesNothing: opening and closing a database, read-only or
// not, leaves its bytes as they were.
func TestOpen_ChangesNothing(t *testing.T) {
	path, _ := filledDB(t, 100)
	before, _ := os.ReadFile(path)
	for _, ro := range []bool{false, true} {
		db, err := Open(path, Options{Stages: testStages, ReadOnly: ro})
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
			t.Fatalf("read-only %v: open and close changed the file", ro)
		}
	}
	if _, err := Open(path, Options{Stages: []StageDef{{Name: "other"}}}); !errors.Is(err, ErrDefinition) {
		t.Fatalf("err = %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("a refused open changed the file")
	}
}

// TestOpen_PidFileNoFollow: a symlink planted at <db>.pid is not
// followed, and a FIFO there does not block.
func TestOpen_PidFileNoFollow(t *testing.T) {
	dir := t.TempDir()
	fifoDB := filepath.Join(dir, "f.db")
	if err := syscall.Mkfifo(fifoDB+".pid", 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := Open(fifoDB, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("precious"), 0o600)
	path := filepath.Join(dir, "x.db")
	if err := os.Symlink(victim, path+".pid"); err != nil {
		t.Fatal(err)
	}
	db, err = Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatalf("the symlink's target was overwritten: %q", b)
	}
}

// TestDB_KilledRun: a run whose process died leaves a "running" record;
// the next open shows it killed, ended at its last sample, with the usage
// its commits recorded.
func TestDB_KilledRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.db")
	start := time.Date(2026, 3, 1, 2, 0, 0, 0, time.UTC)
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	db.Ingest(recs("a", "b"))
	if err := db.SaveRun(pipeline.RunSummary{ID: "r1", Started: start, Status: "running"}); err != nil {
		t.Fatal(err)
	}
	qs, _ := db.Queued("sanitize", 0, 10)
	u := pipeline.Usage{PromptTokens: 40, CandidateTokens: 2, TotalTokens: 42}
	db.Commit([]pipeline.Transition{{Stage: "sanitize", ID: "a", Seq: qs[0].Seq, Outcome: pipeline.Succeeded, Result: pipeline.Result{Output: jsonOut("a")}, Usage: u}})
	db.AppendSamples("r1", []pipeline.Sample{{At: start.Add(90 * time.Second)}})
	db.bolt.Close() // killed: no Close, no final SaveRun

	check := func(ro bool) {
		t.Helper()
		db, err := Open(path, Options{Stages: testStages, ReadOnly: ro})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		runs, err := db.Runs(10)
		if err != nil || len(runs) != 1 {
			t.Fatalf("runs = %+v, %v", runs, err)
		}
		r := runs[0]
		if r.Status != RunKilled || !r.Ended.Equal(start.Add(90*time.Second)) || r.Stages["sanitize"] == nil || r.Stages["sanitize"].Usage != u {
			t.Fatalf("read-only %v: run = %+v (sanitize %+v), want killed, ended at its last sample, with usage %+v", ro, r, r.Stages["sanitize"], u)
		}
	}
	check(true)
	check(false)
	check(true) // rewritten by the writable open
}

// TestDB_OldLayoutUpgrades: a file written before the history and usage
// buckets and the exact rating sums opens, and its float rating sums keep
// working.
func TestDB_OldLayoutUpgrades(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	r := func(v float64) *float64 { return &v }
	db.Ingest(recs("a"))
	advance(t, db, "sanitize", jsonOut)
	advance(t, db, "classify", jsonOut)
	advance(t, db, "aggregate", func(string) json.RawMessage {
		b, _ := json.Marshal(pipeline.Fact{Label: "bug", Groups: map[string]string{"app": "a"}, Rating: r(3)})
		return b
	})
	// Rewrite the rating in the first layout and drop the new buckets.
	err = db.bolt.Update(func(tx *bolt.Tx) error {
		agg := tx.Bucket(bucketAgg)
		agg.Delete(aggKey(aggRating, "bug"))
		v := binary.BigEndian.AppendUint64(nil, 0x4008000000000000) // 3.0
		agg.Put(aggKey(aggRatingFloat, "bug"), binary.BigEndian.AppendUint64(v, 1))
		tx.DeleteBucket(bucketHistory)
		return tx.DeleteBucket(bucketUsage)
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, err = Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if tally, _ := db.Tally(); tally.Ratings["bug"].Mean() != 3 {
		t.Fatalf("old rating sum: %+v", tally.Ratings)
	}
	if n, err := db.Rerun("aggregate"); err != nil || n != 1 {
		t.Fatalf("rerun: %d %v", n, err)
	}
	if problems, err := db.Check(); err != nil || len(problems) > 0 {
		t.Fatalf("check: %v %v", err, problems)
	}
}
