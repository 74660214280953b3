package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A run from flags stores its job: `job show` prints it as YAML, `run -f`
// accepts that YAML from another directory, and it resumes the database
// without paying for any item twice (the simulator counts every call per
// item); `run --db` alone then resumes it too, paying nothing.
func TestRun_flagsStoreTheirJob(t *testing.T) {
	sim, url := jobSim(t)
	dir := t.TempDir()
	db, input := filepath.Join(dir, "run.db"), filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 10); err != nil {
		t.Fatal(err)
	}
	var out, errs strings.Builder
	if err := runApp([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--quiet",
		"--labels", "bug,praise,other", "--max-chars", "2000", "--fixed", "3", "--max-attempts", "4"}, &out, &errs); err != nil {
		t.Fatalf("run from flags: %v\n%s", err, errs.String())
	}

	out.Reset()
	if err := runApp([]string{"sawtooth", "job", "show", "--db", db}, &out, &errs); err != nil {
		t.Fatalf("job show after a run from flags: %v\n%s", err, errs.String())
	}
	shown := out.String()
	for _, want := range []string{"preset: classify", "labels", "max_chars: 2000", "fixed: 3", "max_attempts: 4", "- aggregate:"} {
		if !strings.Contains(shown, want) && !(want == "labels" && strings.Contains(shown, "label:")) {
			t.Errorf("job show lacks %q:\n%s", want, shown)
		}
	}

	// plan prices the stored job, the same database, no difference.
	out.Reset()
	errs.Reset()
	if err := runApp([]string{"sawtooth", "plan", "--db", db}, &out, &errs); err != nil || strings.Contains(out.String()+errs.String(), "differs") {
		t.Errorf("plan --db after a run from flags: %v\n%s%s", err, out.String(), errs.String())
	}

	// Ten more items in tonight's file; the shown job, run from
	// elsewhere, ingests them and calls only those.
	if _, err := writeFirstLines(input, testReviews(t), 20); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	jobFile := filepath.Join(other, "job.yaml")
	if err := os.WriteFile(jobFile, []byte(shown), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(other)
	errs.Reset()
	if err := runApp([]string{"sawtooth", "run", "-f", jobFile, "--quiet"}, &out, &errs); err != nil {
		t.Fatalf("run -f with the shown job: %v\n%s", err, errs.String())
	}
	if strings.Contains(errs.String(), "the job changed") {
		t.Errorf("the shown job reads as a change:\n%s", errs.String())
	}
	if err := runApp([]string{"sawtooth", "run", "--db", db, "--quiet"}, &out, &errs); err != nil {
		t.Fatalf("run --db alone: %v\n%s", err, errs.String())
	}

	st := sim.Stats()
	if len(st.Items) != 20 {
		t.Errorf("the simulator saw %d items, want 20", len(st.Items))
	}
	for id, it := range st.Items {
		if it.Calls != 1 {
			t.Errorf("item %s called %d times, want once", id, it.Calls)
		}
	}
}

// A later run on the same database: one naming no flag that defines the
// pipeline resumes with the stored settings (no refusal for the labels
// the first run chose); one naming flags is defined by them: a change
// that changes no answer is adopted and said, one that changes answers
// (a flag given, or one left at its default) is refused naming it,
// changing nothing.
func TestRun_laterFlagsAgainstTheStoredJob(t *testing.T) {
	sim, url := jobSim(t)
	dir := t.TempDir()
	db, input := filepath.Join(dir, "run.db"), filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 6); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		var out, errs strings.Builder
		err := runApp(append([]string{"sawtooth", "run", "--db", db, "--base-url", url, "--quiet"}, args...), &out, &errs)
		return errs.String(), err
	}
	if errs, err := run("--input", input, "--labels", "bug,praise,other", "--fixed", "2", "--mode", "online"); err != nil {
		t.Fatalf("first run: %v\n%s", err, errs)
	}
	if _, err := writeFirstLines(input, testReviews(t), 9); err != nil {
		t.Fatal(err)
	}
	errs, err := run("--input", input)
	if err != nil {
		t.Fatalf("a run naming no stage flag: %v\n%s", err, errs)
	}
	if !strings.Contains(errs, "keeping the settings") || !strings.Contains(errs, "--labels") || !strings.Contains(errs, "--fixed") {
		t.Errorf("the run did not say it kept the stored labels and limiter:\n%s", errs)
	}
	if errs, err = run("--labels", "bug,praise,other", "--fixed", "3"); err != nil {
		t.Fatalf("--fixed 3: %v\n%s", err, errs)
	}
	if !strings.Contains(errs, "classify.limiter.fixed: 2 -> 3") {
		t.Errorf("a changed limiter was not said:\n%s", errs)
	}
	before := readBytes(t, db)
	for _, args := range [][]string{{"--labels", "bug,other"}, {"--fixed", "3"}} {
		errs, err = run(args...)
		if err == nil || !strings.Contains(errs+err.Error(), `labels: "bug,praise,other" -> "bug`) {
			t.Errorf("%v: err %v, want a refusal naming the labels\n%s", args, err, errs)
		}
	}
	if string(readBytes(t, db)) != string(before) {
		t.Errorf("the refused run changed the database")
	}
	for id, it := range sim.Stats().Items {
		if it.Calls != 1 {
			t.Errorf("item %s called %d times, want once", id, it.Calls)
		}
	}
	if n := len(sim.Stats().Items); n != 9 {
		t.Errorf("%d items called, want 9", n)
	}
}

// A job file's input keys that mirror the input flags are honoured as
// the flags are: rating_range skips a rating outside it.
func TestRunJob_InputKeys(t *testing.T) {
	sim, url := jobSim(t)
	dir := t.TempDir()
	items := `{"id":"a","text":"Great app","rating":4,"app":"x","date":"2026-01-02"}` + "\n" +
		`{"id":"b","text":"Crashes","rating":9,"app":"x","date":"2026-01-02"}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "items.jsonl"), []byte(items), 0o600); err != nil {
		t.Fatal(err)
	}
	f := writeJob(t, dir, "db: job.db\ninput: {path: items.jsonl, rating_range: 1-5}\nbase_url: URL\nstages:\n"+
		"  - llm: {name: classify, output: {label: [bug, praise]}}\n  - aggregate: {}\n", url)
	var out, errs strings.Builder
	if err := runApp([]string{"sawtooth", "run", "-f", f, "--quiet"}, &out, &errs); err != nil {
		t.Fatalf("run: %v\n%s", err, errs.String())
	}
	if n := len(sim.Stats().Items); n != 1 || !strings.Contains(errs.String(), "1 lines skipped") && !strings.Contains(errs.String(), "1 line skipped") {
		t.Errorf("%d items called, want 1 (b's rating 9 is outside 1-5)\n%s", n, errs.String())
	}
}
