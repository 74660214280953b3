package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/internal/job"
)

// A job file's db, input and prompt file are relative paths, and the
// run starts in another directory. The job `job show` prints, saved in
// any directory (the job's own too), names the same database and files:
// run -f with it pays for no item again. It printed db relative to where
// the run started and the rest relative to the job file, so saved beside
// the job it named sub/sub/job.db, and saved elsewhere a new database.
func TestJobShow_runsTheSameJobFromAnyDirectory(t *testing.T) {
	sim, url := jobSim(t)
	root := t.TempDir()
	sub := filepath.Join(root, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := writeFirstLines(filepath.Join(sub, "items.jsonl"), testReviews(t), 6); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "p.tmpl"), []byte("Classify: {{.Text}}"), 0o600); err != nil {
		t.Fatal(err)
	}
	jobYAML := "db: job.db\ninput: {path: items.jsonl}\nbase_url: " + url + "\nstages:\n  - sanitize: {}\n" +
		"  - llm: {name: classify, prompt_file: p.tmpl, output: {label: [bug, other]}}\n"
	if err := os.WriteFile(filepath.Join(sub, "job.yaml"), []byte(jobYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(root)
	var out, errs syncBuffer
	if err := runApp([]string{"sawtooth", "run", "-f", "sub/job.yaml", "--quiet"}, &out, &errs); err != nil {
		t.Fatalf("run -f sub/job.yaml: %v\n%s", err, errs.String())
	}
	shown := shownJob(t, "sub/job.db")
	paid := sim.Stats().Calls

	for _, tc := range []struct{ name, dir string }{
		{"beside the job", sub},
		{"in another directory", t.TempDir()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(tc.dir, "shown.yaml")
			if err := os.WriteFile(file, []byte(shown), 0o600); err != nil {
				t.Fatal(err)
			}
			j, err := job.Load(file)
			if err != nil {
				t.Fatalf("the shown job does not load: %v\n%s", err, shown)
			}
			if want := filepath.Join(root, "sub", "job.db"); j.DB != want {
				t.Errorf("the shown job's db is %s, want %s", j.DB, want)
			}
			var out, errs syncBuffer
			if err := runApp([]string{"sawtooth", "run", "-f", file, "--quiet"}, &out, &errs); err != nil {
				t.Fatalf("run -f with the shown job: %v\n%s", err, errs.String())
			}
			if more := sim.Stats().Calls - paid; more != 0 {
				t.Errorf("run -f with the shown job paid %d calls again\n%s", more, errs.String())
			}
			if strings.Contains(errs.String(), "ingested") && !strings.Contains(errs.String(), " 0 new") {
				t.Errorf("the shown job ingested new items:\n%s", errs.String())
			}
		})
	}
}
