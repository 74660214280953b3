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
		name string
		args []string
		want string
	}{
		{"a bbolt path as --db", []string{"--db", "reviews.db"}, "--db reviews.db: with --engine, --db names a PostgreSQL server"},
		{"a password in the URL", []string{"--db", "postgres://u:secret@localhost/x"}, "PGPASSWORD"},
		{"a worker count that is no number", []string{"--db", "postgres://localhost/x", "--workers", "1,two"}, `--workers "1,two"`},
		{"zero workers", []string{"--db", "postgres://localhost/x", "--workers", "0"}, `--workers "0"`},
		{"no worker count", []string{"--db", "postgres://localhost/x", "--workers", ","}, "--workers is empty"},
		{"a bad worker count without --db", []string{"--workers", "1,x"}, `--workers "1,x"`},
		{"worker counts without --db", []string{"--workers", "2"}, "--workers 2: worker counts are for a PostgreSQL run"},
		{"with --matrix", []string{"--matrix"}, "--engine and --matrix"},
		{"no items", []string{"--items", "0"}, "--items must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"sawtooth", "bench", "--engine"}, tt.args...)
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
