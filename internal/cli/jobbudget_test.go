package cli

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunJob_BudgetNeedsPrices: a job whose LLM stage calls a model the
// price table does not know cannot keep a budget (its calls would cost
// zero); the run is refused before the database is created.
func TestRunJob_BudgetNeedsPrices(t *testing.T) {
	url := startTestSim(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte(`{"id":"a","text":"Great app!"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, model string
		budget      []string
		wantRefusal bool
	}{
		{"unpriced model with --budget", "my-tuned-model", []string{"--budget", "1"}, true},
		{"unpriced model with --budget-total", "my-tuned-model", []string{"--budget-total", "1"}, true},
		{"listed model with --budget", "gemini-2.5-flash", []string{"--budget", "1"}, false},
		{"unpriced model without a budget", "my-tuned-model", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := t.TempDir()
			jobFile := filepath.Join(sub, "job.yaml")
			body := "db: job.db\ninput: {path: " + input + "}\nbase_url: " + url + "\nstages:\n" +
				"  - llm:\n      name: classify\n      model: " + tc.model + "\n      output: {label: [bug, praise, other]}\n"
			if err := os.WriteFile(jobFile, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"sawtooth", "run", "-f", jobFile, "--quiet"}, tc.budget...)
			err := runApp(args, io.Discard, io.Discard)
			var ue *UsageError
			refused := errors.As(err, &ue) && strings.Contains(err.Error(), "price table") && strings.Contains(err.Error(), "classify")
			if refused != tc.wantRefusal {
				t.Fatalf("run: %v; want refused=%v", err, tc.wantRefusal)
			}
			_, statErr := os.Stat(filepath.Join(sub, "job.db"))
			if tc.wantRefusal && statErr == nil {
				t.Error("the refused run created its database")
			}
		})
	}
}
