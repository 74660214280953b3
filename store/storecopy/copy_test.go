package storecopy_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
	"github.com/sawtooth-dev/sawtooth/store/postgres/pgtest"
	"github.com/sawtooth-dev/sawtooth/store/storecopy"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
	"go.uber.org/goleak"
)

// pg is the package's throwaway PostgreSQL server, started by the first
// test that needs one (the tests skip without one, unless
// pgtest.Required).
var pg pgtest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	pg.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// clock ticks one whole second per reading: times survive both stores
// exactly (PostgreSQL keeps microseconds).
func clock() func() time.Time {
	t := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return func() time.Time { t = t.Add(time.Second); return t }
}

func openBolt(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "p.db"), store.Options{Stages: storetest.Stages, Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func openPostgres(t *testing.T) *postgres.DB {
	t.Helper()
	u := pg.NewDB(t)
	db, err := postgres.Open(context.Background(), u, postgres.Options{Stages: storetest.Stages, Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// fill drives db through every kind of place and history: done items,
// dead letters at two stages, a re-queued dead letter, an edited record,
// items queued at two stages, usage, a run with its series, a learned
// limit.
func fill(t *testing.T, db pipeline.Database) {
	t.Helper()
	var recs []pipeline.Record
	for i := range 40 {
		id := fmt.Sprintf("i%03d", i)
		recs = append(recs, storetest.Record(id, fmt.Sprintf("%s text %d", []string{"bug", "ux", "praise"}[i%3], i), []string{"a", "b"}[i%2], fmt.Sprint(i%5+1)))
	}
	must(t, func() error { _, err := db.Ingest(recs); return err })
	storetest.Advance(t, db, "sanitize", "i001", "i002", "i003")
	must(t, func() error { _, err := db.Requeue("sanitize", []string{"i001", "i003"}); return err })
	storetest.Advance(t, db, "sanitize", "i003")
	storetest.Advance(t, db, "classify", "i004")
	storetest.Advance(t, db, "aggregate")
	edited := recs[5]
	edited.Text = "ux edited"
	must(t, func() error { _, err := db.Ingest([]pipeline.Record{edited}); return err })
	var more []pipeline.Record
	for i := 40; i < 50; i++ {
		more = append(more, storetest.Record(fmt.Sprintf("i%03d", i), "bug more", "a", "2"))
	}
	must(t, func() error { _, err := db.Ingest(more); return err })
	storetest.Advance(t, db, "sanitize", "i045")
	// One item moves with usage, as the runner commits it, its answer
	// cached; a second reuses the answer; a third was billed and given
	// back.
	qs, err := db.Queued("classify", 0, 3)
	if err != nil || len(qs) < 3 {
		t.Fatalf("Queued: %v %v", qs, err)
	}
	q, paid := qs[0], pipeline.Usage{PromptTokens: 30, CandidateTokens: 4, TotalTokens: 34}
	must(t, func() error {
		return db.Commit([]pipeline.Transition{
			{Stage: "classify", ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded, CacheKey: "k1", CostUSD: 0.0125,
				Result: pipeline.Result{Output: storetest.Output("classify", q.Item), Usage: paid}, Usage: paid},
			{Stage: "classify", ID: qs[1].Item.ID, Seq: qs[1].Seq, Outcome: pipeline.Succeeded, CacheKey: "k1", Cached: true, SavedUSD: 0.0125,
				Result: pipeline.Result{Output: storetest.Output("classify", q.Item)}},
			{Stage: "classify", ID: qs[2].Item.ID, Seq: qs[2].Seq, Outcome: pipeline.Billed, Usage: pipeline.Usage{TotalTokens: 9}, CostUSD: 0.001},
		})
	})
	at := time.Date(2026, 3, 1, 13, 0, 0, 0, time.UTC)
	run := pipeline.RunSummary{ID: "20260301T130000-1", Started: at, Ended: at.Add(time.Minute), Status: "complete",
		Stages: map[string]*pipeline.StageStats{"classify": {Done: 3, Calls: 4}}}
	must(t, func() error { return db.SaveRun(run) })
	must(t, func() error {
		return db.AppendSamples(run.ID, []pipeline.Sample{{At: at.Add(time.Second), Stage: "classify", Limit: 4, Successes: 2}, {At: at.Add(2 * time.Second), Stage: "classify", Limit: 5, Successes: 1}})
	})
	must(t, func() error { return db.SetLearnedLimit("classify", 7) })
	must(t, func() error { return db.SetLearnedLimit(pipeline.QuotaRateKey("classify"), 5400) })
	must(t, func() error {
		return db.(interface{ SaveJob([]byte) error }).SaveJob([]byte("stages: [sanitize, classify, aggregate]"))
	})
}

func must(t *testing.T, fn func() error) {
	t.Helper()
	if err := fn(); err != nil {
		t.Fatal(err)
	}
}

// same fails unless b holds every item of a exactly as a does, and the
// same runs, series, usage, tally and learned limit.
func same(t *testing.T, a, b pipeline.Database) {
	t.Helper()
	if err := storecopy.Compare(a, b); err != nil {
		t.Error(err)
	}
	n := 0
	var check func(id string)
	check = func(id string) {
		n++
		la, err := a.Locate(id)
		if err != nil {
			t.Fatal(err)
		}
		lb, err := b.Locate(id)
		if err != nil {
			t.Errorf("item %s missing from the copy: %v", id, err)
			return
		}
		if !reflect.DeepEqual(normal(la), normal(lb)) {
			t.Errorf("item %s:\n source %+v\n copy   %+v", id, la, lb)
		}
	}
	for _, stage := range []string{"sanitize", "classify", "aggregate"} {
		qa, _ := a.Queued(stage, 0, 1000)
		qb, _ := b.Queued(stage, 0, 1000)
		if len(qa) != len(qb) {
			t.Errorf("%s: %d queued in the source, %d in the copy", stage, len(qa), len(qb))
		}
		for i, q := range qa {
			if i < len(qb) && qb[i].Item.ID != q.Item.ID {
				t.Errorf("%s queue order differs at %d: %s, copy %s", stage, i, q.Item.ID, qb[i].Item.ID)
			}
			check(q.Item.ID)
		}
		_ = a.ForEachDead(stage, func(e pipeline.DeadEntry) error { check(e.ID); return nil })
	}
	_ = a.ForEachDone(func(it pipeline.Item) error { check(it.ID); return nil })
	if n != 50 {
		t.Errorf("checked %d items, want 50", n)
	}
	ra, _ := a.Runs(10)
	rb, _ := b.Runs(10)
	if !reflect.DeepEqual(ra, rb) {
		t.Errorf("runs differ:\n %+v\n %+v", ra, rb)
	}
	sa, _ := a.Samples("20260301T130000-1")
	sb, _ := b.Samples("20260301T130000-1")
	if len(sa) != 2 || !reflect.DeepEqual(sa, sb) {
		t.Errorf("samples differ:\n %+v\n %+v", sa, sb)
	}
	if a.LearnedLimit("classify") != 7 || b.LearnedLimit("classify") != 7 {
		t.Errorf("learned limits %d, %d; want 7", a.LearnedLimit("classify"), b.LearnedLimit("classify"))
	}
	// Without its rate, the copy's next run would climb from the limit
	// in slow start into the quota the source's runs found.
	if key := pipeline.QuotaRateKey("classify"); a.LearnedLimit(key) != 5400 || b.LearnedLimit(key) != 5400 {
		t.Errorf("learned rates %d, %d per minute; want 5400", a.LearnedLimit(key), b.LearnedLimit(key))
	}
	for _, db := range []pipeline.Database{a, b} {
		if job, err := db.(interface{ Job() ([]byte, error) }).Job(); err != nil || string(job) != "stages: [sanitize, classify, aggregate]" {
			t.Errorf("%s: job %q, %v; want the one the source recorded", db.Path(), job, err)
		}
		ac, ok := db.(pipeline.AnswerCache)
		if !ok {
			t.Fatalf("%T keeps no answer cache", db)
		}
		if res, ok, err := ac.CachedAnswer("classify", "k1"); err != nil || !ok || res.Usage.TotalTokens != 34 || len(res.Output) == 0 {
			t.Errorf("%s: cached answer k1 = %s %+v %v %v; want the answer bought for 34 tokens", db.Path(), res.Output, res.Usage, ok, err)
		}
		ls, err := db.(pipeline.Ledgers).Ledgers()
		if l := ls["classify"]; err != nil || l.Paid != 1 || l.Cached != 1 || math.Abs(l.SpentUSD-0.0135) > 1e-9 || math.Abs(l.SavedUSD-0.0125) > 1e-9 {
			t.Errorf("%s: classify ledger %+v, %v; want 1 paid, 1 cached, $0.0135 spent, $0.0125 saved", db.Path(), l, err)
		}
	}
}

// normal clears what a store may represent differently but means the
// same: an empty history or output map.
func normal(l pipeline.Location) pipeline.Location {
	if len(l.History) == 0 {
		l.History = nil
	}
	if len(l.Output) == 0 {
		l.Output = nil
	}
	return l
}

// TestCopy_BoltToPostgresAndBack: a pipeline in every state moves to
// PostgreSQL and back to a new bbolt file intact, and each copy passes
// the store contract's invariants.
func TestCopy_BoltToPostgresAndBack(t *testing.T) {
	src := openBolt(t)
	fill(t, src)
	pg := openPostgres(t)
	st, err := storecopy.Copy(src, pg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Items != 50 || st.History < 2 || st.Runs != 1 || st.Dead < 3 || st.Done == 0 || st.Queued == 0 || st.Answers != 1 {
		t.Errorf("stats %+v", st)
	}
	same(t, src, pg)
	storetest.Invariants(t, pg)

	back := openBolt(t)
	if _, err := storecopy.Copy(pg, back, nil); err != nil {
		t.Fatal(err)
	}
	same(t, src, back)
	storetest.Invariants(t, back)

	// The copies keep working: the items left drain in each.
	for _, db := range []pipeline.Database{pg, back} {
		storetest.Finish(t, db)
		storetest.Invariants(t, db)
	}
	if _, err := storecopy.Copy(src, pg, nil); err == nil {
		t.Error("a copy into a database that holds items succeeded")
	}
}

// TestCopy_PostgresToBolt: the other direction from a pipeline built in
// PostgreSQL.
func TestCopy_PostgresToBolt(t *testing.T) {
	src := openPostgres(t)
	fill(t, src)
	dst := openBolt(t)
	if _, err := storecopy.Copy(src, dst, nil); err != nil {
		t.Fatal(err)
	}
	same(t, src, dst)
	storetest.Invariants(t, dst)
}

// TestCopy_KeepsBatchSends: an item a batch job gave back keeps, in the
// copy, how many jobs asked for it at its stage (batch.Config.MaxSends
// bounds them), both ways; otherwise a copy would let it be sent, and
// paid, that many times more.
func TestCopy_KeepsBatchSends(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	src := openBolt(t)
	if _, err := src.Ingest([]pipeline.Record{storetest.Record("a", "bug a", "x", "4"), storetest.Record("b", "bug b", "x", "4")}); err != nil {
		t.Fatal(err)
	}
	storetest.Advance(t, src, "sanitize")
	for i := range 2 {
		job, ok, err := src.ReserveBatch("classify", 10, now)
		if err != nil || !ok {
			t.Fatalf("reserve: %v %v", ok, err)
		}
		must(t, func() error {
			_, err := src.SetBatchName(job.Num, fmt.Sprintf("batches/%d", i), "JOB_STATE_FAILED", now)
			return err
		})
		must(t, func() error { _, err := src.ReturnBatch(job.Num, "failed", now); return err })
	}
	type batchDB interface {
		pipeline.Database
		ReserveBatch(stage string, max int, now time.Time) (pipeline.BatchJob, bool, error)
		BatchSends(num uint64) (map[string]int, error)
	}
	check := func(db batchDB) {
		t.Helper()
		job, ok, err := db.ReserveBatch("classify", 10, now)
		if err != nil || !ok {
			t.Fatalf("%s: reserve: %v %v", db.Path(), ok, err)
		}
		got, err := db.BatchSends(job.Num)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]int{"a": 2, "b": 2}; !reflect.DeepEqual(got, want) {
			t.Errorf("%s: sends %v after the copy, want %v", db.Path(), got, want)
		}
	}
	pg := openPostgres(t)
	if _, err := storecopy.Copy(src, pg, nil); err != nil {
		t.Fatal(err)
	}
	back := openBolt(t)
	if _, err := storecopy.Copy(pg, back, nil); err != nil {
		t.Fatal(err)
	}
	check(pg)
	check(back)
}

// twoPlaces is a store that lists its first queued item as done too.
type twoPlaces struct{ pipeline.Database }

func (d twoPlaces) ForEachDone(fn func(pipeline.Item) error) error {
	qs, err := d.Queued("sanitize", 0, 1)
	if err != nil || len(qs) == 0 {
		return fmt.Errorf("no queued item: %v", err)
	}
	return fn(qs[0].Item)
}

// TestCopy_refusals: a source that cannot be copied is refused with a
// typed error carrying the facts, worded without a command (the CLI
// names those), and nothing is written into the target.
func TestCopy_refusals(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		src   func(t *testing.T, db *store.DB) pipeline.Database
		check func(t *testing.T, err error, src pipeline.Database)
	}{
		{"an item in two places", func(_ *testing.T, db *store.DB) pipeline.Database { return twoPlaces{db} },
			func(t *testing.T, err error, src pipeline.Database) {
				var e *storecopy.TwoPlacesError
				if !errors.As(err, &e) || e.ID != "a" || e.Path != src.Path() {
					t.Errorf("err = %v, want a TwoPlacesError of item a in %s", err, src.Path())
				}
			}},
		{"open batch jobs", func(t *testing.T, db *store.DB) pipeline.Database {
			storetest.Advance(t, db, "sanitize")
			if _, ok, err := db.ReserveBatch("classify", 10, now); err != nil || !ok {
				t.Fatalf("reserve: %v %v", ok, err)
			}
			return db
		}, func(t *testing.T, err error, src pipeline.Database) {
			var e *storecopy.OpenBatchJobsError
			if !errors.As(err, &e) || e.Items != 2 || e.Path != src.Path() {
				t.Errorf("err = %v, want an OpenBatchJobsError of 2 items in %s", err, src.Path())
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := openBolt(t)
			if _, err := db.Ingest([]pipeline.Record{storetest.Record("a", "bug a", "x", "4"), storetest.Record("b", "bug b", "x", "4")}); err != nil {
				t.Fatal(err)
			}
			src, dst := tt.src(t, db), openBolt(t)
			_, err := storecopy.Copy(src, dst, nil)
			tt.check(t, err, src)
			if err != nil && strings.Contains(err.Error(), "sawtooth ") {
				t.Errorf("err = %v: names a command (the CLI words those)", err)
			}
			if c, err := dst.Counts(); err != nil || c.Items != 0 {
				t.Errorf("the refused copy wrote %d items (%v) into the target", c.Items, err)
			}
		})
	}
}
