package postgres

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// benchStages: the benchmark drains the first stage, whose commits do
// what a middle stage's do (drop the queue row, store the output, queue
// the item at the next stage).
var benchStages = []pipeline.StageDef{{Name: "instant"}, {Name: "next"}}

// benchURL is where the benchmark runs: SAWTOOTH_BENCH_POSTGRES (a
// server of your choosing, e.g. one with fsync on, each run in a new
// schema), else a fresh database on the test binary's throwaway server
// (fsync off).
func benchURL(b *testing.B) (url, schema string) {
	if u := os.Getenv("SAWTOOTH_BENCH_POSTGRES"); u != "" {
		return u, fmt.Sprintf("bench_%d_%d", os.Getpid(), time.Now().UnixNano())
	}
	return newURL(b), ""
}

// BenchmarkClaimCommit drains b.N items through an instant stage with
// 1, 2 and 4 concurrent workers (each on its own handle, as separate
// processes would be), claiming and committing batch items at a time,
// and reports items/s.
func BenchmarkClaimCommit(b *testing.B) {
	for _, batch := range []int{1, 50} {
		for _, workers := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("batch=%d/workers=%d", batch, workers), func(b *testing.B) {
				benchClaimCommit(b, workers, batch)
			})
		}
	}
}

func benchClaimCommit(b *testing.B, workers, batch int) {
	ctx := context.Background()
	url, schema := benchURL(b)
	open := func(owner string) *DB {
		db, err := Open(ctx, url, Options{Stages: benchStages, Schema: schema, Owner: owner})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		return db
	}
	db := open("ingest")
	for start := 0; start < b.N; start += 5000 {
		var recs []pipeline.Record
		for i := start; i < min(start+5000, b.N); i++ {
			recs = append(recs, pipeline.Record{ID: fmt.Sprintf("i%09d", i), Text: "text"})
		}
		if _, err := db.Ingest(recs); err != nil {
			b.Fatal(err)
		}
	}
	handles := make([]*DB, workers)
	for w := range handles {
		handles[w] = open(fmt.Sprint("w", w))
	}
	out := []byte(`{"ok":true}`)
	var done atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for _, h := range handles {
		wg.Go(func() {
			for {
				cs, err := h.Claim(ctx, "instant", batch, time.Minute)
				if err != nil {
					b.Error(err)
					return
				}
				if len(cs) == 0 {
					return
				}
				ts := make([]pipeline.FencedTransition, len(cs))
				for i, c := range cs {
					ts[i] = pipeline.FencedTransition{Attempt: c.Attempt, Transition: pipeline.Transition{
						Stage: "instant", ID: c.Item.ID, Seq: c.Seq, Outcome: pipeline.Succeeded, Result: pipeline.Result{Output: out}}}
				}
				rej, err := h.CommitFenced(ctx, ts)
				if err != nil || len(rej) > 0 {
					b.Errorf("commit: rejected %d, %v", len(rej), err)
					return
				}
				done.Add(int64(len(cs)))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if got := done.Load(); got != int64(b.N) {
		b.Fatalf("committed %d of %d items", got, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "items/s")
}
