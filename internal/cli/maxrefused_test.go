package cli

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestRun_MaxRefused: --max-refused 0 means never stop for refusals (a
// run on a healthy endpoint goes through); a negative duration is a
// usage error naming the flag and what it takes.
func TestRun_MaxRefused(t *testing.T) {
	url := startTestSim(t)
	t.Setenv("GEMINI_API_KEY", geminisim.DefaultAPIKey)
	for _, tc := range []struct {
		name, value string
		wantUsage   string // "" for a run that completes
	}{
		{"zero means never", "0", ""},
		{"negative is refused", "-1s", "--max-refused: want a duration, or 0 to never stop for refusals"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			input := filepath.Join(dir, "items.jsonl")
			if _, err := writeFirstLines(input, testReviews(t), 3); err != nil {
				t.Fatal(err)
			}
			var stderr syncBuffer
			err := runApp([]string{"sawtooth", "run", "--db", filepath.Join(dir, "r.db"), "--input", input, "--base-url", url, "--quiet", "--max-refused", tc.value}, &syncBuffer{}, &stderr)
			var ue *UsageError
			switch {
			case tc.wantUsage == "" && err != nil:
				t.Fatalf("run: %v\n%s", err, stderr.String())
			case tc.wantUsage != "" && (!errors.As(err, &ue) || !strings.Contains(err.Error(), tc.wantUsage)):
				t.Fatalf("run: %v, want a usage error saying %q", err, tc.wantUsage)
			}
		})
	}
}
