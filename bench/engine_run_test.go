package bench

import (
	"context"
	"strings"
	"testing"
)

// TestRunEngine drains a few hundred items through the engine bench on
// the throwaway PostgreSQL server (1 and 3 workers) and on bbolt.
// RunEngine itself checks each run (every item done, nothing queued or
// dead, the store's invariants, the stored aggregate equal to its
// recomputation) and fails it otherwise; the test checks that the
// results describe what ran. No timing is asserted.
func TestRunEngine(t *testing.T) {
	url := postgresURL(t)
	const items = 300
	results, err := RunEngine(context.Background(), EngineConfig{DB: url, Workers: []int{1, 3}, Bolt: true, Items: items, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		store   string
		workers int
	}{{"postgresql", 1}, {"postgresql", 3}, {"bbolt", 1}}
	if len(results) != len(want) {
		t.Fatalf("%d results, want %d: %+v", len(results), len(want), results)
	}
	for i, w := range want {
		r := results[i]
		t.Run(r.Store+"/"+strings.Repeat("w", r.Workers), func(t *testing.T) {
			if r.Store != w.store || r.Workers != w.workers || r.Items != items {
				t.Errorf("result %d: %s with %d workers, %d items; want %s with %d, %d", i, r.Store, r.Workers, r.Items, w.store, w.workers, items)
			}
			if r.Seconds <= 0 || r.ItemsPerSec <= 0 {
				t.Errorf("no time measured: %+v", r)
			}
			if r.LeasesLost != 0 {
				t.Errorf("%d leases lost in a run nothing disturbed", r.LeasesLost)
			}
			checkReads(t, r)
			if r.Store == "postgresql" {
				checkPostgresCounts(t, r)
			} else if r.Claims != 0 || r.Commits != 0 || r.Tables != nil {
				t.Errorf("bbolt run with claims, commits or tables counted: %+v", r)
			}
		})
	}
	// pgtest's server runs with fsync off: the bench must say so.
	if pg := results[0]; pg.Durable || !strings.Contains(pg.Durability, "fsync=off") {
		t.Errorf("throwaway server (fsync off) reported durable=%v (%s)", pg.Durable, pg.Durability)
	}
	if b := results[2]; !b.Durable {
		t.Errorf("bbolt reported not durable: %+v", b)
	}
}

// TestRunEngine_boltSpace: a bbolt run says where its bytes went: the
// file after the drain and after compact, each bucket's pages, the
// input's size and the peak RSS.
func TestRunEngine_boltSpace(t *testing.T) {
	results, err := RunEngine(context.Background(), EngineConfig{Items: 200, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 {
		t.Fatalf("%d results, want 1 (bbolt)", len(results))
	}
	r := results[0]
	file, compacted := r.Space["file"], r.Space["compacted"]
	if file <= 0 || compacted <= 0 || compacted > file || r.InputBytes <= 0 || r.PeakRSS <= 0 {
		t.Errorf("space %v, input %d bytes, peak RSS %d: want all measured, compacted <= file", r.Space, r.InputBytes, r.PeakRSS)
	}
	for _, b := range []string{"items", "state", "out/classify", "out/aggregate"} {
		if r.Space[b] <= 0 || r.Space[b] > file {
			t.Errorf("bucket %s: %d bytes of a %d-byte file", b, r.Space[b], file)
		}
	}
	// Sanitize stores an output only where it changed the text, as an
	// edit of it: 200 generated reviews need a few short ones, which fit
	// in their parent's page (an inline bucket has no page of its own).
	if b, ok := r.Space["out/sanitize"]; !ok || b < 0 || b > file {
		t.Errorf("bucket out/sanitize: %d bytes (measured: %v) of a %d-byte file", b, ok, file)
	}
}

// checkReads: the report and the export were timed on the drained
// database, and the export wrote a row per item.
func checkReads(t *testing.T, r EngineResult) {
	t.Helper()
	if r.ReportSeconds <= 0 || r.ExportSeconds <= 0 || r.ExportRowsPerSec <= 0 {
		t.Errorf("report %.3fs, export %.3fs (%.0f rows/s): want both timed", r.ReportSeconds, r.ExportSeconds, r.ExportRowsPerSec)
	}
	if r.ExportRows != int64(r.Items) {
		t.Errorf("export wrote %d rows, want one per item (%d)", r.ExportRows, r.Items)
	}
}

// checkPostgresCounts: a PostgreSQL run counted its workers' claims and
// commits (every item is claimed and committed at each of the three
// stages at least once) and measured its database and the main tables.
func checkPostgresCounts(t *testing.T, r EngineResult) {
	t.Helper()
	transitions := int64(3 * r.Items)
	if r.Claims <= 0 || r.Claimed < transitions || r.Claimed > r.Claims*int64(256) {
		t.Errorf("%d claims leased %d entries: want at least %d entries, at most 256 a claim", r.Claims, r.Claimed, transitions)
	}
	if r.Commits <= 0 || r.Committed < transitions {
		t.Errorf("%d commits carried %d transitions: want at least %d", r.Commits, r.Committed, transitions)
	}
	if r.ClaimsPerSec <= 0 || r.CommitsPerSec <= 0 {
		t.Errorf("claims %.1f/s, commits %.1f/s: want both measured", r.ClaimsPerSec, r.CommitsPerSec)
	}
	for _, table := range []string{"item", "todo", "output"} {
		if r.Tables[table] <= 0 {
			t.Errorf("table %s: %d bytes, want measured (tables: %v)", table, r.Tables[table], r.Tables)
		}
	}
	if r.SchemaBytes <= 0 || r.DatabaseBytes < r.SchemaBytes || r.InputBytes <= 0 {
		t.Errorf("database %d bytes, schema %d, input %d: want the schema measured inside the database", r.DatabaseBytes, r.SchemaBytes, r.InputBytes)
	}
	if r.CompactedBytes <= 0 || r.CompactedBytes > r.SchemaBytes || len(r.CompactedTables) != len(r.Tables) || r.CompactedTables["output"] <= 0 {
		t.Errorf("after compact: schema %d bytes of %d, tables %v of %v: want every table rewritten, none larger", r.CompactedBytes, r.SchemaBytes, r.CompactedTables, r.Tables)
	}
	if got := r.LargestTables(0); len(got) != len(r.Tables) || r.Tables[got[0]] < r.Tables[got[len(got)-1]] {
		t.Errorf("LargestTables(0) = %v: want every table, largest first (%v)", got, r.Tables)
	}
}
