package cli

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestRunJob_BatchOneAnswer: asking for batch jobs with a job file, by
// its `mode: batch` or by --mode batch|auto or a --batch-* flag beside
// it, gets one answer on every path (batch runs only for the classify
// preset, and how to ask for it), never a message pointing to the other
// path.
func TestRunJob_BatchOneAnswer(t *testing.T) {
	url := startTestSim(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte(`{"id":"a","text":"Great app!"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	job := func(t *testing.T, mode string) string {
		t.Helper()
		f := filepath.Join(t.TempDir(), "job.yaml")
		body := "db: job.db\ninput: {path: " + input + "}\nbase_url: " + url + "\nstages:\n" +
			"  - llm:\n      name: classify\n      output: {label: [bug, praise, other]}\n" + mode
		if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, tc := range []struct {
		name, mode string
		flags      []string
		want       string
	}{
		{"mode: batch in the job file", "      mode: batch\n", nil, "stages[0] (classify): mode: batch"},
		{"--mode batch with -f", "", []string{"--mode", "batch"}, "--mode"},
		{"--mode auto with -f", "", []string{"--mode", "auto"}, "--mode"},
		{"--batch-deadline with -f", "", []string{"--batch-deadline", "1h"}, "--batch-deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := job(t, tc.mode)
			err := runApp(append([]string{"sawtooth", "run", "-f", f, "--quiet"}, tc.flags...), io.Discard, io.Discard)
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("run: %v, want a usage error", err)
			}
			msg := err.Error()
			for _, want := range []string{tc.want, "only available for the built-in classify stage", "preset: classify", "`mode:` in the job file"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message lacks %q:\n%s", want, msg)
				}
			}
			for _, bad := range []string{"set in the job file instead", "not available in this build"} {
				if strings.Contains(msg, bad) {
					t.Errorf("message says %q, pointing to the other path:\n%s", bad, msg)
				}
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), "job.db")); err == nil {
				t.Error("the refused run created its database")
			}
		})
	}
	// --mode online beside a job file is not a request for batch jobs.
	err := runApp([]string{"sawtooth", "run", "-f", job(t, ""), "--quiet", "--mode", "online"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "set in the job file instead") {
		t.Errorf("--mode online with -f: %v", err)
	}
}

// TestRunJob_PresetBatch: a job file's classify preset runs mode batch
// through the same drain as a run from flags: every item answered by
// batch jobs, none by an online call, the job stored with its mode.
func TestRunJob_PresetBatch(t *testing.T) {
	sim, url := batchSim(t, geminisim.BatchConfig{Shuffle: true})
	dir := t.TempDir()
	input := filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 30); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "job.yaml")
	body := "db: job.db\ninput: {path: items.jsonl}\nbase_url: " + url + "\nstages:\n  - sanitize: {}\n" +
		"  - llm:\n      name: classify\n      preset: classify\n      output: {label: [bug, praise, other]}\n" +
		"      mode: batch\n      batch: {deadline: 30s, poll: 20ms}\n  - aggregate: {}\n"
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errs syncBuffer
	if err := runApp([]string{"sawtooth", "run", "-f", f, "--quiet"}, &out, &errs); err != nil {
		t.Fatalf("run -f with mode: batch: %v\n%s", err, errs.String())
	}
	if n := sim.Stats().Calls; n != 0 {
		t.Errorf("%d online calls, want none: the batch jobs answer every item", n)
	}
	if st := sim.BatchStats(); st.Created == 0 {
		t.Errorf("no batch job created: %+v", st)
	}
	d, err := openReadOnly(filepath.Join(dir, "job.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	counts, err := d.Counts()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range counts.Stages {
		if s.Queued != 0 || s.Stage == "classify" && s.Output != 30 {
			t.Errorf("stage %s: %d queued, %d answered; want none queued and 30 classified", s.Stage, s.Queued, s.Output)
		}
	}
}
