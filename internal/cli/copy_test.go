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
	"github.com/sawtooth-dev/sawtooth/store/storecopy"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// TestCopy_usage: a mistyped --from or --to is a usage error that names
// the flag typed (not --db) and creates nothing.
func TestCopy_usage(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name     string
		from, to string
		want     string
	}{
		{"no such --from", filepath.Join(dir, "nosuch.db"), filepath.Join(dir, "out.db"), "--from " + filepath.Join(dir, "nosuch.db") + ": no such database"},
		{"--from in a missing directory", filepath.Join(dir, "nodir", "a.db"), filepath.Join(dir, "out.db"), "--from " + filepath.Join(dir, "nodir", "a.db") + ": the directory"},
		{"the same database twice", filepath.Join(dir, "a.db"), filepath.Join(dir, "a.db"), "--from and --to are both"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := runApp([]string{"sawtooth", "copy", "--from", tt.from, "--to", tt.to}, io.Discard, io.Discard)
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want a usage error containing %q", err, tt.want)
			}
			if _, err := os.Stat(tt.to); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("--to %s was created by a refused copy", tt.to)
			}
		})
	}
}

// TestCopy_refusalsNameTheCommands: storecopy refuses with the facts and
// the CLI adds the commands that clear the refusal.
func TestCopy_refusalsNameTheCommands(t *testing.T) {
	dir := t.TempDir()
	from, to := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	db, err := store.Open(from, store.Options{Stages: storetest.Stages})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Ingest([]pipeline.Record{storetest.Record("a", "bug a", "x", "4"), storetest.Record("b", "bug b", "x", "4")}); err != nil {
		t.Fatal(err)
	}
	storetest.Advance(t, db, "sanitize")
	if _, ok, err := db.ReserveBatch("classify", 5, time.Now()); err != nil || !ok {
		t.Fatalf("ReserveBatch: %v, %v", ok, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	err = runApp([]string{"sawtooth", "copy", "--from", from, "--to", to}, io.Discard, io.Discard)
	for _, want := range []string{
		"open batch jobs hold 2 items",
		"`sawtooth run --db " + from + " --mode batch` collects them",
		"`sawtooth batch cancel --db " + from + " N` cancels job N",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("copy with an open batch job: %v, want it to say %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "drop it") {
		t.Errorf("copy to a bbolt file: %v, want no advice to drop a copy it removed itself", err)
	}
	// A copy that stops before its end leaves nothing at --to (nor its
	// unfinished file beside it): a part of the pipeline there read as a
	// consistent database, and a copy again was refused for it.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "a.db" {
			t.Errorf("the refused copy left %s", e.Name())
		}
	}
}

func TestCopyHint(t *testing.T) {
	other := errors.New("disk full")
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"two places", fmt.Errorf("wrapped: %w", &storecopy.TwoPlacesError{Path: "p.db", ID: "i1"}),
			"wrapped: copy: item \"i1\" is in two places in p.db: its state is inconsistent: run `sawtooth verify --db p.db`"},
		{"open batch jobs", &storecopy.OpenBatchJobsError{Path: "p.db", Items: 3},
			"copy from p.db: open batch jobs hold 3 items; let the jobs finish or cancel them, then copy (`sawtooth run --db p.db --mode batch` collects them; `sawtooth batch cancel --db p.db N` cancels job N)"},
		{"anything else", other, "disk full"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := copyHint(tt.err)
			if got.Error() != tt.want || !errors.Is(got, tt.err) {
				t.Errorf("copyHint = %q, want %q wrapping the refusal", got, tt.want)
			}
		})
	}
}

