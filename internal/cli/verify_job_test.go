package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerify_JobAggregate: verify recomputes a job's aggregate with the
// job's own settings (group_by, rating, date, count), as the run folded
// it, and finds the database consistent.
func TestVerify_JobAggregate(t *testing.T) {
	url := startTestSim(t)
	dir := t.TempDir()
	var in strings.Builder
	for i, text := range []string{"Great app!", "It crashes on start", "Too many ads", "Great app!"} {
		fmt.Fprintf(&in, `{"id":"r%d","body":%q,"shop":"s%d","stars":%d,"day":"2026-11-0%d"}`+"\n", i, text, i%2, i+1, i+1)
	}
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte(in.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	const two = "  - llm:\n      name: classify\n      output: {label: [bug, praise, other]}\n" +
		"  - llm:\n      name: tone\n      output: {label: [calm, angry]}\n"
	for _, tc := range []struct{ name, llm, aggregate string }{
		{"defaults", two, "{}"},
		{"own fields", two, "{group_by: [shop, month], rating: stars, date: day}"},
		{"another stage's field", two, "{group_by: [shop], rating: stars, count: tone.label}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := t.TempDir()
			jobFile := filepath.Join(sub, "job.yaml")
			body := "db: job.db\ninput: {path: " + input + ", text: body}\nbase_url: " + url + "\nstages:\n" +
				tc.llm + "  - aggregate: " + tc.aggregate + "\n"
			if err := os.WriteFile(jobFile, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := runApp([]string{"sawtooth", "run", "-f", jobFile, "--quiet"}, io.Discard, io.Discard); err != nil {
				t.Fatalf("run: %v", err)
			}
			var out syncBuffer
			if err := runApp([]string{"sawtooth", "verify", "--db", filepath.Join(sub, "job.db")}, &out, io.Discard); err != nil {
				t.Errorf("verify: %v\n%s", err, out.String())
			}
		})
	}
}
