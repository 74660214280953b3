package store

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// nightRecs are n records with ids from first on, texts as a nightly
// file's.
func nightRecs(first, n int) []pipeline.Record {
	out := make([]pipeline.Record, n)
	for i := range out {
		id := fmt.Sprintf("r%09d", first+i)
		out[i] = pipeline.Record{ID: id, Text: "the app crashes when I open the settings, review " + id,
			Fields: map[string]string{"app": "app" + id[len(id)-1:], "month": "2026-11"}}
	}
	return out
}

// drainAll moves every queued item through every stage, chunk items a
// commit, as the runner does: queues read from a cursor, outputs
// committed in groups.
func drainAll(tb testing.TB, db *DB, chunk int) {
	tb.Helper()
	for _, st := range db.stages {
		var after uint64
		for {
			qs, err := db.Queued(st.Name, after, chunk)
			if err != nil {
				tb.Fatal(err)
			}
			if len(qs) == 0 {
				break
			}
			ts := make([]pipeline.Transition, len(qs))
			for i, q := range qs {
				out := json.RawMessage(`{"text":` + string(mustJSON(q.Item.Text)) + `}`)
				if st.Name != "sanitize" {
					out = fact("bug")
				}
				ts[i] = pipeline.Transition{Stage: st.Name, ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded,
					Result: pipeline.Result{Output: out}}
				after = q.Seq
			}
			if err := db.Commit(ts); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// BenchmarkDB_Night is a night's work on a database that already holds
// existing done items: open, count, ingest a 1,000-item file, drain it
// through every stage, count, close. Its time and allocations must not
// grow with existing (compare the sizes: a cost that scales with the
// database shows up as a ratio near 20). mapped-kB is the most of the
// file's mapping left resident at the end of a night (Linux), what the
// night's process holds of the file beside its heap.
func BenchmarkDB_Night(b *testing.B) {
	for _, existing := range []int{10_000, 200_000} {
		b.Run(fmt.Sprintf("existing=%d", existing), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "night.db")
			opt := Options{Stages: testStages, NoSync: true}
			db, err := Open(path, opt)
			if err != nil {
				b.Fatal(err)
			}
			const load = 10_000
			for i := 0; i < existing; i += load {
				if _, err := db.Ingest(nightRecs(i, load)); err != nil {
					b.Fatal(err)
				}
				drainAll(b, db, 1000)
			}
			db.Close()
			next := existing
			mapped := 0
			b.ResetTimer()
			for range b.N {
				db, err := Open(path, opt)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := db.Counts(); err != nil {
					b.Fatal(err)
				}
				if st, err := db.Ingest(nightRecs(next, 1000)); err != nil || st.New != 1000 {
					b.Fatalf("%+v %v", st, err)
				}
				next += 1000
				drainAll(b, db, 100)
				if c, err := db.Counts(); err != nil || c.Done != next {
					b.Fatalf("%+v %v", c, err)
				}
				if kb, err := residentKB(path); err == nil {
					mapped = max(mapped, kb)
				}
				db.Close()
			}
			b.ReportMetric(float64(mapped), "mapped-kB")
		})
	}
}
