package cli

import (
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// planCalls runs plan -f and returns its calls per stage, and its output.
func planCalls(t *testing.T, jobFile string) (map[string]int, string) {
	t.Helper()
	var out, errOut syncBuffer
	if err := runApp([]string{"sawtooth", "plan", "-f", jobFile}, &out, &errOut); err != nil {
		t.Fatalf("plan: %v\n%s", err, errOut.String())
	}
	calls := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^\s*(\w+)\s+gemini-\S+\s+(\d+)\s+(\d+)\s`).FindAllStringSubmatch(out.String(), -1) {
		calls[m[1]], _ = strconv.Atoi(m[3])
	}
	return calls, out.String()
}

// TestPlan_PricesWhatTheRunPays: against a job that already ran, plan
// prices only the work the run then does, call for call: an added stage
// only for the items its when: lets in, a changed prompt as
// --rerun-changed re-runs it (saying the run refuses it without), and new
// input items only.
func TestPlan_PricesWhatTheRunPays(t *testing.T) {
	sim, url := jobSim(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 150); err != nil {
		t.Fatal(err)
	}
	jobFile := writeJob(t, dir, consentJob, url)
	if err := runApp([]string{"sawtooth", "run", "-f", jobFile, "--quiet"}, io.Discard, io.Discard); err != nil {
		t.Fatalf("first run: %v", err)
	}
	// tone reads classify's answer; summary reads only the text, so a
	// re-run of tone finds its questions answered.
	grown := strings.Replace(consentJob, "  - aggregate: {}", "  - llm:\n      name: tone\n      when: 'classify.label == \"bug\"'\n      prompt: 'Tone: {{.Text}}'\n      output: {label: [calm, angry]}\n"+
		"  - llm:\n      name: summary\n      prompt: 'Summarise: {{.Text}}'\n      output: {label: [short, long]}\n  - aggregate: {}", 1)
	for _, tc := range []struct {
		name  string
		job   string
		lines int      // the input's first lines
		args  []string // the run's flags after -f
		want  []string // in plan's output
		// open is the items whose calls at a later stage the plan can only
		// estimate (new items: tone reads classify's answers to come).
		open int
	}{
		{"added stage with a when:", grown, 150, nil, []string{"stage tone, summary added"}, 0},
		{"changed prompt", strings.Replace(grown, "'Tone: {{.Text}}'", "'The tone of: {{.Text}}'", 1), 150, []string{"--rerun-changed", "--yes"},
			[]string{"tone.prompt: Tone: {{.Text}} -> The tone of: {{.Text}}", "refuses this job", "--rerun-changed re-runs tone, summary, aggregate for"}, 0},
		{"new items", strings.Replace(grown, "'Tone: {{.Text}}'", "'The tone of: {{.Text}}'", 1), 190, nil, []string{"40 items new"}, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeJob(t, dir, tc.job, url)
			if _, err := writeFirstLines(input, testReviews(t), tc.lines); err != nil {
				t.Fatal(err)
			}
			planned, out := planCalls(t, jobFile)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("plan lacks %q:\n%s", w, out)
				}
			}
			total := 0
			for _, n := range planned {
				total += n
			}
			before := sim.Stats().Calls
			if err := runApp(append([]string{"sawtooth", "run", "-f", jobFile, "--quiet"}, tc.args...), io.Discard, io.Discard); err != nil {
				t.Fatalf("run: %v", err)
			}
			paid := int(sim.Stats().Calls - before)
			switch {
			case tc.open == 0 && (paid != total || paid == 0):
				t.Errorf("plan priced %d calls (%v), the run paid %d\n%s", total, planned, paid, out)
			case tc.open > 0 && (paid < total-planned["tone"] || paid > total-planned["tone"]+tc.open):
				t.Errorf("plan priced %d calls (%v), the run paid %d: not those of classify and summary and up to the %d items tone may send\n%s", total, planned, paid, tc.open, out)
			}
		})
	}
}
