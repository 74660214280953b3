package cli

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestRun_BatchRunRecordIsTheRun: a batch run is one run record that
// says what the run was: its duration spans the batch jobs (a job that
// runs for 300 ms cannot make a run of 0 s), its tokens are the jobs'
// answers' (not 0 beside their cost), and its status is how it ended: a
// run that left items queued (exit 3) reads stopped, not complete.
func TestRun_BatchRunRecordIsTheRun(t *testing.T) {
	const running = 300 * time.Millisecond
	cases := []struct {
		name        string
		bc          geminisim.BatchConfig
		wantStatus  string
		wantStopped bool
	}{
		{"complete", geminisim.BatchConfig{Running: running}, "complete", false},
		{"items left queued", geminisim.BatchConfig{Running: running, Fates: []geminisim.Fate{geminisim.FateFail, geminisim.FateFail, geminisim.FateFail}}, "stopped", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, url := batchSim(t, tc.bc)
			dir := t.TempDir()
			db, input := filepath.Join(dir, "b.db"), filepath.Join(dir, "items.jsonl")
			if _, err := writeFirstLines(input, testReviews(t), 30); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr syncBuffer
			err := runApp([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--quiet",
				"--mode", "batch", "--batch-poll", "20ms"}, &stdout, &stderr)
			if stopped := errors.Is(err, pipeline.ErrStopped); stopped != tc.wantStopped || (err != nil && !stopped) {
				t.Fatalf("run: %v (want stopped early: %v)\n%s", err, tc.wantStopped, stderr.String())
			}
			if !strings.Contains(stdout.String(), ": "+tc.wantStatus+" in ") {
				t.Errorf("the summary does not say %q:\n%s", tc.wantStatus, stdout.String())
			}
			st := statusOf(t, db)
			if len(st.LastRuns) != 1 {
				t.Fatalf("%d run records for one command, want 1: %+v", len(st.LastRuns), st.LastRuns)
			}
			r := st.LastRuns[0]
			if r.Status != tc.wantStatus {
				t.Errorf("the run reads %q (%s), want %q", r.Status, r.Message, tc.wantStatus)
			}
			if took := r.Ended.Sub(r.Started); took < running {
				t.Errorf("the run took %s by its record, less than its batch job ran (%s)", took, running)
			}
			if tc.wantStopped {
				if !strings.Contains(r.Message, "still queued") {
					t.Errorf("the stopped run's message %q does not say why", r.Message)
				}
				return // its jobs failed: nothing answered, nothing billed
			}
			c := r.Stages["classify"]
			if c == nil || c.Usage.PromptTokens == 0 || c.Usage.CandidateTokens == 0 {
				t.Fatalf("classify's figures in the run record: %+v, want the batch answers' tokens", c)
			}
			if st.Usage != c.Usage.Add(r.Stages["sanitize"].Usage).Add(r.Stages["aggregate"].Usage) {
				t.Errorf("status tokens %+v, the run's %+v", st.Usage, c.Usage)
			}
			if spent := st.Money["classify"].SpentUSD; spent == 0 || st.CostUSD != spent || st.Money["classify"].Paid == 0 {
				t.Errorf("status cost $%v, the ledger's $%v (%d paid answers): want one figure, the ledger's, and the batch answers counted paid",
					st.CostUSD, spent, st.Money["classify"].Paid)
			}
		})
	}
}
