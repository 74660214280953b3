package cli

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestRun_jobFileMissingOrEmpty: run -f with a job file that is not
// there, or is empty, is a usage error that names the command writing a
// starter one.
func TestRun_jobFileMissingOrEmpty(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty job.yaml")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "nope.yaml")
	tests := []struct {
		name, file, want string
	}{
		{"missing", missing, "job file " + missing + ": no such file (write a starter one with `sawtooth init " + missing + "`)"},
		{"empty", empty, empty + ": the file is empty: write a job (see `sawtooth init`)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := runApp([]string{"sawtooth", "run", "-f", tt.file}, io.Discard, io.Discard)
			var ue *UsageError
			if err == nil || err.Error() != tt.want || !errors.As(err, &ue) {
				t.Fatalf("err = %v, want the usage error %q", err, tt.want)
			}
		})
	}
}
