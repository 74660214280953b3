package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"

	"github.com/sawtooth-dev/sawtooth/bench"
)

// catEngineBench groups the flags of `sawtooth bench --engine`.
const catEngineBench = "Engine benchmark"

// runEngineBench is `sawtooth bench --engine`: the engine's own
// throughput on PostgreSQL with each worker count and on bbolt.
func runEngineBench(ctx context.Context, o *benchOptions) error {
	if o.Matrix {
		return usagef("--engine and --matrix are two different benchmarks: give one")
	}
	cfg := bench.EngineConfig{DB: o.DB, Bolt: o.WithBolt || o.DB == "", Items: bench.DefaultEngineItems, Log: o.ErrOut}
	if o.ItemsSet {
		cfg.Items = o.Items
	}
	if o.DB != "" {
		if !isPostgres(o.DB) {
			return usagef("--db %s: with --engine, --db names a PostgreSQL server to measure (a postgres:// URL or key=value string); bbolt is measured in a temporary file without it", o.DB)
		}
		if err := checkPostgresDSN(o.DB); err != nil {
			return err
		}
	}
	// --workers is checked even when no --db uses it: a typo must not
	// pass for a measurement.
	var workers []int
	for _, w := range splitList([]string{o.Workers}) {
		n, err := strconv.Atoi(w)
		if err != nil || n < 1 {
			return usagef("--workers %q: want comma-separated worker counts of at least 1, e.g. 1,2,4", o.Workers)
		}
		workers = append(workers, n)
	}
	if len(workers) == 0 {
		return usagef("--workers is empty: give worker counts, e.g. 1,2,4")
	}
	if o.DB == "" && o.WorkersSet {
		return usagef("--workers %s: worker counts are for a PostgreSQL run (--db postgres://...); bbolt runs one worker, as one process owns the file", o.Workers)
	}
	if o.DB != "" {
		cfg.Workers = workers
	}
	results, err := bench.RunEngine(ctx, cfg)
	if len(results) > 0 {
		if o.JSON {
			enc := json.NewEncoder(o.Out)
			enc.SetIndent("", "  ")
			if jerr := enc.Encode(engineReport{Config: cfg, Results: results}); jerr != nil && err == nil {
				err = jerr
			}
		} else {
			printEngineTable(o.Out, results)
		}
	}
	return err
}

// engineReport is `bench --engine --json`'s output.
type engineReport struct {
	Config  bench.EngineConfig   `json:"config"`
	Results []bench.EngineResult `json:"results"`
}

// printEngineTable prints one row per run, then what a worker was.
func printEngineTable(w io.Writer, results []bench.EngineResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "store\tworkers\titems\tseconds\titems/s\tclaims/s\tcommits/s\treport s\texport rows/s\tdurable commits\tleases lost\tload")
	modes := map[string]bool{}
	var notes []string
	for _, r := range results {
		durable := "no"
		if r.Durable {
			durable = "yes"
		}
		claims, commits := "-", "-" // bbolt claims nothing, and its commits are not counted
		if r.Claims > 0 {
			claims, commits = fmt.Sprintf("%.1f", r.ClaimsPerSec), fmt.Sprintf("%.1f", r.CommitsPerSec)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.0f\t%s\t%s\t%.2f\t%.0f\t%s (%s)\t%d\t%s\n",
			r.Store, r.Workers, r.Items, r.Seconds, r.ItemsPerSec, claims, commits, r.ReportSeconds, r.ExportRowsPerSec,
			durable, r.Durability, r.LeasesLost, r.Load)
		if !modes[r.Store] {
			modes[r.Store] = true
			notes = append(notes, fmt.Sprintf("%s workers: %s", r.Store, r.Mode))
		}
	}
	tw.Flush()
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	for _, r := range results {
		switch {
		case r.Space != nil && r.InputBytes > 0:
			fmt.Fprintln(w, boltSpace(r))
		case r.Tables != nil:
			fmt.Fprintln(w, postgresSpace(r))
		}
	}
}

// postgresSpace says what a PostgreSQL run claimed and committed and
// where its bytes went, against its input.
func postgresSpace(r bench.EngineResult) string {
	s := fmt.Sprintf("postgresql, %s: %d claims of %.0f entries on average (%d found nothing), %d commits of %.0f transitions;",
		workerCount(r.Workers), r.Claims, perOne(r.Claimed, r.Claims), r.EmptyClaims, r.Commits, perOne(r.Committed, r.Commits))
	s += fmt.Sprintf(" database %s (pg_database_size), bench schema %s", mb(r.DatabaseBytes), mb(r.SchemaBytes))
	if r.InputBytes > 0 {
		s += fmt.Sprintf(" (%.1fx the %s of JSONL input)", float64(r.SchemaBytes)/float64(r.InputBytes), mb(r.InputBytes))
	}
	if r.CompactedTables != nil {
		s += fmt.Sprintf(", %s", mb(r.CompactedBytes))
		if r.InputBytes > 0 {
			s += fmt.Sprintf(" (%.1fx)", float64(r.CompactedBytes)/float64(r.InputBytes))
		}
		s += fmt.Sprintf(" after compact (%.1f s)", r.CompactSeconds)
	}
	s += "; tables with indexes:"
	for _, t := range r.LargestTables(1e6) { // 1 MB and more, as mb prints them
		s += fmt.Sprintf(" %s %s", t, mb(r.Tables[t]))
		if after, ok := r.CompactedTables[t]; ok {
			s += " -> " + mb(after)
		}
	}
	return s
}

func perOne(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

func workerCount(n int) string {
	if n == 1 {
		return "1 worker"
	}
	return fmt.Sprintf("%d workers", n)
}

// boltSpace says where a bbolt run's bytes went, against its input.
func boltSpace(r bench.EngineResult) string {
	in := float64(r.InputBytes)
	s := fmt.Sprintf("bbolt file: %s (%.1fx the %s of JSONL input), %s (%.1fx) after compact; peak RSS %s; pages:",
		mb(r.Space["file"]), float64(r.Space["file"])/in, mb(r.InputBytes), mb(r.Space["compacted"]), float64(r.Space["compacted"])/in, mb(r.PeakRSS))
	names := make([]string, 0, len(r.Space))
	for k, v := range r.Space {
		if k != "file" && k != "compacted" && v >= 1<<20 {
			names = append(names, k)
		}
	}
	sort.Slice(names, func(i, j int) bool { return r.Space[names[i]] > r.Space[names[j]] })
	for _, k := range names {
		s += fmt.Sprintf(" %s %s", k, mb(r.Space[k]))
	}
	return s
}
