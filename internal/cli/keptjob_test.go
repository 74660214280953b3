package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// batchRunDB is a database a `--mode batch` run from flags filled, and
// the simulator's URL.
func batchRunDB(t *testing.T) (db, url string) {
	t.Helper()
	_, url = batchSim(t, geminisim.BatchConfig{})
	dir := t.TempDir()
	db, input := filepath.Join(dir, "run.db"), filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 5); err != nil {
		t.Fatal(err)
	}
	var out, errs syncBuffer
	if err := runApp([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--quiet",
		"--mode", "batch", "--batch-deadline", "30s", "--batch-poll", "20ms"}, &out, &errs); err != nil {
		t.Fatalf("batch run: %v\n%s", err, errs.String())
	}
	return db, url
}

// shownJob is `job show --db db`.
func shownJob(t *testing.T, db string) string {
	t.Helper()
	var shown, errs syncBuffer
	if err := runApp([]string{"sawtooth", "job", "show", "--db", db}, &shown, &errs); err != nil {
		t.Fatalf("job show: %v\n%s", err, errs.String())
	}
	return shown.String()
}

// Retry and rerun run online, but must not store a job without the mode
// a batch run from flags stored: the next `run --db` with no flags would
// go online at twice the price.
func TestRetryRerun_KeepStoredMode(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"retry", []string{"retry", "--stage", "classify"}},
		{"rerun", []string{"rerun", "--from-stage", "aggregate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, url := batchRunDB(t)
			before := shownJob(t, db)
			var out, errs syncBuffer
			args := append(append([]string{"sawtooth"}, tc.args...), "--db", db, "--base-url", url, "--quiet")
			if err := runApp(args, &out, &errs); err != nil {
				t.Fatalf("%s: %v\n%s", tc.name, err, errs.String())
			}
			after := shownJob(t, db)
			for _, want := range []string{"mode: batch", "deadline: 30s", "poll: 20ms"} {
				if !strings.Contains(after, want) {
					t.Errorf("after %s the stored job lost %q:\n%s\n%s said:\n%s", tc.name, want, after, tc.name, errs.String())
				}
			}
			if after != before {
				t.Errorf("%s changed the stored job:\nbefore:\n%s\nafter:\n%s", tc.name, before, after)
			}
			if strings.Contains(errs.String(), "settings changed") {
				t.Errorf("%s said the settings changed:\n%s", tc.name, errs.String())
			}
		})
	}
}
