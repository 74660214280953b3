package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/sawtooth-dev/sawtooth/store"
)

// TestRun_ModelNotFoundNamesTheSetting: a model the API does not serve
// stops the run with a message naming what chose it: --model on the
// command line, the stage's model key from a job file.
func TestRun_ModelNotFoundNamesTheSetting(t *testing.T) {
	url := startTestSim(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte(`{"id":"a","text":"Great app!"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	jobFile := filepath.Join(dir, "job.yaml")
	body := "db: job.db\ninput: {path: " + input + "}\nbase_url: " + url + "\nstages:\n" +
		"  - llm:\n      name: triage\n      model: my-tuned-model\n      output: {label: [bug, praise, other]}\n"
	if err := os.WriteFile(jobFile, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		args      []string
		want, not string
	}{
		{"flags", []string{"run", "--db", filepath.Join(dir, "flags.db"), "--input", input, "--base-url", url, "--model", "my-tuned-model"},
			`model "my-tuned-model" not found`, "check --model (e.g. "},
		{"job file", []string{"run", "-f", jobFile},
			`model "my-tuned-model" not found`, "check model in the job file (e.g. "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := runApp(append([]string{"sawtooth"}, append(tc.args, "--quiet")...), io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.not) {
				t.Errorf("run: %v; want %q and %q", err, tc.want, tc.not)
			}
		})
	}
}

// TestBuildOptions_WordPrice: a model with no price is worded with the
// flags that give one on the command line, the job file's keys (and the
// stage) otherwise; another error passes unchanged.
func TestBuildOptions_WordPrice(t *testing.T) {
	np := &stages.NoPriceError{Model: "my-tuned-model"}
	if got := (buildOptions{FromFlags: true}).wordPrice(np, "triage").Error(); !strings.Contains(got, "my-tuned-model") || !strings.Contains(got, "pass --price-in and --price-out in USD per million") {
		t.Errorf("from flags: %q", got)
	}
	if got := (buildOptions{}).wordPrice(np, "job.yaml: stages[1] (triage)").Error(); !strings.HasPrefix(got, "job.yaml: stages[1] (triage): ") || !strings.Contains(got, "set price.input_per_m and price.output_per_m in USD") || strings.Contains(got, "--") {
		t.Errorf("from a job file: %q", got)
	}
	other := errors.New("price of m is -1 per million tokens")
	if got := (buildOptions{FromFlags: true}).wordPrice(other, "triage"); got != other {
		t.Errorf("another error became %v", got)
	}
}

// TestOpen_StoreRemedyNamesTheFlag: a file that holds no sawtooth
// database is refused by the store in its own words; the command line
// names the flag that gave the path (--db; copy's --to).
func TestOpen_StoreRemedyNamesTheFlag(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "other.db")
	bdb, err := bolt.Open(other, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("someone-elses")); return err }); err != nil {
		t.Fatal(err)
	}
	if err := bdb.Close(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		open func() error
		want string
	}{
		{"--db", func() error { _, err := openReadOnly(other); return err }, "it holds other data; choose another --db"},
		{"--from", func() error { _, err := openReadOnlyFrom(other, "--from"); return err }, "it holds other data; choose another --from"},
		{"a job's db", func() error { _, err := openJobDatabase(other, namedStages()); return err }, "it holds other data; choose another db in the job file (or --db)"},
		{"--to", func() error {
			_, err := openDatabase(other, dbOpen{Stages: namedStages(), Flag: "--to"}, func() (*store.DB, error) {
				return store.Open(other, store.Options{Stages: namedStages()})
			})
			return err
		}, "it holds other data; choose another --to"},
		{"a PostgreSQL schema", func() error {
			return wordStoreError(fmt.Errorf("open postgres://h/db: it holds stages a, this run has b: %w (choose another database or schema)", store.ErrDefinition), "--db")
		}, "(choose another --db or schema)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.open()
			if err == nil || !strings.Contains(err.Error(), tc.want) || (!errors.Is(err, store.ErrNotSawtooth) && !errors.Is(err, store.ErrDefinition)) {
				t.Errorf("open: %v; want %q, the error it wraps kept", err, tc.want)
			}
		})
	}
}

// TestCheckInput_NamesTheSetting: an input refused for a line over the
// limit says what to raise as the user set it: --max-line-bytes from
// flags, the job file's key from a job.
func TestCheckInput_NamesTheSetting(t *testing.T) {
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte(`{"id":"a","text":"`+strings.Repeat("x", 200)+`"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var flagsOut syncBuffer
	_, err := checkInput(t.Context(), &pipelineOptions{}, &inputOptions{Path: input, IDField: "id", TextField: "text", MaxLine: 64}, &flagsOut)
	if err == nil || !strings.Contains(flagsOut.String(), "raise --max-line-bytes") {
		t.Errorf("from flags: %v\n%s\nwant it to name --max-line-bytes", err, flagsOut.String())
	}
	j := &job.Job{Dir: dir, Input: job.Input{Path: input, MaxLineBytes: 64}}
	var jobOut syncBuffer
	_, err = checkJobInput(t.Context(), j, &jobOut)
	if err == nil || !strings.Contains(jobOut.String(), "raise input.max_line_bytes") || strings.Contains(jobOut.String()+err.Error(), "--") {
		t.Errorf("from a job: %v\n%s\nwant it to name input.max_line_bytes and no flag", err, jobOut.String())
	}
}

// TestRunJob_ModelNotFoundBeforeABatchedStage: a model the API does not
// serve, met by the online stage a batch phase runs before its batched
// one, stops the run naming the job file's key, as an online run does.
func TestRunJob_ModelNotFoundBeforeABatchedStage(t *testing.T) {
	_, url := batchSim(t, geminisim.BatchConfig{})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "items.jsonl"), []byte(`{"id":"a","text":"Great app!"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "job.yaml")
	body := "db: job.db\ninput: {path: items.jsonl}\nbase_url: " + url + "\nstages:\n" +
		"  - llm:\n      name: triage\n      model: my-tuned-model\n      output: {label: [bug, praise, other]}\n" +
		"  - llm:\n      name: tone\n      prompt: \"What is the tone of this review? {{.Text}}\"\n" +
		"      output: {label: [angry, calm]}\n      mode: batch\n      batch: {deadline: 30s, poll: 20ms}\n"
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	err := runApp([]string{"sawtooth", "run", "-f", f, "--quiet"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `model "my-tuned-model" not found`) || !strings.Contains(err.Error(), "check model in the job file (e.g. ") {
		t.Errorf("run: %v; want the model and %q", err, "check model in the job file")
	}
}
