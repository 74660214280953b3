package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/urfave/cli/v2"
)

// compileArgs parses args with run's stage, input and batch flags and
// compiles them into their job; keep, if set, first keeps what it holds
// for the flags args do not give.
func compileArgs(t *testing.T, keep *job.Job, args ...string) *job.Job {
	t.Helper()
	var (
		o  pipelineOptions
		in inputOptions
		bo batchOptions
		j  *job.Job
	)
	app := &cli.App{Name: "t", Writer: io.Discard, ErrWriter: io.Discard, Commands: []*cli.Command{{
		Name:  "run",
		Flags: append(append(append([]cli.Flag{dbFlag()}, inputFlags(&in)...), pipelineFlags(&o)...), batchFlags(&bo)...),
		Action: func(c *cli.Context) error {
			o.fromContext(c)
			if keep != nil {
				o.keepStoredJob(keep, &in, &bo)
			}
			var err error
			j, err = o.compile(in, bo)
			return err
		},
	}}}
	if err := app.Run(append([]string{"t", "run", "--db", "x.db"}, args...)); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return j
}

func TestCompile_eachFlagLandsInTheJob(t *testing.T) {
	dir := t.TempDir()
	prompt := filepath.Join(dir, "p.tmpl")
	if err := os.WriteFile(prompt, []byte("Label {{.Text}}"), 0o600); err != nil {
		t.Fatal(err)
	}
	llm := func(j *job.Job) *job.LLM { return j.Stages[1].LLM }
	for _, tc := range []struct {
		args []string
		got  func(*job.Job) any
		want any
	}{
		{[]string{"--input", "in.jsonl"}, func(j *job.Job) any { return filepath.Base(j.Input.Path) }, "in.jsonl"},
		{[]string{"--format", "csv"}, func(j *job.Job) any { return j.Input.Format }, "csv"},
		{[]string{"--id-field", "key"}, func(j *job.Job) any { return j.Input.ID }, "key"},
		{[]string{"--text-field", "body"}, func(j *job.Job) any { return j.Input.Text }, "body"},
		{[]string{"--max-line-bytes", "99"}, func(j *job.Job) any { return j.Input.MaxLineBytes }, 99},
		{[]string{"--max-field-lines", "7"}, func(j *job.Job) any { return j.Input.MaxFieldLines }, 7},
		{[]string{"--date-format", "02/01/2006"}, func(j *job.Job) any { return j.Input.DateFormat }, "02/01/2006"},
		{[]string{"--rating-range", "1-5"}, func(j *job.Job) any { return j.Input.RatingRange }, "1-5"},
		{[]string{"--base-url", "http://127.0.0.1:1"}, func(j *job.Job) any { return j.BaseURL }, "http://127.0.0.1:1"},
		{[]string{"--max-chars", "100"}, func(j *job.Job) any { return j.Stages[0].Sanitize.MaxChars }, 100},
		{[]string{"--emoji", "strip"}, func(j *job.Job) any { return j.Stages[0].Sanitize.Emoji }, "strip"},
		{[]string{"--model", "gemini-2.5-pro"}, func(j *job.Job) any { return llm(j).Model }, "gemini-2.5-pro"},
		{[]string{"--labels", "a,b"}, func(j *job.Job) any { return fmt.Sprint(llm(j).Output.Label) }, "[a b]"},
		{[]string{"--prompt-file", prompt}, func(j *job.Job) any { return llm(j).Prompt }, "Label {{.Text}}"},
		{[]string{"--timeout", "7s"}, func(j *job.Job) any { return llm(j).Timeout }, "7s"},
		{[]string{"--max-output-tokens", "64"}, func(j *job.Job) any { return llm(j).MaxOutputTokens }, 64},
		{[]string{"--tier", "flex"}, func(j *job.Job) any { return llm(j).Tier }, "flex"},
		{[]string{"--tier", "auto", "--flex-deadline", "45m"}, func(j *job.Job) any { return llm(j).FlexDeadline }, "45m0s"},
		{[]string{"--group-by", "app,rating"}, func(j *job.Job) any { return fmt.Sprint(j.Stages[2].Aggregate.GroupBy) }, "[app rating]"},
		{[]string{"--date-field", "when"}, func(j *job.Job) any { return j.Stages[2].Aggregate.Date }, "when"},
		{[]string{"--rating-field", "stars"}, func(j *job.Job) any { return j.Stages[2].Aggregate.Rating }, "stars"},
		{[]string{"--workers", "3"}, func(j *job.Job) any { return j.Workers }, 3},
		{[]string{"--max-attempts", "9"}, func(j *job.Job) any { return llm(j).MaxAttempts }, 9},
		{[]string{"--start", "4"}, func(j *job.Job) any { return llm(j).Limiter.Start }, 4},
		{[]string{"--floor", "2"}, func(j *job.Job) any { return llm(j).Limiter.Floor }, 2},
		{[]string{"--ceiling", "40"}, func(j *job.Job) any { return llm(j).Limiter.Ceiling }, 40},
		{[]string{"--fixed", "6"}, func(j *job.Job) any { return llm(j).Limiter.Fixed }, 6},
		{[]string{"--decrease", "0.5"}, func(j *job.Job) any { return llm(j).Limiter.Decrease }, 0.5},
		{[]string{"--cooldown", "3s"}, func(j *job.Job) any { return llm(j).Limiter.Cooldown }, "3s"},
		{[]string{"--max-wait", "3m"}, func(j *job.Job) any { return llm(j).MaxWait }, "3m0s"},
		{[]string{"--max-outage", "4m"}, func(j *job.Job) any { return llm(j).MaxOutage }, "4m0s"},
		{[]string{"--max-refused", "0"}, func(j *job.Job) any { return llm(j).MaxRefused }, "0s"},
		{[]string{"--tpm", "1000"}, func(j *job.Job) any { return llm(j).Limiter.TPM }, 1000},
		{[]string{"--rpm", "60"}, func(j *job.Job) any { return llm(j).Limiter.RPM }, 60},
		{[]string{"--price-in", "0.5"}, func(j *job.Job) any { return *llm(j).Price.Input }, 0.5},
		{[]string{"--price-out", "2"}, func(j *job.Job) any { return *llm(j).Price.Output }, 2.0},
		{[]string{"--mode", "auto"}, func(j *job.Job) any { return llm(j).Mode }, "auto"},
		{[]string{"--batch-size", "50"}, func(j *job.Job) any { return llm(j).Batch.Size }, 50},
		{[]string{"--batch-deadline", "1h"}, func(j *job.Job) any { return llm(j).Batch.Deadline }, "1h0m0s"},
		{[]string{"--batch-poll", "5s"}, func(j *job.Job) any { return llm(j).Batch.Poll }, "5s"},
		{[]string{"--batch-max-sends", "1"}, func(j *job.Job) any { return llm(j).Batch.MaxSends }, 1},
		{[]string{"--batch-inline-bytes", "1000"}, func(j *job.Job) any { return llm(j).Batch.InlineBytes }, 1000},
		{[]string{"--batch-create-settle", "5m"}, func(j *job.Job) any { return llm(j).Batch.CreateSettle }, "5m0s"},
		{[]string{"--lease", "45s"}, func(j *job.Job) any { return j.Fleet.Lease }, "45s"},
		{[]string{"--quota", "independent"}, func(j *job.Job) any { return j.Fleet.Quota }, "independent"},
		{[]string{"--quota-key", "gemini/shared"}, func(j *job.Job) any { return j.Fleet.QuotaKey }, "gemini/shared"},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			j := compileArgs(t, nil, tc.args...)
			if got := tc.got(j); got != tc.want {
				t.Errorf("%v: got %#v, want %#v", tc.args, got, tc.want)
			}
			// The flags' job is the built-in pipeline, as a job file
			// writes it, and decodes back to itself.
			if l := llm(j); l.Name != "classify" || l.Preset != job.PresetClassify {
				t.Errorf("stage 1: %+v, want the classify preset", l)
			}
			st, err := j.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			back, err := job.Decode("flags.yaml", []byte(st.YAML))
			if err != nil {
				t.Fatalf("the compiled job does not decode:\n%s\n%v", st.YAML, err)
			}
			if diff, err := job.Diff(st, mustSnapshot(t, back)); err != nil || len(diff) > 0 {
				t.Errorf("decoded back, the job differs: %v %v", diff, err)
			}
			// A later run that does not give the flag keeps the stored
			// value (the settings that decide answers are kept from the
			// stage definitions, tonight's input file is not kept).
			if byDefs[tc.args[0]] {
				return
			}
			if got := tc.got(compileArgs(t, j)); got != tc.want {
				t.Errorf("a later run without %s: got %#v, want the stored %#v", tc.args[0], got, tc.want)
			}
			if got := tc.got(compileArgs(t, j, "--mode", "online")); tc.args[0] == "--mode" && got != "" {
				t.Errorf("a later run with --mode online: got %#v, want the default (online)", got)
			}
		})
	}
}

