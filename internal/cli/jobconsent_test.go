package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// jobSim serves a simulator with no quota and no faults: every call it
// counts is one the run paid for.
func jobSim(t testing.TB) (*geminisim.Server, string) {
	t.Helper()
	sim := geminisim.New(geminisim.Config{Seed: 3})
	url, err := sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	t.Setenv("GEMINI_API_KEY", geminisim.DefaultAPIKey)
	return sim, url
}

// consentJob is a job of one LLM stage over the first reviews; its
// prompt is replaced to change the stage.
const consentJob = `db: job.db
input: {path: items.jsonl}
base_url: URL
stages:
  - llm:
      name: classify
      prompt: 'Classify this review: {{.Text}}'
      output: {label: [bug, pricing, feature_request, ux, praise, other]}
  - aggregate: {}
`

// writeJob writes body (URL replaced by url) as dir/job.yaml.
func writeJob(t testing.TB, dir, body, url string) string {
	t.Helper()
	path := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(body, "URL", url)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func readBytes(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRunJob_Consent: a job file's run (and a resume of the stored job)
// honours --dry-run, --confirm-above and --yes as a run from flags does:
// a dry run pays nothing and writes nothing, a re-run above the threshold
// with no terminal and no --yes stops with a usage error (exit 2) before
// paying or writing, and --yes pays.
func TestRunJob_Consent(t *testing.T) {
	sim, url := jobSim(t)
	dir := t.TempDir()
	const items = 150
	if _, err := writeFirstLines(filepath.Join(dir, "items.jsonl"), testReviews(t), items); err != nil {
		t.Fatal(err)
	}
	more := filepath.Join(dir, "more.jsonl")
	if err := os.WriteFile(more, []byte(`{"id":"n1","text":"crashes on start","app":"a"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	jobFile := writeJob(t, dir, consentJob, url)
	db := filepath.Join(dir, "job.db")
	if err := runApp([]string{"sawtooth", "run", "-f", jobFile, "--quiet"}, &syncBuffer{}, &syncBuffer{}); err != nil {
		t.Fatalf("first run: %v", err)
	}
	writeJob(t, dir, strings.Replace(consentJob, "Classify this review:", "Sort this review:", 1), url)
	grown := strings.Replace(consentJob, "  - aggregate: {}", "  - llm:\n      name: tone\n      prompt: 'Tone: {{.Text}}'\n      output: {label: [calm, angry]}\n  - aggregate: {}", 1)

	var dryRun string // the first case's stdout
	for _, tc := range []struct {
		name string
		job  string // the job file's body for this case ("": the changed prompt)
		args []string
		// want: the error is a usage error (exit 2); out, stdout holds it.
		usage bool
		out   string
	}{
		{"changed prompt, dry run", "", []string{"run", "-f", jobFile, "--rerun-changed", "--dry-run"}, false, "would re-run classify, aggregate for 150 items: classify "},
		{"changed prompt, above --confirm-above", "", []string{"run", "-f", jobFile, "--rerun-changed"}, true, ""},
		{"changed prompt, above a lower --confirm-above", "", []string{"run", "-f", jobFile, "--rerun-changed", "--confirm-above", "10"}, true, ""},
		{"changed prompt, dry run without --rerun-changed", "", []string{"run", "-f", jobFile, "--dry-run"}, true, ""},
		{"added stage, dry run", grown, []string{"run", "-f", jobFile, "--dry-run"}, false, "stage tone added"},
		{"stored job, dry run", "", []string{"run", "--db", db, "--input", more, "--dry-run"}, false, "the input adds 1 new item"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.job != "" {
				writeJob(t, dir, tc.job, url)
				defer writeJob(t, dir, strings.Replace(consentJob, "Classify this review:", "Sort this review:", 1), url)
			}
			before, calls := readBytes(t, db), sim.Stats().Calls
			var stdout, stderr syncBuffer
			err := runApp(append([]string{"sawtooth"}, append(tc.args, "--quiet")...), &stdout, &stderr)
			var ue *UsageError
			switch {
			case tc.usage && (!errors.As(err, &ue) || !strings.Contains(err.Error(), "nothing was changed")):
				t.Errorf("err = %v, want a usage error (exit 2) saying nothing was changed\n%s", err, stderr.String())
			case !tc.usage && err != nil:
				t.Errorf("err = %v\n%s", err, stderr.String())
			}
			if dryRun == "" {
				dryRun = stdout.String()
			}
			if !strings.Contains(stdout.String(), tc.out) {
				t.Errorf("stdout lacks %q:\n%s", tc.out, stdout.String())
			}
			if paid := sim.Stats().Calls - calls; paid != 0 {
				t.Errorf("paid %d calls, want 0", paid)
			}
			if !bytes.Equal(readBytes(t, db), before) {
				t.Errorf("the database changed")
			}
		})
	}

	calls := sim.Stats().Calls
	if err := runApp([]string{"sawtooth", "run", "-f", jobFile, "--rerun-changed", "--yes", "--quiet"}, &syncBuffer{}, &syncBuffer{}); err != nil {
		t.Fatalf("--rerun-changed --yes: %v", err)
	}
	// The dry run said what the run then paid (reviews asking the same
	// question share one answer).
	m := regexp.MustCompile(`would re-run classify, aggregate for \d+ items: classify (\d+) calls`).FindStringSubmatch(dryRun)
	if m == nil {
		t.Fatalf("the dry run named no calls:\n%s", dryRun)
	}
	if paid := sim.Stats().Calls - calls; strconv.FormatInt(paid, 10) != m[1] || paid <= 100 {
		t.Errorf("--rerun-changed --yes paid %d calls; the dry run said %s", paid, m[1])
	}
}
