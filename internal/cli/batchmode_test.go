package cli

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// batchSim serves a simulator with bc as its Batch API.
func batchSim(t *testing.T, bc geminisim.BatchConfig) (*geminisim.Server, string) {
	t.Helper()
	sim := geminisim.New(geminisim.Config{Seed: 3, Batch: bc})
	url, err := sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	t.Setenv("GEMINI_API_KEY", geminisim.DefaultAPIKey)
	return sim, url
}

func TestRun_Modes(t *testing.T) {
	cases := []struct {
		name string
		bc   geminisim.BatchConfig
		mode string
		// wantQueued is classify's queue after the run; wantOnline whether
		// classify called generateContent.
		wantQueued  int
		wantOnline  bool
		wantJobs    string
		wantStopped bool
		// deadline is --batch-deadline: short only where the deadline is
		// the case (a stuck job); elsewhere a job that outlived it on a
		// loaded machine would be cancelled, not end as the case says.
		deadline string
	}{
		{"batch", geminisim.BatchConfig{Shuffle: true}, "batch", 0, false, "SUCCEEDED (closed)", false, "1h"},
		{"auto drains a stuck job online", geminisim.BatchConfig{Fates: []geminisim.Fate{geminisim.FateStuck}}, "auto", 0, true, "CANCELLED (closed)", false, "300ms"},
		{"batch leaves an expired job's items queued", geminisim.BatchConfig{Fates: []geminisim.Fate{geminisim.FateExpire, geminisim.FateExpire, geminisim.FateExpire}, Expire: 100 * time.Millisecond}, "batch", 60, false, "EXPIRED (closed)", true, "1h"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sim, url := batchSim(t, tc.bc)
			dir := t.TempDir()
			db, input := filepath.Join(dir, "b.db"), filepath.Join(dir, "items.jsonl")
			if _, err := writeFirstLines(input, testReviews(t), 60); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr syncBuffer
			err := runApp([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--quiet",
				"--mode", tc.mode, "--batch-deadline", tc.deadline, "--batch-poll", "20ms"}, &stdout, &stderr)
			if stopped := errors.Is(err, pipeline.ErrStopped); stopped != tc.wantStopped || (err != nil && !stopped) {
				t.Fatalf("run: %v (want stopped early: %v)\n%s", err, tc.wantStopped, stderr.String())
			}
			if online := sim.Stats().Calls > 0; online != tc.wantOnline {
				t.Errorf("online calls made: %v, want %v", online, tc.wantOnline)
			}
			var st struct {
				Counts struct {
					Stages []struct {
						Stage  string `json:"stage"`
						Queued int    `json:"queued"`
					} `json:"stages"`
				} `json:"counts"`
				Batch *struct {
					Jobs     int `json:"jobs"`
					Answered int `json:"answered"`
				} `json:"batch"`
			}
			var out syncBuffer
			if err := runApp([]string{"sawtooth", "status", "--db", db, "--json"}, &out, &stderr); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(out.String()), &st); err != nil || st.Batch == nil || st.Batch.Jobs == 0 {
				t.Fatalf("status --json: %v\n%s", err, out.String())
			}
			for _, s := range st.Counts.Stages {
				if s.Stage == "classify" && s.Queued != tc.wantQueued {
					t.Errorf("classify queue %d, want %d", s.Queued, tc.wantQueued)
				}
			}
			var list syncBuffer
			if err := runApp([]string{"sawtooth", "batch", "list", "--db", db}, &list, &stderr); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(list.String(), tc.wantJobs) {
				t.Errorf("batch list:\n%s\nwant a job %s", list.String(), tc.wantJobs)
			}
			for name, n := range sim.BatchStats().ByDisplayName {
				if n != 1 {
					t.Errorf("job %s created %d times", name, n)
				}
			}
		})
	}
}

func TestBatchCommand_Errors(t *testing.T) {
	_, url := batchSim(t, geminisim.BatchConfig{})
	dir := t.TempDir()
	db, input := filepath.Join(dir, "b.db"), filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 5); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	err := runApp([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--quiet", "--mode", "nightly"}, &stdout, &stderr)
	var ue *UsageError
	if !errors.As(err, &ue) {
		t.Errorf("--mode nightly: %v, want a usage error", err)
	}
	if err := runApp([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--quiet", "--mode", "batch", "--batch-poll", "20ms"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"batch", "show", "--db", db, "x"},
		{"batch", "show", "--db", db},
		{"batch", "cancel", "--db", db, "0"},
	} {
		if err := runApp(append([]string{"sawtooth"}, args...), &stdout, &stderr); !errors.As(err, &ue) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	if err := runApp([]string{"sawtooth", "batch", "show", "--db", db, "7"}, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "batch list") {
		t.Errorf("unknown job: %v", err)
	}
	var out syncBuffer
	if err := runApp([]string{"sawtooth", "batch", "cancel", "--db", db, "1"}, &out, &stderr); err != nil || !strings.Contains(stderr.String(), "already closed") {
		t.Errorf("cancel of a closed job: %v\n%s", err, stderr.String())
	}
}
