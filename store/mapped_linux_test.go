package store

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// residentKB is the resident part of this process's mappings of path,
// in kB, from /proc/self/smaps.
func residentKB(path string) (int, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	kb, in := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		switch {
		case len(fs) >= 5 && strings.Contains(fs[0], "-") && !strings.HasSuffix(fs[0], ":"):
			in = len(fs) >= 6 && fs[5] == path // a mapping's header line
		case in && len(fs) >= 2 && fs[0] == "Rss:":
			n, _ := strconv.Atoi(fs[1])
			kb += n
		}
	}
	return kb, sc.Err()
}

// mappedKB is residentKB for a test, which it skips where there is no
// /proc/self/smaps.
func mappedKB(t testing.TB, path string) int {
	t.Helper()
	kb, err := residentKB(path)
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	return kb
}

// TestDB_WritesReleaseMappedPages: the pages of the file's mapping that
// the opening checks, a read and the lookups of a write touched are not
// resident once the open or the write returns, so a night on a large
// file holds no more of it than one transaction reads. Reads alone keep
// theirs (the read is there to show the pages were resident).
func TestDB_WritesReleaseMappedPages(t *testing.T) {
	defer func(every time.Duration) { releaseWritesEvery = every }(releaseWritesEvery)
	releaseWritesEvery = 0 // every write releases
	path := filepath.Join(t.TempDir(), "mapped.db")
	db, err := Open(path, Options{Stages: testStages, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("item-%06d-%s", i, strings.Repeat("x", 40)))
	}
	if _, err := db.Ingest(recs(ids...)); err != nil {
		t.Fatal(err)
	}
	db.Close()

	db, err = Open(path, Options{Stages: testStages, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if kb := mappedKB(t, path); kb != 0 {
		t.Errorf("after a writable open: %d kB of the file resident, want 0", kb)
	}
	steps := []struct {
		name  string
		write func() error
	}{
		{"Ingest", func() error {
			_, err := db.Ingest(recs("new-1", "new-2"))
			return err
		}},
		{"Commit", func() error {
			qs, err := db.Queued("sanitize", 0, 10)
			if err != nil {
				return err
			}
			ts := make([]pipeline.Transition, len(qs))
			for i, q := range qs {
				ts[i] = pipeline.Transition{Stage: "sanitize", ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded,
					Result: pipeline.Result{Output: []byte(`{"text":"clean"}`)}}
			}
			return db.Commit(ts)
		}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if _, err := db.Queued("sanitize", 0, n); err != nil { // reads every queued item
				t.Fatal(err)
			}
			if kb := mappedKB(t, path); kb == 0 {
				t.Fatal("a read of every queued item left nothing resident: the test shows nothing")
			}
			if err := st.write(); err != nil {
				t.Fatal(err)
			}
			if kb := mappedKB(t, path); kb != 0 {
				t.Errorf("after %s: %d kB of the file resident, want 0", st.name, kb)
			}
		})
	}
}

// TestDB_WritesReleaseAtMostEvery: a write soon after the last release
// keeps what it touched (a busy run does not refault its hot pages after
// every commit); the first write once releaseWritesEvery has passed
// releases it.
func TestDB_WritesReleaseAtMostEvery(t *testing.T) {
	defer func(every time.Duration) { releaseWritesEvery = every }(releaseWritesEvery)
	releaseWritesEvery = time.Hour
	db, path := openWithPagesRead(t)
	if _, err := db.Ingest(recs("soon")); err != nil {
		t.Fatal(err)
	}
	if kb := mappedKB(t, path); kb == 0 {
		t.Fatal("a write within releaseWritesEvery of the open released the pages")
	}
	db.released.Store(time.Now().Add(-time.Hour).UnixNano()) // the last release, an hour ago
	if _, err := db.Ingest(recs("later")); err != nil {
		t.Fatal(err)
	}
	if kb := mappedKB(t, path); kb != 0 {
		t.Errorf("after a write an hour after the last release: %d kB resident, want 0", kb)
	}
}

// TestDB_WritesReleaseOverResidentPages: within releaseWritesEvery of the
// last release, a write still releases the mapping's pages once the
// process's resident pages of mapped files are over releaseSharedAbove,
// unless the last release was within releaseWritesSoonest.
func TestDB_WritesReleaseOverResidentPages(t *testing.T) {
	defer func(every time.Duration, above int64) {
		releaseWritesEvery, releaseSharedAbove = every, above
	}(releaseWritesEvery, releaseSharedAbove)
	releaseWritesEvery = time.Hour
	if residentShared() <= 0 {
		t.Skip("no /proc/self/statm")
	}
	cases := []struct {
		name        string
		above       int64
		lastRelease time.Duration // before the write; negative: after it, so the
		// write, however long it takes on a loaded machine, comes within
		// releaseWritesSoonest of it
		wantReleased bool
	}{
		{"over the threshold", 0, time.Second, true},
		{"over it, released just before", 0, -time.Hour, false},
		{"under the threshold", math.MaxInt64, time.Second, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db, path := openWithPagesRead(t)
			if mappedKB(t, path) == 0 {
				t.Fatal("a read of every queued item left nothing resident: the test shows nothing")
			}
			releaseSharedAbove = c.above
			db.released.Store(time.Now().Add(-c.lastRelease).UnixNano())
			if _, err := db.Ingest(recs("one more")); err != nil {
				t.Fatal(err)
			}
			if kb := mappedKB(t, path); (kb == 0) != c.wantReleased {
				t.Errorf("after the write: %d kB of the file resident, want released %v", kb, c.wantReleased)
			}
		})
	}
}

// openWithPagesRead opens a database in the test's directory (closed at
// its end), ingests 2,000 items and reads every one from the sanitize
// queue, so that the mapping holds pages the next write may release.
func openWithPagesRead(t *testing.T) (*DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pages.db")
	db, err := Open(path, Options{Stages: testStages, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var ids []string
	for i := range 2000 {
		ids = append(ids, fmt.Sprintf("item-%06d", i))
	}
	if _, err := db.Ingest(recs(ids...)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Queued("sanitize", 0, len(ids)); err != nil {
		t.Fatal(err)
	}
	return db, path
}
