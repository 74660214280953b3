package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestPlan_ImplicitCache: plan says whether each LLM stage's shared
// prompt prefix reaches the model's implicit-caching minimum and what a
// hit saves; a prompt that puts the shared text after the item is told
// to move it.
func TestPlan_ImplicitCache(t *testing.T) {
	_, url := jobSim(t)
	defs := strings.Repeat("A bug is a defect the user hit; pricing is about cost; ux is about the layout. ", 60) // ~1,200 tokens
	for _, tc := range []struct {
		name, prompt string
		want         []string
	}{
		{"the default prompt is short", "'{{.Text}}'", []string{"implicit cache, classify (gemini-2.5-flash): the shared prompt prefix", "under the model's 1,024-token minimum: no call will be billed at the cached rate"}},
		{"shared text first", "'" + defs + "Review: {{.Text}}'", []string{"over the model's 1,024-token minimum: a cache hit bills them at the cached rate, saving about $0.000", "calls planned"}},
		{"shared text after the item", "'Review: {{.Text}} " + defs + "'", []string{"under the model's 1,024-token minimum", "puts about 1,1", "tokens of shared text after the item: move them before it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := writeFirstLines(filepath.Join(dir, "items.jsonl"), testReviews(t), 150); err != nil {
				t.Fatal(err)
			}
			jobFile := writeJob(t, dir, strings.Replace(consentJob, "'Classify this review: {{.Text}}'", tc.prompt, 1), url)
			_, out := planCalls(t, jobFile)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("plan lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
