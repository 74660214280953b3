package cli

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/bench"
)

// TestBenchEngine_usage: `bench --engine` refuses what it cannot measure
// before it connects or creates anything, each time naming the flag.
func TestBenchEngine_usage(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		want     string
		noEngine bool // the flags are given without --engine
	}{
		{"--db without --engine", []string{"--db", "postgres://localhost/x"}, "--db is for the engine benchmark: add --engine", true},
		{"--workers without --engine", []string{"--workers", "1,2"}, "--workers is for the engine benchmark", true},
		{"a bbolt path as --db", []string{"--db", "reviews.db"}, "--db reviews.db: with --engine, --db names a PostgreSQL server", false},
		{"a password in the URL", []string{"--db", "postgres://u:secret@localhost/x"}, "PGPASSWORD", false},
		{"a worker count that is no number", []string{"--db", "postgres://localhost/x", "--workers", "1,two"}, `--workers "1,two"`, false},
		{"zero workers", []string{"--db", "postgres://localhost/x", "--workers", "0"}, `--workers "0"`, false},
		{"no worker count", []string{"--db", "postgres://localhost/x", "--workers", ","}, "--workers is empty", false},
		{"a bad worker count without --db", []string{"--workers", "1,x"}, `--workers "1,x"`, false},
		{"worker counts without --db", []string{"--workers", "2"}, "--workers 2: worker counts are for a PostgreSQL run", false},
		{"with --matrix", []string{"--matrix"}, "--engine and --matrix", false},
		{"no items", []string{"--items", "0"}, "--items must be positive", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"sawtooth", "bench"}, tt.args...)
			if !tt.noEngine {
				args = append([]string{"sawtooth", "bench", "--engine"}, tt.args...)
			}
			err := runApp(args, io.Discard, io.Discard)
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("err = %v, want a usage error", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q lacks %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

// TestBench_matrixFlagsWithoutMatrix: a matrix flag given without
// --matrix is refused naming it, before any strategy runs (it would
// otherwise be ignored, and the run would not be what was asked).
func TestBench_matrixFlagsWithoutMatrix(t *testing.T) {
	for _, args := range [][]string{{"--unnamed"}, {"--long"}, {"--runs", "3"}, {"--shapes", "fixed-exact"}, {"--plot-dir", t.TempDir()}, {"--random", "3"}} {
		t.Run(args[0], func(t *testing.T) {
			var out strings.Builder
			err := runApp(append([]string{"sawtooth", "bench", "--items", "10"}, args...), &out, io.Discard)
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), args[0]+" is for the quota matrix: add --matrix") {
				t.Fatalf("err = %v, want a usage error naming %s", err, args[0])
			}
			if out.Len() != 0 {
				t.Errorf("printed %q before refusing", out.String())
			}
		})
	}
}

// TestBench_matrixRandom: --matrix --random N --seed S prints the random
// families' table for N shapes drawn from S, each worst shape with its
// seed; a negative N is a usage error.
func TestBench_matrixRandom(t *testing.T) {
	var out strings.Builder
	if err := runApp([]string{"sawtooth", "bench", "--matrix", "--random", "3", "--seed", "40"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"3 random quota shapes, seed 40", "\nall ", "seed 40\n", "seed 41\n", "seed 42\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	err := runApp([]string{"sawtooth", "bench", "--matrix", "--random", "-2"}, io.Discard, io.Discard)
	var ue *UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--random must be positive") {
		t.Errorf("--random -2: err = %v, want a usage error", err)
	}
}

// TestPrintEngineTable: the engine table gives each run's claims and
// commits per second (none for bbolt), report time and export rows per
// second, then, per PostgreSQL run, its claims, commits and sizes: the
// database, the bench schema against the input and after compact, and
// its large tables largest first, each before -> after compact.
func TestPrintEngineTable(t *testing.T) {
	results := []bench.EngineResult{
		{Store: "postgresql", Workers: 4, Items: 1000, Seconds: 2, ItemsPerSec: 500, Claims: 20, Claimed: 3000, EmptyClaims: 7,
			ClaimsPerSec: 10, Commits: 10, Committed: 3000, CommitsPerSec: 5, ReportSeconds: 0.25, ExportRowsPerSec: 40000,
			InputBytes: 1e6, DatabaseBytes: 10e6, SchemaBytes: 3e6,
			Tables:         map[string]int64{"item": 1e6, "output": 2e6, "meta": 8192},
			CompactedBytes: 2.5e6, CompactedTables: map[string]int64{"item": 0.9e6, "output": 1.5e6, "meta": 8192}, CompactSeconds: 1.25},
		{Store: "bbolt", Workers: 1, Items: 1000, Seconds: 1, ItemsPerSec: 1000, ReportSeconds: 0.5, ExportRowsPerSec: 80000},
	}
	var out strings.Builder
	printEngineTable(&out, results)
	lines := strings.Split(out.String(), "\n")
	for _, want := range []string{"claims/s", "commits/s", "report s", "export rows/s"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("header %q lacks %q", lines[0], want)
		}
	}
	if f := strings.Fields(lines[1]); len(f) < 9 || f[5] != "10.0" || f[6] != "5.0" || f[7] != "0.25" || f[8] != "40000" {
		t.Errorf("postgresql row %q: want claims/s 10.0, commits/s 5.0, report 0.25 s, export 40000 rows/s", lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) < 9 || f[5] != "-" || f[6] != "-" || f[7] != "0.50" || f[8] != "80000" {
		t.Errorf("bbolt row %q: want no claims or commits, report 0.50 s, export 80000 rows/s", lines[2])
	}
	want := "postgresql, 4 workers: 20 claims of 150 entries on average (7 found nothing), 10 commits of 300 transitions; " +
		"database 10.0 MB (pg_database_size), bench schema 3.0 MB (3.0x the 1.0 MB of JSONL input), 2.5 MB (2.5x) after compact (1.2 s); " +
		"tables with indexes: output 2.0 MB -> 1.5 MB item 1.0 MB -> 0.9 MB\n"
	if !strings.Contains(out.String(), want) {
		t.Errorf("output lacks\n%s\ngot\n%s", want, out.String())
	}
}
