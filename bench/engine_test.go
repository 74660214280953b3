package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/internal/reviewgen"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
	bolt "go.etcd.io/bbolt"
)

// Engine benchmarks. Run them with
//
//	go test -run '^$' -bench 'Drain$|BoltBatchedPut' -benchtime 5x ./bench
//	go test -c -o /tmp/bench.test ./bench
//	SAWTOOTH_BENCH_1M=1 /usr/bin/time -v /tmp/bench.test -test.run '^$' \
//	    -test.bench DrainMillion -test.benchtime 1x -test.timeout 1h
//
// Each iteration drains a fresh database, so -benchtime Nx is the useful
// form. Commits are durable (fsync per group commit), as in a run. The
// million-item run is timed on the compiled test binary so that
// /usr/bin/time measures it rather than the go command.

// drainItems is the engine benchmark's item count.
const drainItems = 100_000

// ingestReviews ingests n generated reviews in batches of 1000, streaming
// (never holding more than a batch), and returns how long it took.
func ingestReviews(tb testing.TB, db *store.DB, n int) time.Duration {
	tb.Helper()
	g := reviewgen.New(DefaultItemSeed)
	start := time.Now()
	batch := make([]pipeline.Record, 0, 1000)
	for i := 1; i <= n; i++ {
		batch = append(batch, record(g.Next(), i))
		if len(batch) == cap(batch) || i == n {
			if _, err := db.Ingest(batch); err != nil {
				tb.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	return time.Since(start)
}

func openBench(tb testing.TB, path string) *store.DB {
	tb.Helper()
	db, err := store.Open(path, store.Options{Stages: stageDefs})
	if err != nil {
		tb.Fatal(err)
	}
	return db
}

// BenchmarkDrain drains 100,000 ingested reviews through sanitize, an
// instant classify and aggregate: three durable transitions per item.
// items/s is end to end (drain only; ingest is not timed).
func BenchmarkDrain(b *testing.B) {
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		db := openBench(b, filepath.Join(b.TempDir(), "drain.db"))
		ingestReviews(b, db, drainItems)
		r := &pipeline.Runner{Store: db, Stages: EngineStages(&InstantClassify{})}
		b.StartTimer()
		start := time.Now()
		sum, err := r.Run(context.Background())
		total += time.Since(start)
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if got := sum.Stages["aggregate"].Done + sum.Stages["aggregate"].Dead + sum.Stages["sanitize"].Dead; got != drainItems {
			b.Fatalf("%d items finished, want %d", got, drainItems)
		}
		db.Close()
	}
	b.ReportMetric(float64(b.N*drainItems)/total.Seconds(), "items/s")
	b.ReportMetric(float64(b.N*drainItems*3)/total.Seconds(), "transitions/s")
}

// BenchmarkBoltBatchedPut is the floor under BenchmarkDrain: the same
// 100,000 records, JSON-encoded, put into a bare bbolt file 1,000 per
// durable transaction. Drain's items/s over this records/s is the
// engine's cost per item relative to writing the item once.
func BenchmarkBoltBatchedPut(b *testing.B) {
	recs := Reviews(drainItems, DefaultItemSeed)
	enc := make([][]byte, len(recs))
	for i, r := range recs {
		enc[i], _ = json.Marshal(r)
	}
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		db, err := bolt.Open(filepath.Join(b.TempDir(), "put.db"), 0o600, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		for lo := 0; lo < len(recs); lo += 1000 {
			err := db.Update(func(tx *bolt.Tx) error {
				bk, err := tx.CreateBucketIfNotExists([]byte("items"))
				if err != nil {
					return err
				}
				for j := lo; j < min(lo+1000, len(recs)); j++ {
					if err := bk.Put([]byte(recs[j].ID), enc[j]); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		total += time.Since(start)
		b.StopTimer()
		db.Close()
	}
	b.ReportMetric(float64(b.N*drainItems)/total.Seconds(), "records/s")
}

// firstCall wraps a stage to record when any stage sharing at was first
// called.
type firstCall struct {
	pipeline.Stage
	at *atomic.Pointer[time.Time]
}

func (f firstCall) Process(ctx context.Context, it pipeline.Item) (pipeline.Result, error) {
	if f.at.Load() == nil {
		now := time.Now()
		f.at.CompareAndSwap(nil, &now)
	}
	return f.Stage.Process(ctx, it)
}

// BenchmarkDrainMillion ingests a million reviews, drains half of them,
// stops, reopens the file and resumes to the end. It reports ingest and
// drain throughput, the resume start-up (from opening the file to the
// first item being processed again by any stage) and the peak RSS of the
// process. It
// runs only with SAWTOOTH_BENCH_1M=1: it takes minutes and a few GB of
// disk.
func BenchmarkDrainMillion(b *testing.B) {
	if os.Getenv("SAWTOOTH_BENCH_1M") == "" {
		b.Skip("set SAWTOOTH_BENCH_1M=1 to run the million-item benchmark")
	}
	const n = 1_000_000
	stopSampling := sampleAnonRSS()
	for i := 0; i < b.N; i++ {
		path := filepath.Join(b.TempDir(), "million.db")
		db := openBench(b, path)
		ingest := ingestReviews(b, db, n)

		// Drain until half the items are through, then stop as on SIGINT.
		ctx, cancel := context.WithCancel(context.Background())
		r := &pipeline.Runner{Store: db, Stages: EngineStages(&InstantClassify{}), OnTick: func(p pipeline.Progress) {
			if last := p.Stages[len(p.Stages)-1]; last.Done >= n/2 {
				cancel()
			}
		}}
		start := time.Now()
		half, err := r.Run(ctx)
		firstDrain := time.Since(start)
		cancel()
		if err == nil {
			b.Fatal("the first half ran to the end")
		}
		db.Close()

		// Resume: open the same file and drain the rest.
		runtime.GC()
		var first atomic.Pointer[time.Time]
		stages := EngineStages(&InstantClassify{})
		for i := range stages {
			stages[i].Stage = firstCall{Stage: stages[i].Stage, at: &first}
		}
		open := time.Now()
		db = openBench(b, path)
		opened := time.Since(open)
		r = &pipeline.Runner{Store: db, Stages: stages}
		sum, err := r.Run(context.Background())
		resumed := time.Since(open)
		if err != nil {
			b.Fatal(err)
		}
		at := first.Load()
		if at == nil {
			b.Fatal("no stage was called after resuming")
		}
		counts, err := db.Counts()
		if err != nil {
			b.Fatal(err)
		}
		if counts.Items != n || counts.Done+counts.Stages[0].Dead+counts.Stages[1].Dead+counts.Stages[2].Dead != n {
			b.Fatalf("after resuming: %+v, want all %d items done or dead", counts, n)
		}
		fi, _ := os.Stat(path)
		db.Close()

		drained := half.Stages["aggregate"].Done + sum.Stages["aggregate"].Done
		b.ReportMetric(ingest.Seconds(), "ingest-s")
		b.ReportMetric(float64(n)/ingest.Seconds(), "ingest-items/s")
		b.ReportMetric(float64(drained)/(firstDrain+resumed).Seconds(), "drain-items/s")
		b.ReportMetric((firstDrain + resumed).Seconds(), "drain-s")
		b.ReportMetric(opened.Seconds(), "reopen-s")
		b.ReportMetric(at.Sub(open).Seconds(), "resume-startup-s")
		b.ReportMetric(float64(fi.Size())/(1<<20), "db-MB")
		if rss := procStatus("VmHWM"); rss > 0 {
			b.ReportMetric(float64(rss)/(1<<20), "peak-RSS-MB")
		}
		if anon := stopSampling(); anon > 0 {
			b.ReportMetric(float64(anon)/(1<<20), "peak-anon-RSS-MB")
		}
	}
}

// sampleAnonRSS samples the process's anonymous resident memory (RssAnon:
// heap, stacks; not the pages of the mmapped database file, which the
// kernel can drop at will) every 50ms until the returned function is
// called, which returns the highest sample.
func sampleAnonRSS() (stop func() int64) {
	var peak atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			if v := procStatus("RssAnon"); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-t.C:
			case <-done:
				return
			}
		}
	})
	var once sync.Once
	return func() int64 {
		once.Do(func() { close(done); wg.Wait() })
		return peak.Load()
	}
}

// procStatus returns a memory field of /proc/self/status ("VmHWM", the
// peak resident set; "RssAnon", anonymous resident memory) in bytes, 0
// where there is no /proc.
func procStatus(field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
