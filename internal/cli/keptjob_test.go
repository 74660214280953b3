package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/batch"
	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/urfave/cli/v2"
)

// batchRunDB is a database a `--mode batch` run from flags filled, and
// the simulator's URL.
func batchRunDB(t *testing.T) (db, url string) {
	t.Helper()
	_, url = batchSim(t, geminisim.BatchConfig{})
	dir := t.TempDir()
	db, input := filepath.Join(dir, "run.db"), filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 5); err != nil {
		t.Fatal(err)
	}
	var out, errs syncBuffer
	if err := runApp([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--quiet",
		"--mode", "batch", "--batch-deadline", "30s", "--batch-poll", "20ms"}, &out, &errs); err != nil {
		t.Fatalf("batch run: %v\n%s", err, errs.String())
	}
	return db, url
}

// shownJob is `job show --db db`.
func shownJob(t *testing.T, db string) string {
	t.Helper()
	var shown, errs syncBuffer
	if err := runApp([]string{"sawtooth", "job", "show", "--db", db}, &shown, &errs); err != nil {
		t.Fatalf("job show: %v\n%s", err, errs.String())
	}
	return shown.String()
}

// Retry and rerun run online, but must not store a job without the mode
// a batch run from flags stored: the next `run --db` with no flags would
// go online at twice the price.
func TestRetryRerun_KeepStoredMode(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"retry", []string{"retry", "--stage", "classify"}},
		{"rerun", []string{"rerun", "--from-stage", "aggregate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, url := batchRunDB(t)
			before := shownJob(t, db)
			var out, errs syncBuffer
			args := append(append([]string{"sawtooth"}, tc.args...), "--db", db, "--base-url", url, "--quiet")
			if err := runApp(args, &out, &errs); err != nil {
				t.Fatalf("%s: %v\n%s", tc.name, err, errs.String())
			}
			after := shownJob(t, db)
			for _, want := range []string{"mode: batch", "deadline: 30s", "poll: 20ms"} {
				if !strings.Contains(after, want) {
					t.Errorf("after %s the stored job lost %q:\n%s\n%s said:\n%s", tc.name, want, after, tc.name, errs.String())
				}
			}
			if after != before {
				t.Errorf("%s changed the stored job:\nbefore:\n%s\nafter:\n%s", tc.name, before, after)
			}
			if strings.Contains(errs.String(), "settings changed") {
				t.Errorf("%s said the settings changed:\n%s", tc.name, errs.String())
			}
		})
	}
}

// A --model other than the stored one keeps none of the settings the
// stored job gave for the old model: a custom price (the consent plan and
// --budget would price the new model at it), its quota and its
// shared-quota row. The same model keeps them, and flags given apply.
func TestKeepStoredJob_newModelDropsModelBoundSettings(t *testing.T) {
	first := compileArgs(t, nil, "--model", "gemini-2.5-flash-lite", "--price-in", "0", "--price-out", "0",
		"--tpm", "4000000", "--rpm", "4000", "--quota-key", "gemini/flash-lite", "--workers", "3")
	bound := func(j *job.Job) string {
		l := j.Stages[1].LLM
		var got []string
		if l.Price != nil {
			got = append(got, "price")
		}
		if l.Limiter.TPM != 0 {
			got = append(got, fmt.Sprint("tpm ", l.Limiter.TPM))
		}
		if l.Limiter.RPM != 0 {
			got = append(got, fmt.Sprint("rpm ", l.Limiter.RPM))
		}
		if j.Fleet != nil && j.Fleet.QuotaKey != "" {
			got = append(got, "quota-key "+j.Fleet.QuotaKey)
		}
		return strings.Join(got, ", ")
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"another model", []string{"--model", "gemini-2.5-pro"}, ""},
		{"the same model", []string{"--model", "gemini-2.5-flash-lite"}, "price, tpm 4000000, rpm 4000, quota-key gemini/flash-lite"},
		{"no --model", nil, "price, tpm 4000000, rpm 4000, quota-key gemini/flash-lite"},
		{"another model, its own quota", []string{"--model", "gemini-2.5-pro", "--tpm", "2000000"}, "tpm 2000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := compileArgs(t, first, tc.args...)
			if got := bound(j); got != tc.want {
				t.Errorf("model-bound settings kept = %q, want %q", got, tc.want)
			}
			if j.Workers != 3 {
				t.Errorf("workers = %d, want the stored 3 (not bound to the model)", j.Workers)
			}
		})
	}
}

