package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
	bolt "go.etcd.io/bbolt"
)

// TestWordStore: each of the store's typed errors is worded, in place,
// with the command that deals with it on the database given (quoted, a
// URL's password left out, FILE when none was given); the error is still
// the store's for errors.Is and errors.As, and it is worded once.
func TestWordStore(t *testing.T) {
	damaged := pipeline.Damaged("r1", "classify", errors.New("bad json"), "out/classify is damaged")
	tests := []struct {
		name, db string
		err      error
		want     string
		is       error
	}{
		{"damaged record", "/tmp/a b.db", fmt.Errorf("export: %w", damaged),
			"export: item \"r1\": out/classify is damaged: bad json (run `sawtooth verify --db '/tmp/a b.db'`)", damaged},
		{"damaged, a file's name as it is", "/tmp/reviews  copy.db", damaged,
			"item \"r1\": out/classify is damaged: bad json (run `sawtooth verify --db '/tmp/reviews  copy.db'`)", damaged},
		{"damaged, on PostgreSQL", "postgres://u:secret@h/db", damaged,
			"item \"r1\": out/classify is damaged: bad json (run `sawtooth verify --db postgres://u@h/db`)", damaged},
		{"damaged, no --db", "", fmt.Errorf("run: %w: stopping", damaged),
			"run: item \"r1\": out/classify is damaged: bad json (run `sawtooth verify --db FILE`): stopping", damaged},
		{"no batch job", "x.db", fmt.Errorf("collect: %w", &pipeline.NoBatchJobError{Num: 4}),
			"collect: batch job 4: not found (see `sawtooth batch list --db x.db`)", pipeline.ErrNotFound},
		{"two API jobs", "x.db", &pipeline.TwoBatchJobsError{Num: 2, Have: "batches/a", Want: "batches/b"},
			"batch job 2 is already batches/a, not batches/b: two API jobs for one intent (a run collects batches/a; batches/b is not recorded, so the run cancels it at the API: if its log says that cancel failed, cancel it there; `sawtooth batch list --db x.db` shows job 2)", nil},
		{"empty database", "e.db", &pipeline.EmptyDatabaseError{Path: "e.db", Err: store.ErrNotSawtooth},
			"open e.db: not a sawtooth database (it is empty: run `sawtooth run --db e.db --input FILE` first)", store.ErrNotSawtooth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := wordStore(tt.err, tt.db)
			if err.Error() != tt.want {
				t.Errorf("err =\n  %q\nwant\n  %q", err, tt.want)
			}
			if !errors.Is(err, tt.err) || (tt.is != nil && !errors.Is(err, tt.is)) {
				t.Errorf("%v is no longer the store's error", err)
			}
			if again := wordStore(fmt.Errorf("outer: %w", err), "other.db"); again.Error() != "outer: "+tt.want {
				t.Errorf("worded twice: %q", again)
			}
		})
	}
	if other := errors.New("disk full"); wordStore(other, "x.db") != other {
		t.Error("another error was reworded")
	}
	if wordStore(nil, "x.db") != nil {
		t.Error("nil was reworded")
	}
}

// TestDLQRequeue_damagedLetterNamesVerify: re-queueing an item whose dead
// letter is damaged fails and says to run verify on the
// --db given.
func TestDLQRequeue_damagedLetterNamesVerify(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "store", "testdata", "format2.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "my db.db")
	if err := os.WriteFile(path, src, 0o600); err != nil {
		t.Fatal(err)
	}
	putRaw(t, path, "dead/classify", "r000006", []byte("garbage{"))
	err = runApp([]string{"sawtooth", "dlq", "requeue", "--db", path, "--stage", "classify", "--id", "r000006"}, io.Discard, io.Discard)
	want := "item \"r000006\": dead letter at classify is damaged: invalid character 'g' looking for beginning of value (run `sawtooth verify --db '" + path + "'`)"
	var d *pipeline.DamagedError
	if err == nil || err.Error() != want || !errors.As(err, &d) || d.Item != "r000006" || d.Stage != "classify" {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

// putRaw writes value under key in a bbolt database's bucket by hand, as
// a damaged file holds it.
func putRaw(t *testing.T, path, bucket, key string, value []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte(bucket)).Put([]byte(key), value) }); err != nil {
		t.Fatal(err)
	}
}

