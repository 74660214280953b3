package cli

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerify_JobWithoutAggregate: a job whose last stage is an LLM stage
// of its own (no aggregate stage) keeps its tally of that stage's labels;
// verify checks it against those, not against a classify stage the job
// does not have.
func TestVerify_JobWithoutAggregate(t *testing.T) {
	url := startTestSim(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 12); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "job.yaml")
	body := "db: job.db\ninput: {path: items.jsonl}\nbase_url: " + url + "\nstages:\n  - sanitize: {}\n" +
		"  - llm:\n      name: triage\n      output: {label: [bug, praise, other]}\n"
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := runApp([]string{"sawtooth", "run", "-f", f, "--quiet"}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	if err := runApp([]string{"sawtooth", "verify", "--db", filepath.Join(dir, "job.db")}, &out, io.Discard); err != nil || !strings.Contains(out.String(), "consistent") {
		t.Errorf("verify: %v\n%s", err, out.String())
	}
}
