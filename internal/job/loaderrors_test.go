package job

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoad_missingOrEmptyFile: a job file that is not there, or that
// holds nothing, is a typed error with the path, naming no command.
func TestLoad_missingOrEmptyFile(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
		is               error
	}{
		{"missing", filepath.Join(dir, "nope.yaml"), "job file " + filepath.Join(dir, "nope.yaml") + ": no such file", fs.ErrNotExist},
		{"empty", empty, empty + ": the file is empty: write a job", ErrEmpty},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.path)
			if err == nil || err.Error() != tt.want || !errors.Is(err, tt.is) {
				t.Fatalf("err = %v, want %q that is %v", err, tt.want, tt.is)
			}
			if strings.Contains(err.Error(), "sawtooth") {
				t.Errorf("the job package names a command: %q", err)
			}
		})
	}
	var nf *NoFileError
	if _, err := Load(filepath.Join(dir, "nope.yaml")); !errors.As(err, &nf) || nf.Path != filepath.Join(dir, "nope.yaml") {
		t.Errorf("err = %v, want a *NoFileError with the path", err)
	}
}
