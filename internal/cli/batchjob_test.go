package cli

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunJob_BatchOneAnswer: asking for batch jobs with a job file, by
// its `mode: batch` or by --mode batch|auto or a --batch-* flag beside
// it, gets one answer on every path (batch runs only from flags, and how
// to do each), never a message pointing to the other path.
func TestRunJob_BatchOneAnswer(t *testing.T) {
	url := startTestSim(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte(`{"id":"a","text":"Great app!"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	job := func(t *testing.T, mode string) string {
		t.Helper()
		f := filepath.Join(t.TempDir(), "job.yaml")
		body := "db: job.db\ninput: {path: " + input + "}\nbase_url: " + url + "\nstages:\n" +
			"  - llm:\n      name: classify\n      output: {label: [bug, praise, other]}\n" + mode
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, tc := range []struct {
		name, mode string
		flags      []string
		want       string
	}{
		{"mode: batch in the job file", "      mode: batch\n", nil, "stages[0] (classify): mode: batch"},
		{"--mode batch with -f", "", []string{"--mode", "batch"}, "--mode"},
		{"--mode auto with -f", "", []string{"--mode", "auto"}, "--mode"},
		{"--batch-deadline with -f", "", []string{"--batch-deadline", "1h"}, "--batch-deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := job(t, tc.mode)
			err := runApp(append([]string{"sawtooth", "run", "-f", f, "--quiet"}, tc.flags...), io.Discard, io.Discard)
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("run: %v, want a usage error", err)
			}
			msg := err.Error()
			for _, want := range []string{tc.want, "only available for runs from flags", "--mode batch", "no `mode:` in the job file"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message lacks %q:\n%s", want, msg)
				}
			}
			for _, bad := range []string{"set in the job file instead", "not available in this build"} {
				if strings.Contains(msg, bad) {
					t.Errorf("message says %q, pointing to the other path:\n%s", bad, msg)
				}
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), "job.db")); err == nil {
				t.Error("the refused run created its database")
			}
		})
	}
	// --mode online beside a job file is not a request for batch jobs.
	err := runApp([]string{"sawtooth", "run", "-f", job(t, ""), "--quiet", "--mode", "online"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "set in the job file instead") {
		t.Errorf("--mode online with -f: %v", err)
	}
}
