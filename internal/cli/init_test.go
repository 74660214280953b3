package cli

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// init where no job file can be written is a usage error saying what to
// give instead, and writes nothing; it was `open sub/x.yaml: no such file
// or directory`, and a directory with --force `open d: is a directory`.
func TestInit_noPlaceForTheJob(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "d")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing directory", []string{filepath.Join(dir, "none", "job.yaml")}, "the directory " + filepath.Join(dir, "none") + " of "},
		{"a directory with --force", []string{"--force", sub}, sub + " is a directory: give the job file's name, e.g. " + filepath.Join(sub, "sawtooth.yaml")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := runApp(append([]string{"sawtooth", "init"}, tc.args...), io.Discard, io.Discard)
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("init %v: %v, want a usage error saying %q", tc.args, err, tc.want)
			}
			if entries, _ := os.ReadDir(sub); len(entries) > 0 {
				t.Errorf("init %v wrote %s", tc.args, entries[0].Name())
			}
		})
	}
}