// TestStatus_emptyDatabaseNamesRun: a bbolt file with nothing in it is
// refused by a command that reads, with the run that fills it on the
// --db given; it is still the store's ErrNotSawtooth.
func TestStatus_emptyDatabaseNamesRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new db.db")
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	bdb.Close()
	err = runApp([]string{"sawtooth", "status", "--db", path}, io.Discard, io.Discard)
	want := "open " + path + ": not a sawtooth database (it is empty: run `sawtooth run --db '" + path + "' --input FILE` first)"
	if err == nil || err.Error() != want || !errors.Is(err, store.ErrNotSawtooth) {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

// TestRun_damagedCachedAnswerLogNamesVerify: a run that finds a cached
// answer damaged asks again, and its warning says to run verify on the
// --db given, as an error would.
func TestRun_damagedCachedAnswerLogNamesVerify(t *testing.T) {
	url := startTestSim(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "cache db.db")
	write := func(name, prefix string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		body := fmt.Sprintf("{\"id\":\"%s1\",\"text\":\"Great app!\"}\n{\"id\":\"%s2\",\"text\":\"Too many ads\"}\n", prefix, prefix)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	run := func(input string) string {
		t.Helper()
		var errOut syncBuffer
		if err := runApp([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--quiet"}, io.Discard, &errOut); err != nil {
			t.Fatalf("run %s: %v\n%s", input, err, errOut.String())
		}
		return errOut.String()
	}
	run(write("a.jsonl", "a"))
	bdb, err := bolt.Open(db, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("answers/classify"))
		if b == nil {
			return errors.New("no answers/classify bucket")
		}
		var keys [][]byte
		b.ForEach(func(k, _ []byte) error { keys = append(keys, append([]byte(nil), k...)); return nil })
		for _, k := range keys {
			if err := b.Put(k, []byte{0xff, 0xff, 0xff}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	bdb.Close()
	logged := run(write("b.jsonl", "b"))
	if !strings.Contains(logged, "answer cache unreadable") || !strings.Contains(logged, "(run `sawtooth verify --db '"+db+"'`)") {
		t.Errorf("logged:\n%s\nwant the damaged answer's warning naming verify on the --db given", logged)
	}
}

// TestPlan_damagedJobDBNamesItsDB: plan -f of a job whose db holds a
// damaged record says to run verify on the job's db, which the command
// line does not name.
func TestPlan_damagedJobDBNamesItsDB(t *testing.T) {
	_, url := jobSim(t)
	dir := filepath.Join(t.TempDir(), "my jobs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := writeFirstLines(filepath.Join(dir, "items.jsonl"), testReviews(t), 20); err != nil {
		t.Fatal(err)
	}
	jobFile := writeJob(t, dir, consentJob, url)
	if err := runApp([]string{"sawtooth", "run", "-f", jobFile, "--quiet"}, io.Discard, io.Discard); err != nil {
		t.Fatalf("run: %v", err)
	}
	db := filepath.Join(dir, "job.db")
	bdb, err := bolt.Open(db, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(func(tx *bolt.Tx) error {
		k, _ := tx.Bucket([]byte("items")).Cursor().First()
		return tx.Bucket([]byte("items")).Put(append([]byte(nil), k...), []byte("garbage"))
	}); err != nil {
		t.Fatal(err)
	}
	bdb.Close()
	err = runApp([]string{"sawtooth", "plan", "-f", jobFile}, io.Discard, io.Discard)
	want := "(run `sawtooth verify --db " + shellQuote(db) + "`)"
	if err == nil || !strings.Contains(err.Error(), want) || !pipeline.IsDamaged(err) {
		t.Fatalf("err = %v, want the damaged record with %q", err, want)
	}
}