// byDefs are the flags a later run keeps through the stage definitions
// (keepStored) or not at all (the input file and its format, and
// --start, one run's hint: TestKeepStoredJob_startNotKept).
var byDefs = map[string]bool{"--input": true, "--format": true, "--max-chars": true, "--emoji": true, "--model": true, "--labels": true,
	"--prompt-file": true, "--max-output-tokens": true, "--group-by": true, "--date-field": true, "--rating-field": true, "--start": true}

// TestCompile_defaultsLeftOut: a flag left at its default writes nothing
// where the job's default is the same, so job show prints what the run
// chose; the settings that decide answers are written out.
func TestCompile_defaultsLeftOut(t *testing.T) {
	st := mustSnapshot(t, compileArgs(t, nil))
	for _, absent := range []string{"workers:", "fleet:", "tier:", "timeout:", "max_wait:", "mode:", "batch:", "max_attempts:", "rating_range:"} {
		if strings.Contains(st.YAML, absent) {
			t.Errorf("the default job writes %s:\n%s", absent, st.YAML)
		}
	}
	for _, present := range []string{"preset: classify", "model: gemini", "max_output_tokens: 256", "max_chars:", "emoji: keep", "group_by:"} {
		if !strings.Contains(st.YAML, present) {
			t.Errorf("the default job lacks %s:\n%s", present, st.YAML)
		}
	}
}

func mustSnapshot(t *testing.T, j *job.Job) job.Stored {
	t.Helper()
	st, err := j.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return st
}
