package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// ingestToAggregate ingests n items r000000... in id order and commits sanitize
// and classify for all of them in order, leaving every item queued at
// aggregate.
func ingestToAggregate(tb testing.TB, db *DB, n int) {
	tb.Helper()
	for first := 0; first < n; first += 1000 {
		var ids []string
		for i := first; i < min(first+1000, n); i++ {
			ids = append(ids, fmt.Sprintf("r%06d", i))
		}
		if _, err := db.Ingest(recs(ids...)); err != nil {
			tb.Fatal(err)
		}
	}
	advance(tb, db, "sanitize", jsonOut)
	advance(tb, db, "classify", jsonOut)
}

// commitAt commits, in one transaction, a success at stage for each of
// ids (each queued there).
func commitAt(tb testing.TB, db *DB, stage string, ids []string) {
	tb.Helper()
	qs, err := db.Queued(stage, 0, 1<<30)
	if err != nil {
		tb.Fatal(err)
	}
	seq := make(map[string]uint64, len(qs))
	for _, q := range qs {
		seq[q.Item.ID] = q.Seq
	}
	ts := make([]pipeline.Transition, len(ids))
	for i, id := range ids {
		s, ok := seq[id]
		if !ok {
			tb.Fatalf("%s is not queued at %s", id, stage)
		}
		ts[i] = pipeline.Transition{Stage: stage, ID: id, Seq: s, Outcome: pipeline.Succeeded,
			Result: pipeline.Result{Output: fact("bug")}}
	}
	if err := db.Commit(ts); err != nil {
		tb.Fatal(err)
	}
}

func idRange(from, to int) []string {
	var ids []string
	for i := from; i < to; i++ {
		ids = append(ids, fmt.Sprintf("r%06d", i))
	}
	return ids
}

// The orders in which a run commits a stage's outputs, each leaving
// out/aggregate's pages packed once every item is done. Before outputs
// were packed as they settled, bbolt left these pages 0.64-0.75 full.
func TestDB_SettledOutputsFillTheirPages(t *testing.T) {
	const n = 6000
	for _, tc := range []struct {
		name    string
		commits func(rng *rand.Rand) [][]string
	}{
		// A claim's cached answers first (about half its items, spread
		// over its ids), its paid calls in the next commits: each wave
		// lands in the pages the previous one split.
		{"waves", func(rng *rand.Rand) [][]string {
			var commits [][]string
			var late [][]string // the paid calls of the claims before, by commit
			for first := 0; first < n; first += 500 {
				var cached, paid []string
				for _, id := range idRange(first, first+500) {
					if rng.IntN(100) < 55 {
						cached = append(cached, id)
					} else {
						paid = append(paid, id)
					}
				}
				commits = append(commits, cached)
				for len(late) < 3 {
					late = append(late, nil)
				}
				for _, id := range paid {
					j := rng.IntN(3)
					late[j] = append(late[j], id)
				}
				commits = append(commits, late[0])
				late = late[1:]
			}
			return append(commits, late...)
		}},
		// The second half done before the first: the first half's outputs
		// all land behind the keys the bucket holds.
		{"second half first", func(*rand.Rand) [][]string {
			var commits [][]string
			for _, half := range [][2]int{{n / 2, n}, {0, n / 2}} {
				for first := half[0]; first < half[1]; first += 250 {
					commits = append(commits, idRange(first, first+250))
				}
			}
			return commits
		}},
		// One item in ten of the first two thirds held back, done in
		// commits of their own among the last ones.
		{"stragglers", func(*rand.Rand) [][]string {
			var commits, held [][]string
			for first := 0; first < n; first += 250 {
				var now, later []string
				for i, id := range idRange(first, first+250) {
					if first < 2*n/3 && i%10 == 3 {
						later = append(later, id)
					} else {
						now = append(now, id)
					}
				}
				commits = append(commits, now)
				if later != nil {
					held = append(held, later)
				}
			}
			// Each held commit after one of the last regular ones.
			out := slices.Clone(commits[:len(commits)-len(held)])
			for i, h := range held {
				out = append(out, commits[len(commits)-len(held)+i], h)
			}
			return out
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := openTest(t)
			ingestToAggregate(t, db, n)
			rng := rand.New(rand.NewPCG(5, 31))
			done := 0
			for _, ids := range tc.commits(rng) {
				if len(ids) > 0 {
					commitAt(t, db, "aggregate", ids)
					done += len(ids)
				}
			}
			if c := counts(t, db); c.Done != n || done != n {
				t.Fatalf("%d items done by %d outputs, want %d", c.Done, done, n)
			}
			const least = 0.95
			if got := leafFill(t, db, "out/aggregate"); got < least {
				t.Errorf("out/aggregate: leaf pages %.2f full, want at least %.2f", got, least)
			} else {
				t.Logf("out/aggregate: leaf pages %.2f full", got)
			}
		})
	}
}

