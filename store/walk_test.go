package store

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// TestDB_WalkReleasesAndStaysOneSnapshot walks a file that another
// goroutine commits to meanwhile, releasing the mapping's pages after
// every item: each item present when the walk began is seen exactly
// once, in id order, with its own text and output (read back through
// the released pages), none that came later, and the pages were released
// as the walk went.
func TestDB_WalkReleasesAndStaysOneSnapshot(t *testing.T) {
	const n = 1500
	walks := []struct {
		name string
		walk func(db *DB, fn func(id, text string, out json.RawMessage)) error
	}{
		{"ForEachItem", func(db *DB, fn func(string, string, json.RawMessage)) error {
			return db.ForEachItem(func(it pipeline.ItemState) error {
				fn(it.ID, it.Text, it.Outputs["sanitize"])
				return nil
			})
		}},
		{"ForEachOutput", func(db *DB, fn func(string, string, json.RawMessage)) error {
			return db.ForEachOutput("sanitize", func(r pipeline.Record, out json.RawMessage) error {
				fn(r.ID, r.Text, out)
				return nil
			})
		}},
		{"ForEachDone", func(db *DB, fn func(string, string, json.RawMessage)) error {
			return db.ForEachDone(func(it pipeline.Item) error {
				fn(it.ID, it.Text, it.Outputs["sanitize"])
				return nil
			})
		}},
	}
	for _, tc := range walks {
		t.Run(tc.name, func(t *testing.T) {
			db := openTest(t)
			var ids []string
			for i := range n {
				ids = append(ids, fmt.Sprintf("i%05d", i))
			}
			if _, err := db.Ingest(recs(ids...)); err != nil {
				t.Fatal(err)
			}
			out := func(id string) json.RawMessage {
				return json.RawMessage(fmt.Sprintf(`{"text":"clean %s","label":"bug","n":%d}`, id, len(id)))
			}
			for _, s := range []string{"sanitize", "classify"} {
				advance(t, db, s, out)
			}
			advance(t, db, "aggregate", func(string) json.RawMessage { return fact("bug") })

			var released atomic.Int64
			defer func(every int, rel func(addr, n uintptr)) { releaseEvery, release = every, rel }(releaseEvery, release)
			releaseEvery = 1
			release = func(addr, n uintptr) {
				released.Add(1)
				releasePages(addr, n)
			}

			start := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // a run ingesting and sanitizing new items meanwhile
				defer wg.Done()
				<-start
				for b := range 5 {
					var more []string
					for i := range 200 {
						more = append(more, fmt.Sprintf("n%d-%03d", b, i))
					}
					if _, err := db.Ingest(recs(more...)); err != nil {
						t.Error(err)
						return
					}
					advance(t, db, "sanitize", out)
				}
			}()
			seen := map[string]int{}
			var order []string
			err := tc.walk(db, func(id, text string, o json.RawMessage) {
				if len(order) == n/3 {
					close(start)
				}
				seen[id]++
				order = append(order, id)
				if text != "text of "+id {
					t.Errorf("item %s: text %q", id, text)
				}
				if want := out(id); string(o) != string(want) {
					t.Errorf("item %s: output %s, want %s", id, o, want)
				}
			})
			if len(order) <= n/3 {
				close(start)
			}
			wg.Wait()
			if err != nil {
				t.Fatal(err)
			}
			if len(order) != n {
				t.Fatalf("walked %d items, want the %d there when it began", len(order), n)
			}
			for i, id := range order {
				if id != ids[i] || seen[id] != 1 {
					t.Fatalf("item %d is %s (seen %d times), want %s once", i, id, seen[id], ids[i])
				}
			}
			if got := released.Load(); got < n {
				t.Errorf("pages released %d times over %d items, want at least once per item", got, n)
			}
		})
	}
}

// TestDB_CheckReleases: verify's full check releases the pages it read
// (bbolt's page check included) and still finds the file sound.
func TestDB_CheckReleases(t *testing.T) {
	db := openTest(t)
	if _, err := db.Ingest(recs("a", "b", "c")); err != nil {
		t.Fatal(err)
	}
	advance(t, db, "sanitize", jsonOut)
	var released atomic.Int64
	defer func(every int, rel func(addr, n uintptr)) { releaseEvery, release = every, rel }(releaseEvery, release)
	releaseEvery = 1
	release = func(addr, n uintptr) {
		released.Add(1)
		releasePages(addr, n)
	}
	problems, err := db.Check()
	if err != nil || len(problems) > 0 {
		t.Fatalf("Check: %v %v", err, problems)
	}
	if got := released.Load(); got < 4 { // after the page check, per item, at the end
		t.Errorf("pages released %d times, want at least 4", got)
	}
}