// TestCopy_anotherCopyUnderWay: a copy to a file another copy is still
// writing (its unfinished file beside --to held open) is refused, and
// that copy's file is left alone. The leftover of a killed copy was
// removed unlocked, so the second copy unlinked the first one's file
// and wrote its own at the same name: the first renamed the second's
// half-written file onto --to.
func TestCopy_anotherCopyUnderWay(t *testing.T) {
	dir := t.TempDir()
	from, to := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	db, err := store.Open(from, store.Options{Stages: storetest.Stages})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Ingest([]pipeline.Record{storetest.Record("a", "bug a", "x", "4")}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	copying := filepath.Join(dir, ".b.db.copying")
	live, err := store.Open(copying, store.Options{Stages: storetest.Stages})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	before, err := os.Stat(copying)
	if err != nil {
		t.Fatal(err)
	}
	err = runApp([]string{"sawtooth", "copy", "--from", from, "--to", to}, io.Discard, io.Discard)
	if !errors.Is(err, store.ErrInUse) || !strings.Contains(err.Error(), to) {
		t.Errorf("copy while another copy to %s is under way: %v, want an in-use error naming it", to, err)
	}
	if after, err := os.Stat(copying); err != nil || !os.SameFile(before, after) {
		t.Errorf("the other copy's file %s was removed or replaced (%v)", copying, err)
	}
	if _, err := os.Stat(to); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("--to %s was written while another copy to it was under way", to)
	}
	// That copy killed: what it left is removed and the copy goes on.
	if err := live.Close(); err != nil {
		t.Fatal(err)
	}
	if err := runApp([]string{"sawtooth", "copy", "--from", from, "--to", to}, io.Discard, io.Discard); err != nil {
		t.Fatalf("copy over a killed copy's file: %v", err)
	}
	if _, err := os.Stat(copying); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed copy's file %s is still there", copying)
	}
}

// TestCopy_toOnlyANewPath: --to a symbolic link or an empty file is
// refused and left as it was, as before copies were renamed into place
// (the store refused both): the rename replaced a link the user keeps
// (b.db -> a disk with room) with a file beside it, and an empty file
// with the copy, unasked.
func TestCopy_toOnlyANewPath(t *testing.T) {
	dir := t.TempDir()
	from := filepath.Join(dir, "a.db")
	db, err := store.Open(from, store.Options{Stages: storetest.Stages})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Ingest([]pipeline.Record{storetest.Record("a", "bug a", "x", "4")}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "big"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		setup func(to string) error
		want  string
	}{
		{"a link to a missing file", func(to string) error { return os.Symlink(filepath.Join("big", "b.db"), to) }, "symbolic link"},
		{"an empty file", func(to string) error { return os.WriteFile(to, nil, 0o600) }, "empty"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			to := filepath.Join(dir, fmt.Sprintf("b%d.db", i))
			if err := tt.setup(to); err != nil {
				t.Fatal(err)
			}
			before, err := os.Lstat(to)
			if err != nil {
				t.Fatal(err)
			}
			err = runApp([]string{"sawtooth", "copy", "--from", from, "--to", to}, io.Discard, io.Discard)
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("copy --to %s: %v, want a usage error saying %q", tt.name, err, tt.want)
			}
			if after, err := os.Lstat(to); err != nil || after.Mode() != before.Mode() || after.Size() != before.Size() {
				t.Errorf("--to %s was replaced (%v)", to, err)
			}
			if _, err := os.Stat(filepath.Join(dir, "big", "b.db")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the link's target was written")
			}
		})
	}
}

// onWrite calls fn once, at the first write that contains when.
type onWrite struct {
	when string
	fn   func()
	done bool
}

func (w *onWrite) Write(p []byte) (int, error) {
	if !w.done && strings.Contains(string(p), w.when) {
		w.done = true
		w.fn()
	}
	return len(p), nil
}

// TestCopy_toCreatedMeanwhile: a database created at --to while the copy
// ran (a nightly run started on the new path) is left as it is and the
// copy refused. Opened in place, the copy held --to locked from its
// start; renamed into place, it replaced the run's file under it, and
// everything the run paid for went with it.
func TestCopy_toCreatedMeanwhile(t *testing.T) {
	dir := t.TempDir()
	from, to := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	db, err := store.Open(from, store.Options{Stages: storetest.Stages})
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]pipeline.Record, 10000) // the first progress line
	for i := range recs {
		recs[i] = storetest.Record(fmt.Sprint("r", i), "bug", "x", "4")
	}
	if _, err := db.Ingest(recs); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	var run *store.DB
	var made os.FileInfo
	hook := &onWrite{when: "copied 10000 items", fn: func() {
		if run, err = store.Open(to, store.Options{Stages: storetest.Stages}); err != nil {
			t.Fatal(err)
		}
		if made, err = os.Stat(to); err != nil {
			t.Fatal(err)
		}
	}}
	err = runCopy(from, to, io.Discard, hook)
	if run == nil {
		t.Fatal("the copy printed no progress line")
	}
	defer run.Close()
	if err == nil || !strings.Contains(err.Error(), to) {
		t.Errorf("copy onto a database created meanwhile: %v, want a refusal naming %s", err, to)
	}
	if now, err := os.Stat(to); err != nil || !os.SameFile(made, now) {
		t.Errorf("the database created at %s while copying was replaced (%v)", to, err)
	}
}
