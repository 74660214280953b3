package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A --prompt-file is checked on the input's first item before anything
// is created or sent, as a job file's prompt is: a template reading a
// field no item has dead-lettered the first items at classify and left a
// database behind.
func TestRun_flagsPromptCheckedOnASample(t *testing.T) {
	sim, url := jobSim(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 5); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, prompt, want string
	}{
		{"a field the template has not", "Classify {{.Nope}}", `--prompt-file PROMPT: the template reads {{.Nope}}: there is no "Nope"`},
		{"an input field", "Classify {{.Fields.app}}: {{.Text}}", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prompt := filepath.Join(t.TempDir(), "p.tmpl")
			if err := os.WriteFile(prompt, []byte(tc.prompt), 0o600); err != nil {
				t.Fatal(err)
			}
			db := filepath.Join(t.TempDir(), "run.db")
			before := sim.Stats().Calls
			var out, errs syncBuffer
			err := runApp([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--quiet", "--prompt-file", prompt}, &out, &errs)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("run: %v\n%s", err, errs.String())
				}
				return
			}
			var ue *UsageError
			if want := strings.Replace(tc.want, "PROMPT", prompt, 1); !errors.As(err, &ue) || !strings.Contains(err.Error(), want) {
				t.Fatalf("run: %v, want a usage error saying %q", err, want)
			}
			if _, err := os.Stat(db); !os.IsNotExist(err) {
				t.Errorf("the refused run left %s (%v)", db, err)
			}
			if paid := sim.Stats().Calls - before; paid != 0 {
				t.Errorf("the refused run made %d calls", paid)
			}
		})
	}
}
