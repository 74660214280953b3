package cli

import (
	"errors"
	"io"
	"strings"
	"testing"
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
