package cli

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCopy_usage: a mistyped --from or --to is a usage error that names
// the flag typed (not --db) and creates nothing.
func TestCopy_usage(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name     string
		from, to string
		want     string
	}{
		{"no such --from", filepath.Join(dir, "nosuch.db"), filepath.Join(dir, "out.db"), "--from " + filepath.Join(dir, "nosuch.db") + ": no such database"},
		{"--from in a missing directory", filepath.Join(dir, "nodir", "a.db"), filepath.Join(dir, "out.db"), "--from " + filepath.Join(dir, "nodir", "a.db") + ": the directory"},
		{"the same database twice", filepath.Join(dir, "a.db"), filepath.Join(dir, "a.db"), "--from and --to are both"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := runApp([]string{"sawtooth", "copy", "--from", tt.from, "--to", tt.to}, io.Discard, io.Discard)
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want a usage error containing %q", err, tt.want)
			}
			if _, err := os.Stat(tt.to); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("--to %s was created by a refused copy", tt.to)
			}
		})
	}
}
