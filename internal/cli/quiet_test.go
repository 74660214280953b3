package cli

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// TestRun_QuietLogsNoProgress runs `run` with stderr a buffer (no
// terminal) and a display clock that jumps a minute at each reading, so a
// progress record is due at every tick of the run: without --quiet they
// come; with it none comes, nor any info record, while warnings (a budget
// stop's "stage parked") and the summary on stdout still do.
func TestRun_QuietLogsNoProgress(t *testing.T) {
	url := startTestSim(t)
	input := filepath.Join(t.TempDir(), "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 12); err != nil {
		t.Fatal(err)
	}
	var readings atomic.Int64
	base := time.Date(2026, 12, 4, 2, 30, 0, 0, time.UTC)
	now := func() time.Time { return base.Add(time.Duration(readings.Add(1)) * time.Minute) }
	progress := regexp.MustCompile(`msg=progress|"msg":"progress"`)
	info := regexp.MustCompile(`level=INFO|"level":"INFO"`)
	warn := regexp.MustCompile(`level=WARN msg="stage parked"|"level":"WARN","msg":"stage parked"`)
	cases := []struct {
		name     string
		args     []string
		job      bool // run -f JOB.yaml (the README's cron line)
		quiet    bool
		wantWarn bool
	}{
		{name: "without --quiet the records come", args: nil},
		{name: "--quiet", args: []string{"--quiet"}, quiet: true},
		{name: "--no-progress --log-format json", args: []string{"--no-progress", "--log-format", "json"}, quiet: true},
		{name: "--quiet wins over --log-level debug", args: []string{"--quiet", "--log-level", "debug"}, quiet: true},
		{name: "--quiet keeps warnings", args: []string{"--quiet", "--budget", "0.000001"}, quiet: true, wantWarn: true},
		{name: "job file without --quiet", job: true},
		{name: "job file --quiet", args: []string{"--quiet"}, job: true, quiet: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"sawtooth", "run", "--db", filepath.Join(dir, "run.db"), "--input", input, "--base-url", url}
			if tc.job {
				jobFile := filepath.Join(dir, "job.yaml")
				body := "db: job.db\ninput: {path: " + input + "}\nbase_url: " + url + "\nstages:\n" +
					"  - llm:\n      name: classify\n      output: {label: [bug, praise, other]}\n"
				if err := os.WriteFile(jobFile, []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
				args = []string{"sawtooth", "run", "-f", jobFile}
			}
			var stdout, stderr syncBuffer
			app := NewApp(Config{Stdout: &stdout, Stderr: &stderr, Now: now})
			err := app.Run(append(args, tc.args...))
			if tc.wantWarn {
				if !errors.Is(err, pipeline.ErrStopped) {
					t.Fatalf("run with a budget below one call: %v, want a budget stop", err)
				}
				if !warn.MatchString(stderr.String()) {
					t.Errorf("--quiet hid the warning of the budget stop; stderr:\n%s", stderr.String())
				}
			} else if err != nil {
				t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
			}
			if !strings.Contains(stdout.String(), "classify") {
				t.Errorf("no run summary on stdout:\n%s", stdout.String())
			}
			gotProgress := progress.MatchString(stderr.String())
			switch {
			case tc.quiet && gotProgress:
				t.Errorf("progress records with %v:\n%s", tc.args, stderr.String())
			case tc.quiet && info.MatchString(stderr.String()):
				t.Errorf("info records with %v:\n%s", tc.args, stderr.String())
			case !tc.quiet && !gotProgress:
				t.Errorf("no progress record without --quiet (the clock makes one due at every tick):\n%s", stderr.String())
			}
		})
	}
}