// rerun --from-stage classify --model B says which of model A's stored
// settings it leaves, stores a job without them, and starts B's limiter
// afresh rather than from the limit learned for A.
func TestRerun_newModelSaysWhatItDrops(t *testing.T) {
	_, url := batchSim(t, geminisim.BatchConfig{})
	dir := t.TempDir()
	db, input := filepath.Join(dir, "run.db"), filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 5); err != nil {
		t.Fatal(err)
	}
	var out, first syncBuffer
	if err := runApp([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--quiet",
		"--model", "gemini-2.5-flash-lite", "--price-in", "0", "--price-out", "0", "--tpm", "4000000"}, &out, &first); err != nil {
		t.Fatalf("run: %v\n%s", err, first.String())
	}
	var errs syncBuffer
	if err := runApp([]string{"sawtooth", "rerun", "--db", db, "--from-stage", "classify", "--base-url", url, "--quiet", "--yes",
		"--model", "gemini-2.5-pro"}, &out, &errs); err != nil {
		t.Fatalf("rerun: %v\n%s", err, errs.String())
	}
	for _, want := range []string{
		"--model gemini-2.5-pro: not keeping --tpm, --price-in, --price-out, recorded for gemini-2.5-flash-lite",
		"classify: model gemini-2.5-pro, not gemini-2.5-flash-lite: its limiter starts afresh",
	} {
		if !strings.Contains(errs.String(), want) {
			t.Errorf("rerun did not say %q:\n%s", want, errs.String())
		}
	}
	shown := shownJob(t, db)
	for _, bad := range []string{"price", "tpm", "flash-lite"} {
		if strings.Contains(shown, bad) {
			t.Errorf("the stored job still holds %q:\n%s", bad, shown)
		}
	}
}

// Every combination of flags a run accepts stores a job the job file's
// decoder takes (plan --db, job show | run -f read it back).
func TestCompile_acceptedFlagsStoreAJobThatDecodes(t *testing.T) {
	for _, args := range [][]string{
		{"--tier", "flex", "--mode", "auto"},
		{"--tier", "auto", "--flex-deadline", "1h", "--mode", "auto"},
		{"--tier", "priority"},
		{"--mode", "BATCH"},
		{"--mode", " Auto "},
		{"--decrease", "0.9"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			st := mustSnapshot(t, compileArgs(t, nil, args...))
			if _, err := job.Decode("flags.yaml", []byte(st.YAML)); err != nil {
				t.Errorf("flags %v compile to a job the decoder refuses:\n%v\n%s", args, err, st.YAML)
			}
		})
	}
}

// Flags whose job could not be read back are a usage error naming them,
// before anything is created or stored: a tier with batch mode (batch
// jobs carry none), and a decrease outside (0, 1).
func TestRun_refusesFlagsNoJobCanHold(t *testing.T) {
	_, url := batchSim(t, geminisim.BatchConfig{})
	input := filepath.Join(t.TempDir(), "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 2); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tier", "flex", "--mode", "batch"}, "--tier flex with --mode batch"},
		{[]string{"--tier", "priority", "--mode", "Batch"}, "--tier priority with --mode batch"},
		{[]string{"--tier", "auto", "--flex-deadline", "1h", "--mode", "batch"}, "--tier auto with --mode batch"},
		{[]string{"--decrease", "1"}, "--decrease 1"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "run.db")
			var out, errs syncBuffer
			err := runApp(append([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--quiet"}, tc.args...), &out, &errs)
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a usage error saying %q", err, tc.want)
			}
			if _, err := os.Stat(db); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the refused run left %s: %v", db, err)
			}
		})
	}
}