// The mark stops at the first id still queued at the stage (its output
// will land in those pages), and passes it once it is done; it repacks
// only once a put has landed behind the keys the bucket held.
func TestDB_SettleMarkStopsAtQueuedIds(t *testing.T) {
	db := openTest(t)
	ingestToAggregate(t, db, 1000)
	si := db.index["aggregate"]
	commitAt(t, db, "aggregate", slices.DeleteFunc(idRange(0, 1000), func(id string) bool { return id == "r000300" }))
	if m := db.settle.get(si); string(m.next) != "r000300" || m.mixed {
		t.Errorf("mark after all but r000300 done, in order: %q, mixed %v; want r000300, not mixed (appends are not repacked)", m.next, m.mixed)
	}
	commitAt(t, db, "aggregate", []string{"r000300"})
	if m := db.settle.get(si); bytes.Compare(m.next, []byte("r000999")) <= 0 || !m.mixed {
		t.Errorf("mark after every item done: %q, mixed %v; want past r000999, mixed (r000300 landed behind)", m.next, m.mixed)
	}
}

// A commit walks at most its budget of state records: a process whose
// first commit puts two outputs 10,000 ids apart (a night's edit of an
// old item beside a new one) walks settleWalkMin of the ids between, and
// the next commits go on from there.
func TestDB_SettleWalkKeepsToItsBudget(t *testing.T) {
	path := filepath.Join(t.TempDir(), "st.db")
	db, err := Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10000
	ingestToAggregate(t, db, n)
	commitAt(t, db, "aggregate", idRange(1, n-1))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(path, Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	commitAt(t, db, "aggregate", []string{"r000000", fmt.Sprintf("r%06d", n-1)})
	want := fmt.Sprintf("r%06d", settleWalkMin)
	if got := db.settle.get(db.index["aggregate"]).next; string(got) != want {
		t.Errorf("mark after a commit of 2 outputs: %q, want %s (%d ids walked)", got, want, settleWalkMin)
	}
	if problems, err := db.Check(); err != nil || len(problems) > 0 {
		t.Errorf("check: %v %v", err, problems)
	}
}

// packSettled relies on bbolt joining a page the transaction deleted
// from into its neighbour when FillPercent is above 1 (node.rebalance
// reads it unclamped), then splitting at 1.0: pages left half full by
// appends at 0.5 come out full when every key is deleted and put back
// at repackFill. If a bbolt upgrade stops doing so, this fails, and the
// out/ buckets keep the fill of their splits (still correct).
func TestRepack_boltJoinsPagesAboveFullFill(t *testing.T) {
	bdb, err := bolt.Open(filepath.Join(t.TempDir(), "b.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	name := []byte("b")
	for first := 0; first < 20000; first += 1000 {
		if err := bdb.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(name)
			if err != nil {
				return err
			}
			b.FillPercent = 0.5
			for i := first; i < first+1000; i++ {
				if err := b.Put(fmt.Appendf(nil, "k%06d", i), []byte("a value of some thirty bytes..")); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	fill := func() float64 {
		var st bolt.BucketStats
		bdb.View(func(tx *bolt.Tx) error { st = tx.Bucket(name).Stats(); return nil })
		return float64(st.LeafInuse) / float64(st.LeafAlloc)
	}
	if got := fill(); got > 0.6 {
		t.Fatalf("before: leaf pages %.2f full, want about 0.5", got)
	}
	if err := bdb.Update(func(tx *bolt.Tx) error {
		_, err := repack(tx.Bucket(name), []byte("k"), []byte("l"), 1<<30)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := fill(); got < 0.97 {
		t.Errorf("after repack: leaf pages %.2f full, want at least 0.97", got)
	}
	if err := bdb.View(func(tx *bolt.Tx) error {
		n := 0
		err := tx.Bucket(name).ForEach(func(k, v []byte) error {
			if want := fmt.Sprintf("k%06d", n); string(k) != want || string(v) != "a value of some thirty bytes.." {
				return fmt.Errorf("key %d: %q=%q, want %s", n, k, v, want)
			}
			n++
			return nil
		})
		if err == nil && n != 20000 {
			err = fmt.Errorf("%d keys, want 20000", n)
		}
		return err
	}); err != nil {
		t.Error(err)
	}
}

// A nested bucket among a stage's outputs (a damaged or foreign file:
// no output is one) is left where it is by the repack: bbolt's Delete
// refuses a bucket, which failed every commit whose walk crossed it.
func TestDB_RepackSkipsNestedBucket(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "st.db"), Options{Stages: testStages})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ingestToAggregate(t, db, 1000)
	if err := db.bolt.Update(func(tx *bolt.Tx) error {
		_, err := tx.Bucket(outBucket("aggregate")).CreateBucket([]byte("r000200a"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// The second half first, so the first half lands behind it (mixed)
	// and its commit repacks across the nested bucket.
	commitAt(t, db, "aggregate", idRange(500, 1000))
	commitAt(t, db, "aggregate", idRange(0, 500))
	if c := counts(t, db); c.Done != 1000 {
		t.Errorf("%d items done, want 1000", c.Done)
	}
	if m := db.settle.get(db.index["aggregate"]); !m.mixed || bytes.Compare(m.next, []byte("r000999")) <= 0 {
		t.Errorf("mark %q, mixed %v: want past r000999, mixed (the repack ran)", m.next, m.mixed)
	}
	if err := db.view(func(tx *bolt.Tx) error {
		if tx.Bucket(outBucket("aggregate")).Bucket([]byte("r000200a")) == nil {
			t.Error("the nested bucket is gone")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// What one commit rewrites is capped in bytes beyond its own share of
// outputs (settleWalkPerPut for each it put): a straggler of one output
// behind 1,000 settled outputs of 4 KB repacks about settleRepackBytes of
// them, not the 4,096 its walk may read, and the next commits go on from
// where it stopped; a repack always takes its share, however large.
func TestRepack_capsWhatOneCommitRewrites(t *testing.T) {
	bdb, err := bolt.Open(filepath.Join(t.TempDir(), "b.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bdb.Close()
	name := []byte("b")
	value := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, 4096) }
	if err := bdb.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket(name)
		if err != nil {
			return err
		}
		for i := range 1000 {
			if err := b.Put(fmt.Appendf(nil, "k%06d", i), value(i)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	repackFrom := func(from string, least int) string {
		var end []byte
		if err := bdb.Update(func(tx *bolt.Tx) error {
			var err error
			end, err = repack(tx.Bucket(name), []byte(from), []byte("l"), least)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return string(end)
	}
	perKey := len("k000000") + 4096
	want := fmt.Sprintf("k%06d", settleRepackBytes/perKey)
	if got := repackFrom("k000000", settleWalkPerPut); got != want {
		t.Errorf("a commit of one output stopped its repack at %q, want %q (%d bytes)", got, want, settleRepackBytes)
	}
	if got, want := repackFrom("k000100", 200), "k000300"; got != want {
		t.Errorf("a commit of 25 outputs (a share of 200) stopped at %q, want %q", got, want)
	}
	if got := repackFrom("k000990", 1); got != "l" {
		t.Errorf("the last 10 keys: stopped at %q, want the end", got)
	}
	if err := bdb.View(func(tx *bolt.Tx) error {
		n := 0
		err := tx.Bucket(name).ForEach(func(k, v []byte) error {
			if want := fmt.Sprintf("k%06d", n); string(k) != want || !bytes.Equal(v, value(n)) {
				t.Errorf("key %d after the repacks: %q (%d bytes), want %s", n, k, len(v), want)
			}
			n++
			return nil
		})
		if n != 1000 {
			t.Errorf("%d keys after the repacks, want 1000", n)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}
