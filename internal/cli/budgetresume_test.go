package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// After a stop, the resume hint keeps the caps the run was given (a run
// resumed without them would spend with no cap): --budget as it was, and
// --budget-total raised above what was spent when it is the cap that
// stopped the run; the hinted command then resumes. Flags and job file
// alike.
func TestRun_BudgetStopResumeHint(t *testing.T) {
	url := startTestSim(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 12); err != nil {
		t.Fatal(err)
	}
	jobFile := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(jobFile, []byte("db: job.db\ninput: {path: "+input+"}\nbase_url: "+url+"\nstages:\n"+
		"  - llm:\n      name: classify\n      output: {label: [bug, praise, other]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		job  bool
		caps []string
		// hint matches the resume command; its group 1, if any, is the
		// raised --budget-total.
		hint string
	}{
		{name: "--budget", caps: []string{"--budget", "0.000001"}, hint: `sawtooth run --db \S+ --budget 0\.000001\n`},
		{name: "--budget-total", caps: []string{"--budget-total", "0.0003"}, hint: `sawtooth run --db \S+ --budget-total ([0-9.]+)\n`},
		{name: "both, the run's cap reached", caps: []string{"--budget", "0.000001", "--budget-total", "5"}, hint: `sawtooth run --db \S+ --budget 0\.000001 --budget-total 5\n`},
		{name: "job file --budget", job: true, caps: []string{"--budget", "0.000001"}, hint: `sawtooth run --db \S+ --budget 0\.000001\n`},
		{name: "job file --budget-total", job: true, caps: []string{"--budget-total", "0.0003"}, hint: `sawtooth run --db \S+ --budget-total ([0-9.]+)\n`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := t.TempDir()
			db := filepath.Join(sub, "run.db")
			args := []string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--quiet"}
			if tt.job {
				args = []string{"sawtooth", "run", "-f", jobFile, "--db", db, "--quiet"}
			}
			var stdout, stderr syncBuffer
			err := runApp(append(args, tt.caps...), &stdout, &stderr)
			var stop *pipeline.BudgetStop
			if !errors.As(err, &stop) {
				t.Fatalf("run: %v, want a budget stop\nstderr:\n%s", err, stderr.String())
			}
			m := regexp.MustCompile(`To resume.*:\n  ` + tt.hint).FindStringSubmatch(stderr.String())
			if m == nil {
				t.Fatalf("no resume hint matching %q:\n%s", tt.hint, stderr.String())
			}
			if len(m) < 2 {
				return
			}
			raised, _ := strconv.ParseFloat(m[1], 64)
			if raised <= stop.SpentUSD || raised <= 0.0003 {
				t.Fatalf("--budget-total %s hinted, not above the cap 0.0003 and the $%.6f spent", m[1], stop.SpentUSD)
			}
			resume := []string{"sawtooth", "run", "--db", db, "--budget-total", m[1], "--quiet"}
			if !tt.job {
				resume = append(resume, "--base-url", url)
			}
			if err := runApp(resume, &stdout, &stderr); err != nil {
				t.Fatalf("the hinted command %v: %v\nstderr:\n%s", resume, err, stderr.String())
			}
		})
	}
}

// The hinted command for each way a run can stop with caps given.
func TestPrintResumeHint(t *testing.T) {
	quota := fmt.Errorf("quota exhausted: %w", pipeline.ErrStopped)
	tests := []struct {
		name                string
		budget, budgetTotal float64
		err                 error
		want                string
	}{
		{"no cap", 0, 0, quota, "sawtooth run --db 'my db.db'\n"},
		{"caps kept through another stop", 0.5, 5, quota, "sawtooth run --db 'my db.db' --budget 0.5 --budget-total 5\n"},
		{"the run's cap reached", 0.5, 0, &pipeline.BudgetStop{SpentUSD: 0.49, LeftUSD: 3}, "sawtooth run --db 'my db.db' --budget 0.5\n"},
		{"the total reached: the items left on top", 0, 5, &pipeline.BudgetStop{Total: true, SpentUSD: 4.98, LeftUSD: 1.234}, "sawtooth run --db 'my db.db' --budget-total 6.24\n"},
		{"the total reached, nothing left to price: a cent more", 0, 5, &pipeline.BudgetStop{Total: true, SpentUSD: 4.98, LeftUSD: 0}, "sawtooth run --db 'my db.db' --budget-total 5.01\n"},
		{"the total reached, the items left unknown", 0, 5, &pipeline.BudgetStop{Total: true, SpentUSD: 4.98, LeftUSD: -1}, "sawtooth run --db 'my db.db' --budget-total USD\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			printResumeHint(&b, "my db.db", tt.budget, tt.budgetTotal, tt.err)
			if !strings.HasSuffix(b.String(), ":\n  "+tt.want) {
				t.Errorf("hint:\n%s\nwant the command %q", b.String(), tt.want)
			}
		})
	}
}