// A retry given a tier on a database whose stored job runs classify in
// batch mode is refused: the job it would store could not be read back.
func TestRetry_tierOnBatchJobRefused(t *testing.T) {
	db, url := batchRunDB(t)
	before := shownJob(t, db)
	var out, errs syncBuffer
	err := runApp([]string{"sawtooth", "retry", "--db", db, "--stage", "classify", "--base-url", url, "--quiet", "--tier", "flex"}, &out, &errs)
	var ue *UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--tier flex") || !strings.Contains(err.Error(), "batch mode") {
		t.Fatalf("got %v, want a usage error naming --tier and the stored batch mode", err)
	}
	t.Log(shownJob(t, db))
	if after := shownJob(t, db); after != before {
		t.Errorf("the refused retry changed the stored job:\n%s", after)
	}
}

// The decoder's rules back every flag's own check: a compiled job the
// decoder refuses is a usage error naming the key.
func TestCheckStorable(t *testing.T) {
	good := mustSnapshot(t, compileArgs(t, nil, "--tier", "flex"))
	if err := checkStorable("x.db", good); err != nil {
		t.Fatalf("a job from accepted flags: %v", err)
	}
	j := compileArgs(t, nil)
	j.Stages[1].LLM.Limiter.Decrease = 1 // past --decrease's own check
	err := checkStorable("x.db", mustSnapshot(t, j))
	var ue *UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "limiter.decrease") {
		t.Errorf("got %v, want a usage error naming limiter.decrease", err)
	}
}

// A run refused once its database is open (here: --mode batch on a
// database that cannot keep batch jobs) has ingested nothing and stored
// no job: begin makes every check that can refuse the run before it
// changes anything, and drain stores the job only after begin.
func TestBegin_refusesBeforeChangingAnything(t *testing.T) {
	_, url := batchSim(t, geminisim.BatchConfig{})
	dir := t.TempDir()
	path, input := filepath.Join(dir, "run.db"), filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 3); err != nil {
		t.Fatal(err)
	}
	var out, errs syncBuffer
	if err := runApp([]string{"sawtooth", "run", "--db", path, "--input", input, "--base-url", url, "--quiet"}, &out, &errs); err != nil {
		t.Fatalf("run: %v\n%s", err, errs.String())
	}
	if _, err := writeFirstLines(input, testReviews(t), 6); err != nil {
		t.Fatal(err)
	}
	var (
		o   pipelineOptions
		in  inputOptions
		bo  batchOptions
		err error
	)
	app := &cli.App{Name: "t", Writer: io.Discard, ErrWriter: io.Discard, Commands: []*cli.Command{{
		Name:  "run",
		Flags: append(append(append([]cli.Flag{dbFlag()}, inputFlags(&in)...), pipelineFlags(&o)...), batchFlags(&bo)...),
		Action: func(c *cli.Context) error {
			o.fromContext(c)
			return nil
		},
	}}}
	if err := app.Run([]string{"t", "run", "--db", path, "--input", input, "--base-url", url, "--mode", "batch"}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b, err := o.buildStages(ctx, in, bo)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := checkInput(ctx, &o, &in, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(path, store.Options{Stages: b.defs})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	jobBefore, _ := db.Job()
	countsBefore, _ := db.Counts()
	noBatch := struct{ jobDatabase }{db} // a database with no batch-job capability
	req := &drainRequest{Pipeline: &o, Input: in, Batch: bo, ErrOut: io.Discard}
	_, err = begin(ctx, noBatch, b, plan, req, slog.New(slog.DiscardHandler))
	var ue *UsageError
	if !errors.As(err, &ue) {
		t.Fatalf("begin = %v, want the usage error of a batch run the database cannot hold", err)
	}
	if jobAfter, _ := db.Job(); string(jobAfter) != string(jobBefore) {
		t.Errorf("the refused run stored its job:\n%s", jobAfter)
	}
	if countsAfter, _ := db.Counts(); fmt.Sprint(countsAfter) != fmt.Sprint(countsBefore) {
		t.Errorf("the refused run ingested: counts %v, were %v", countsAfter, countsBefore)
	}
}

// A database that cannot keep batch jobs refuses a batch or auto run
// before it ingests or stores anything (drain calls batchReady first).
func TestBatchReady(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "x.db"), store.Options{Stages: namedStages()})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	plain := struct{ pipeline.Database }{db} // no batch-job capability
	for _, tc := range []struct {
		name string
		db   pipeline.Database
		mode batch.Mode
		bad  bool
	}{
		{"online, any database", plain, batch.ModeOnline, false},
		{"batch, a batch store", db, batch.ModeBatch, false},
		{"batch, no batch jobs", plain, batch.ModeBatch, true},
		{"auto, no batch jobs", plain, batch.ModeAuto, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := batchReady(tc.db, tc.mode)
			var ue *UsageError
			if tc.bad != errors.As(err, &ue) {
				t.Errorf("batchReady = %v, want a usage error: %v", err, tc.bad)
			}
		})
	}
}