// TestDB_BuildsRelease: the once-only builds of a writable open (the
// kept counts, the report cube) read every item and release the pages
// they read as the walks do; the counts they build are right.
func TestDB_BuildsRelease(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "b.db")
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Ingest(cubeRecs(20, "")); err != nil {
		t.Fatal(err)
	}
	drainCube(t, db, 0)
	want, err := db.Counts()
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	dropCube(t, path)
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Delete(keyCounts) }); err != nil {
		t.Fatal(err)
	}
	bdb.Close()
	var released atomic.Int64
	defer func(every int, rel func(addr, n uintptr)) { releaseEvery, release = every, rel }(releaseEvery, release)
	releaseEvery = 1
	release = func(addr, n uintptr) {
		released.Add(1)
		releasePages(addr, n)
	}
	db, err = Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := released.Load(); got < 2*20 { // per item, in each build
		t.Errorf("pages released %d times by the builds, want at least 40", got)
	}
	got, err := db.Counts()
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("counts after the rebuild %+v %v, want %+v", got, err, want)
	}
	checkCube(t, db)
}

// TestDB_ForEachDeadReleases: the dead letters' walk looks up each
// entry's record elsewhere in the file, so it releases the mapping's
// pages every eighth of a plain walk's items, and still gives every
// entry with its text.
func TestDB_ForEachDeadReleases(t *testing.T) {
	db := openTest(t)
	const n = 40
	ids := numberedIDs("d%03d", n)
	if _, err := db.Ingest(recs(ids...)); err != nil {
		t.Fatal(err)
	}
	deadLetterAll(t, db, "sanitize", "empty")

	var released atomic.Int64
	defer func(every int, rel func(addr, n uintptr)) { releaseEvery, release = every, rel }(releaseEvery, release)
	releaseEvery = 16 // the dead letters' walk: every 2 entries
	release = func(addr, n uintptr) {
		released.Add(1)
		releasePages(addr, n)
	}
	var got []string
	err := db.ForEachDead("sanitize", func(e DeadEntry) error {
		if e.Text != "text of "+e.ID || e.Dead.Message != "empty" {
			t.Errorf("entry %s: text %q, dead %+v", e.ID, e.Text, e.Dead)
		}
		got = append(got, e.ID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Errorf("walked %v, want %v", got, ids)
	}
	if r := released.Load(); r < n/2 {
		t.Errorf("pages released %d times over %d dead letters, want at least every second one", r, n)
	}
}

// TestDB_CheckReleasesOnLookups: verify's walks of a queue and of the
// dead letters look each entry's state up elsewhere in the file, so they
// release the pages as often as ForEachDead does (every releaseEvery/8
// entries), not as a walk along one bucket does.
func TestDB_CheckReleasesOnLookups(t *testing.T) {
	for _, dead := range []bool{false, true} {
		t.Run(fmt.Sprintf("dead %v", dead), func(t *testing.T) {
			db := openTest(t)
			const n = 40
			if _, err := db.Ingest(recs(numberedIDs("q%03d", n)...)); err != nil {
				t.Fatal(err)
			}
			if dead {
				deadLetterAll(t, db, "sanitize", "empty")
			}
			var released atomic.Int64
			defer func(every int, rel func(addr, n uintptr)) { releaseEvery, release = every, rel }(releaseEvery, release)
			releaseEvery = 16 // lookups: every 2 entries
			release = func(addr, n uintptr) {
				released.Add(1)
				releasePages(addr, n)
			}
			var problems []string
			err := db.walk(func(tx *bolt.Tx, w *walker) error {
				released.Store(0)
				return db.checkStageBuckets(tx, w, func(f string, a ...any) { problems = append(problems, fmt.Sprintf(f, a...)) })
			})
			if err != nil || len(problems) > 0 {
				t.Fatalf("check: %v, %q", err, problems)
			}
			// The walk's own release at its end is one more.
			if r := released.Load(); r < n/2 {
				t.Errorf("pages released %d times over %d entries, want at least every second one", r, n)
			}
		})
	}
}

// TestWalker_releasesPastResident: at each releaseEvery a walk releases
// the mapping's pages only when the process's resident file pages pass
// releaseAbove (or cannot be read), so a walk that maps little does not
// drop the pages it and the walks beside it are still reading.
func TestWalker_releasesPastResident(t *testing.T) {
	defer func(every int, above int64, res func() int64, rel func(addr, n uintptr)) {
		releaseEvery, releaseAbove, residentFile, release = every, above, res, rel
	}(releaseEvery, releaseAbove, residentFile, release)
	releaseEvery, releaseAbove = 4, 64<<20
	cases := []struct {
		name     string
		resident int64
		want     int
	}{
		{"below the bound", 10 << 20, 0},
		{"at the bound", 64 << 20, 0},
		{"past the bound", 65 << 20, 2},
		{"not known", -1, 2},
	}
	db := openTest(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			residentFile = func() int64 { return tc.resident }
			released := 0
			release = func(addr, n uintptr) { released++ }
			err := db.bolt.View(func(tx *bolt.Tx) error {
				w := &walker{db: db, tx: tx}
				for range 9 {
					w.step()
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if released != tc.want {
				t.Errorf("9 steps at releaseEvery 4: %d releases, want %d", released, tc.want)
			}
		})
	}
}

// TestResidentShared: the process's resident file pages are read (a
// test binary's own pages at least).
func TestResidentShared(t *testing.T) {
	if residentShared() < 0 {
		t.Skip("no /proc/self/statm here")
	}
	db := openTest(t)
	if _, err := db.Ingest(recs("a", "b")); err != nil {
		t.Fatal(err)
	}
	if got := residentShared(); got <= 0 {
		t.Errorf("residentShared() = %d, want the binary's pages at least", got)
	}
}
