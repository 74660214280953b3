package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRun_CacheFlags: a second run with new ids asking the same questions
// answers them from the cache; --no-cache asks again; a re-run reuses the
// answers unless --no-cache, and after a prompt change asks each distinct
// question once; a budget without a price is a usage error.
func TestRun_CacheFlags(t *testing.T) {
	url := startTestSim(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "c.db")
	texts := []string{"Great app!", "Doesn't work", "Too many ads", "Please add dark mode"}
	batch := 0
	input := func() string {
		t.Helper()
		batch++
		var b strings.Builder
		for i, text := range texts {
			line, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("b%d-%d", batch, i), "text": text, "app": "notes", "rating": 4, "date": "2026-11-02"})
			b.Write(line)
			b.WriteByte('\n')
		}
		path := filepath.Join(dir, fmt.Sprintf("in%d.jsonl", batch))
		if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	classify := func(args ...string) (paid, cached int64) {
		t.Helper()
		var out syncBuffer
		if err := runApp(append([]string{"sawtooth"}, append(args, "--db", db, "--base-url", url, "--quiet", "--json")...), &out, io.Discard); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		var sum struct {
			Stages map[string]struct {
				Paid   int64 `json:"paid_calls"`
				Cached int64 `json:"cached"`
			} `json:"stages"`
		}
		if err := json.Unmarshal([]byte(out.String()), &sum); err != nil {
			t.Fatalf("%v: summary: %v\n%s", args, err, out.String())
		}
		return sum.Stages["classify"].Paid, sum.Stages["classify"].Cached
	}
	promptFile := filepath.Join(dir, "v2.tmpl")
	if err := os.WriteFile(promptFile, []byte("Review: {{.Text}}"), 0o600); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name               string
		args               []string
		wantPaid, wantHits int64
	}{
		{"first run pays", []string{"run", "--input", input()}, 4, 0},
		{"new ids, same questions: cached", []string{"run", "--input", input()}, 0, 4},
		{"--no-cache asks again", []string{"run", "--no-cache", "--input", input()}, 4, 0},
		{"rerun with the same settings reuses the answers", []string{"rerun", "--from-stage", "classify", "--yes"}, 0, 12},
		{"rerun --no-cache asks again", []string{"rerun", "--from-stage", "classify", "--yes", "--no-cache"}, 12, 0},
		{"rerun with a new prompt asks each question once", []string{"rerun", "--from-stage", "classify", "--yes", "--rerun-changed", "--prompt-file", promptFile}, 4, 8},
	}
	for _, s := range steps {
		paid, cached := classify(s.args...)
		if paid != s.wantPaid || cached != s.wantHits {
			t.Errorf("%s: %d paid, %d cached; want %d and %d", s.name, paid, cached, s.wantPaid, s.wantHits)
		}
	}
	err := runApp([]string{"sawtooth", "run", "--db", db, "--base-url", url, "--quiet", "--model", "my-tuned-model", "--budget", "1"}, io.Discard, io.Discard)
	var ue *UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--price-in") {
		t.Errorf("--budget with an unpriced model: %v, want a usage error naming --price-in", err)
	}
}