// --start is one run's hint: a later run keeping the stored settings
// starts at the limit it learned, not at a stored --start.
func TestKeepStoredJob_startNotKept(t *testing.T) {
	first := compileArgs(t, nil, "--start", "50", "--floor", "2")
	j := compileArgs(t, first)
	if lc := j.Stages[1].LLM.Limiter; lc.Start != 0 || lc.Floor != 2 {
		t.Errorf("kept limiter %+v, want no start and the stored floor 2", lc)
	}
}

// The notice of kept settings says what changing one takes: for retry
// and rerun, the flag; a run given any setting's flag keeps none.
func TestKeptSettingsNotice(t *testing.T) {
	_, url := batchSim(t, geminisim.BatchConfig{})
	dir := t.TempDir()
	db, input := filepath.Join(dir, "run.db"), filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 3); err != nil {
		t.Fatal(err)
	}
	var out, errs syncBuffer
	if err := runApp([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--quiet", "--workers", "3"}, &out, &errs); err != nil {
		t.Fatalf("run: %v\n%s", err, errs.String())
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run"}, "(a run given any setting's flag keeps none of them: it takes the flags given and the defaults for the rest)"},
		{[]string{"retry", "--stage", "classify"}, "(give the flag to change one)"},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			var errs syncBuffer
			args := append(append([]string{"sawtooth"}, tc.args...), "--db", db, "--base-url", url, "--quiet")
			if err := runApp(args, &out, &errs); err != nil {
				t.Fatalf("%v: %v\n%s", tc.args, err, errs.String())
			}
			if !strings.Contains(errs.String(), "recorded for --workers "+tc.want) {
				t.Errorf("%v said:\n%s\nwant the kept --workers and %q", tc.args, errs.String(), tc.want)
			}
		})
	}
}

// Storing a job whose stage has another model forgets the limit and rate
// learned for the old one (a run of the new model that ends early must
// not hand them on), and only that stage's.
func TestJobStages_clearLearned(t *testing.T) {
	db := memLearned{"classify": 12, "classify.quota_rate_per_min": 600, "classify.rate_per_min": 500, "other": 3, "other.quota_rate_per_min": 60}
	b := &jobStages{newModel: map[string]string{"classify": "gemini-2.5-flash-lite"}}
	if err := b.clearLearned(db); err != nil {
		t.Fatal(err)
	}
	if want := (memLearned{"classify": 0, "classify.quota_rate_per_min": 0, "classify.rate_per_min": 0, "other": 3, "other.quota_rate_per_min": 60}); fmt.Sprint(db) != fmt.Sprint(want) {
		t.Errorf("learned after = %v, want %v", db, want)
	}
}
