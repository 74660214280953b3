package cli

import (
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// A re-run above --confirm-above without --yes asks on the terminal when
// there is one: no changes nothing, yes goes ahead.
func TestRerun_TerminalConfirmation(t *testing.T) {
	url := startTestSim(t)
	dir := t.TempDir()
	db, input := filepath.Join(dir, "c.db"), filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 120); err != nil {
		t.Fatal(err)
	}
	if err := runApp([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--quiet"}, io.Discard, io.Discard); err != nil {
		t.Fatalf("run: %v", err)
	}
	var asked []string
	rerun := func(answer bool) (string, error) {
		var stderr syncBuffer
		app := NewApp(Config{Stdout: io.Discard, Stderr: &stderr, Confirm: func(q string) bool { asked = append(asked, q); return answer }})
		err := app.Run([]string{"sawtooth", "rerun", "--db", db, "--from-stage", "aggregate", "--base-url", url, "--quiet"})
		return stderr.String(), err
	}
	out, err := rerun(false)
	var ue *UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("answered no: err = %v, want a usage error saying nothing changed\n%s", err, out)
	}
	if len(asked) != 1 || !strings.HasPrefix(asked[0], "re-run 1") {
		t.Fatalf("asked %q", asked)
	}
	if !strings.Contains(out, "would re-run aggregate for") || !strings.Contains(out, "no API calls") {
		t.Errorf("the plan was not shown before the question:\n%s", out)
	}
	if out, err = rerun(true); err != nil {
		t.Fatalf("answered yes: %v\n%s", err, out)
	}
	if !strings.Contains(out, "re-queued 1") {
		t.Errorf("answered yes but nothing was re-queued:\n%s", out)
	}
}
