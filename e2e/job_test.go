package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

const jobBugSchema = `{
  "type": "object",
  "properties": {
    "component": {"type": "string"},
    "severity": {"type": "string", "enum": ["low", "medium", "high"]}
  },
  "required": ["component", "severity"]
}`

// writeJobFiles writes a three-LLM-stage job (classify; extract, only
// for bugs, with a JSON schema; tone, reading both earlier outputs) and
// its files into dir, with extra top-level lines, and returns its path.
func writeJobFiles(t testing.TB, dir, input, extraTop string) string {
	t.Helper()
	files := map[string]string{
		"bug.schema.json": jobBugSchema,
		"extract.tmpl":    "Extract the bug ({{.Out.classify.label}}): {{.Text}}",
		"job.yaml": "db: job.db\ninput: {path: " + input + "}\n" + extraTop + `stages:
  - sanitize: {}
  - llm:
      name: classify
      output: {label: [bug, pricing, feature_request, ux, praise, other]}
      limiter: {ceiling: 16}
  - llm:
      name: extract
      when: 'classify.label == "bug"'
      model: gemini-2.5-pro
      prompt_file: extract.tmpl
      output: {schema_file: bug.schema.json}
      limiter: {ceiling: 16}
  - llm:
      name: tone
      prompt: 'Tone ({{.Out.classify.label}}, {{.Out.extract.severity}}): {{.Text}}'
      output: {label: [calm, angry]}
      limiter: {ceiling: 16}
  - aggregate: {count: extract.severity}
`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "job.yaml")
}

// exportStage reads `export --stage` as id -> output fields.
func exportStage(t testing.TB, db, stage string) map[string]map[string]any {
	t.Helper()
	r := run(t, nil, "export", "--db", db, "--stage", stage)
	if r.code != 0 {
		t.Fatalf("export %s: exit %d: %s", stage, r.code, r.err)
	}
	out := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(r.out), "\n") {
		var row map[string]any
		if json.Unmarshal([]byte(line), &row) == nil {
			out[row["id"].(string)] = row
		}
	}
	return out
}

// TestJob_ThreeStagesKillResume runs a job of three LLM stages with a
// when: through the real binary, SIGKILLs it mid-run twice, resumes with
// `run --db` alone (the stored job), and checks every item: the condition
// held exactly for the bugs, no answer was paid for twice beyond what a
// kill threw away, and the aggregate counts extract's severity.
func TestJob_ThreeStagesKillResume(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a real process")
	}
	items := pick(400, 2000)
	dir := t.TempDir()
	input := writeItems(t, dir, items, 7)
	jobFile := writeJobFiles(t, dir, "items.jsonl", "")
	db := filepath.Join(dir, "job.db")
	sim, url := startSim(t, geminisim.Config{Latency: geminisim.Latency{Base: 30 * time.Millisecond}})
	_ = input

	// answered is every answer the simulator gave; committed those the
	// database holds (a skipped extract holds no answer).
	answered := func() (n int64) {
		for _, ok := range okCalls(sim) {
			n += ok
		}
		return n
	}
	committed := func() int64 {
		n := int64(0)
		for _, stage := range []string{"classify", "extract", "tone"} {
			for _, out := range exportStage(t, db, stage) {
				if out["skipped"] != true {
					n++
				}
			}
		}
		return n
	}
	// thrownAway is the answers given but not committed when a process
	// died, over every kill so far (the gap between the two only grows at
	// a kill): the only ones a resume pays again.
	var thrownAway int64
	kills := 0
	for runNo := 0; ; runNo++ {
		if runNo > 10 {
			t.Fatal("no clean finish after 10 runs")
		}
		args := []string{"run", "--db", db, "--quiet"}
		if runNo == 0 {
			args = []string{"run", "-f", jobFile, "--quiet"}
		}
		cmd := exec.Command(binary, args...)
		cmd.Env = append(os.Environ(), simEnv(url)...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		if kills < 2 {
			// Kill once the simulator has answered a share of this run's
			// work: mid-classify the first time, mid-extract/tone later.
			target := sim.Stats().Calls + int64(items/3)
			for sim.Stats().Calls < target {
				select {
				case err := <-done:
					t.Fatalf("run %d ended before the kill: %v\n%s", runNo, err, tail(errb.String(), 2000))
				case <-time.After(5 * time.Millisecond):
				}
			}
			cmd.Process.Signal(syscall.SIGKILL)
			<-done
			kills++
			idle(t, sim)
			thrownAway = answered() - committed()
			continue
		}
		if err := <-done; err != nil {
			t.Fatalf("run %d: %v\n%s", runNo, err, tail(errb.String(), 3000))
		}
		break
	}

	s := status(t, db)
	if s.Counts.Items != items {
		t.Fatalf("items = %d, want %d", s.Counts.Items, items)
	}
	for _, st := range s.Counts.Stages {
		if st.Queued != 0 {
			t.Errorf("stage %s: %d still queued", st.Stage, st.Queued)
		}
	}
	wantSanitizeDead, wantClassifyDead := expectedDead(items)
	if done := s.Counts.Done; done != items-wantSanitizeDead-wantClassifyDead {
		t.Errorf("done = %d, want %d", done, items-wantSanitizeDead-wantClassifyDead)
	}
	classify, extract, tone := exportStage(t, db, "classify"), exportStage(t, db, "extract"), exportStage(t, db, "tone")
	bugs := 0
	for id, c := range classify {
		e, ok := extract[id]
		if !ok {
			continue // blocked later? every classified item reaches extract
		}
		isBug := c["label"] == "bug"
		skipped := e["skipped"] == true
		if isBug == skipped {
			t.Errorf("item %s: label %v, extract skipped=%v", id, c["label"], skipped)
		}
		if isBug {
			bugs++
			if e["severity"] == nil || e["component"] == nil {
				t.Errorf("item %s: extract output %v lacks the schema's fields", id, e)
			}
		}
		if _, ok := tone[id]; !ok {
			t.Errorf("item %s: no tone output", id)
		}
	}
	if bugs == 0 {
		t.Fatal("no bug among the items: the when: was never true")
	}
	// Each stage's call for an item is its own simulator item: answered
	// once, plus once more for each answer a kill threw away (a request
	// the dead process had already sent can reach the simulator after it
	// looked idle: a few more).
	if n, extra := paidTwice(sim); extra > thrownAway+int64(kills*3) || extra < thrownAway {
		t.Errorf("%d answers paid twice (%d prompts); the kills threw away %d answers", extra, n, thrownAway)
	}
	if got, want := answered()-committed(), thrownAway; got > want+int64(kills*3) {
		t.Errorf("%d answers given beyond those committed, %d thrown away by kills", got, want)
	}
	if agg := aggregate(t, db); !strings.Contains(agg, "skipped") || !strings.Contains(agg, "high") && !strings.Contains(agg, "medium") && !strings.Contains(agg, "low") {
		t.Errorf("the aggregate does not count extract.severity:\n%s", agg)
	}
	t.Logf("FIGURES | job 3 LLM stages | %d items, %d bugs, %d kills, %d calls, %d answers thrown away by the kills and paid again", items, bugs, kills, sim.Stats().Calls, thrownAway)
}

// TestJob_AddStage: a stage added to a job that already finished runs
// for the done items only, and only the new stage is paid (the
// simulator's accounting); its diff is shown. A changed model is refused
// with the diff until --rerun-changed.
func TestJob_AddStage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	dir := t.TempDir()
	items := 120
	writeItems(t, dir, items, 3)
	sim, url := startSim(t, geminisim.Config{})
	body := "db: job.db\ninput: {path: items.jsonl}\nstages:\n  - sanitize: {}\n  - llm:\n      name: classify\n      output: {label: [bug, pricing, feature_request, ux, praise, other]}\n  - aggregate: {}\n"
	jobFile := filepath.Join(dir, "job.yaml")
	os.WriteFile(jobFile, []byte(body), 0o600)
	if r := run(t, simEnv(url), "run", "-f", jobFile, "--quiet"); r.code != 0 {
		t.Fatalf("first run: exit %d: %s", r.code, r.err)
	}
	before := sim.Stats().Calls

	grown := strings.Replace(body, "  - aggregate: {}", "  - llm:\n      name: tone\n      prompt: 'Tone of {{.Text}} ({{.Out.classify.label}})'\n      output: {label: [calm, angry]}\n  - aggregate: {}", 1)
	os.WriteFile(jobFile, []byte(grown), 0o600)
	r := run(t, simEnv(url), "run", "-f", jobFile, "--quiet")
	if r.code != 0 {
		t.Fatalf("run with the added stage: exit %d: %s", r.code, r.err)
	}
	if !strings.Contains(r.err, "stage tone added") {
		t.Errorf("no notice of the added stage:\n%s", r.err)
	}
	s := status(t, filepath.Join(dir, "job.db"))
	var classified int
	for _, st := range s.Counts.Stages {
		if st.Stage == "classify" {
			classified = st.Output
		}
	}
	if paid := sim.Stats().Calls - before; paid != int64(classified) {
		t.Errorf("the added stage cost %d calls, want %d (one per classified item, nothing else)", paid, classified)
	}
	for h, it := range sim.Stats().Items {
		if it.Calls > 1 {
			t.Errorf("prompt %s answered %d times", h[:8], it.Calls)
		}
	}

	// A changed model: refused with the diff, then re-run on request.
	changed := strings.Replace(grown, "name: tone\n", "name: tone\n      model: gemini-2.5-pro\n", 1)

	// A stage added while another changed: refused before anything is
	// written (the stage list stays as it was).
	both := strings.Replace(changed, "  - aggregate: {}", "  - llm: {name: lang, output: {label: [en, other]}}\n  - aggregate: {}", 1)
	os.WriteFile(jobFile, []byte(both), 0o600)
	r = run(t, simEnv(url), "run", "-f", jobFile, "--quiet")
	if r.code != 2 || !strings.Contains(r.err, "tone.model: (none) -> gemini-2.5-pro") || !strings.Contains(r.err, "nothing was changed") {
		t.Fatalf("added and changed stages: exit %d, want 2 with the diff:\n%s", r.code, r.err)
	}
	if st := status(t, filepath.Join(dir, "job.db")); len(st.Counts.Stages) != 4 {
		t.Errorf("after the refusal the database holds %d stages, want the 4 it had", len(st.Counts.Stages))
	}
	os.WriteFile(jobFile, []byte(changed), 0o600)
	r = run(t, simEnv(url), "run", "-f", jobFile, "--quiet")
	if r.code != 2 || !strings.Contains(r.err, "tone.model: (none) -> gemini-2.5-pro") || !strings.Contains(r.err, "--rerun-changed") {
		t.Fatalf("changed model: exit %d, want 2 with the diff:\n%s", r.code, r.err)
	}
	before = sim.Stats().Calls
	if r = run(t, simEnv(url), "run", "-f", jobFile, "--quiet", "--rerun-changed", "--yes"); r.code != 0 {
		t.Fatalf("--rerun-changed: exit %d: %s", r.code, r.err)
	}
	if paid := sim.Stats().Calls - before; paid != int64(classified) {
		t.Errorf("re-running tone cost %d calls, want %d (classify is not paid again)", paid, classified)
	}

	// retry works on a job's database with its stored job: the items the
	// safety filter blocks at classify are sent again (and blocked again).
	r = run(t, simEnv(url), "retry", "--db", filepath.Join(dir, "job.db"), "--stage", "classify", "--quiet")
	if r.code != 0 || !strings.Contains(r.err, "re-queued 2 dead letters at classify") {
		t.Errorf("retry: exit %d\n%s", r.code, r.err)
	}
	if r = run(t, simEnv(url), "retry", "--db", filepath.Join(dir, "job.db"), "--stage", "tones"); r.code != 2 || !strings.Contains(r.err, `did you mean tone`) {
		t.Errorf("retry of an unknown stage: exit %d\n%s", r.code, r.err)
	}

	// rerun works on a job's database too, asking first above
	// --confirm-above items.
	jobDB := filepath.Join(dir, "job.db")
	if r = run(t, simEnv(url), "rerun", "--db", jobDB, "--from-stage", "tone", "--dry-run"); r.code != 0 ||
		!strings.Contains(r.out, fmt.Sprintf("would re-run tone, aggregate for %d items", classified)) {
		t.Errorf("rerun --dry-run: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	if r = run(t, simEnv(url), "rerun", "--db", jobDB, "--from-stage", "tone", "--quiet"); r.code != 2 || !strings.Contains(r.err, "--yes") {
		t.Errorf("rerun above --confirm-above: exit %d\n%s", r.code, r.err)
	}
	// The same questions are answered from the answer cache; --no-cache
	// asks again.
	for _, tc := range []struct {
		args []string
		want int64
	}{{nil, 0}, {[]string{"--no-cache"}, int64(classified)}} {
		before = sim.Stats().Calls
		if r = run(t, simEnv(url), append([]string{"rerun", "--db", jobDB, "--from-stage", "tone", "--yes", "--quiet"}, tc.args...)...); r.code != 0 {
			t.Errorf("rerun --yes %v: exit %d\n%s", tc.args, r.code, r.err)
		}
		if paid := sim.Stats().Calls - before; paid != tc.want {
			t.Errorf("rerun --from-stage tone %v cost %d calls, want %d", tc.args, paid, tc.want)
		}
	}
	// A resume whose stored input file is gone resumes what the
	// database holds.
	os.Rename(filepath.Join(dir, "items.jsonl"), filepath.Join(dir, "items.old"))
	if r = run(t, simEnv(url), "run", "--db", jobDB, "--quiet"); r.code != 0 || !strings.Contains(r.err, "is not there: resuming") {
		t.Errorf("resume without its input file: exit %d\n%s", r.code, r.err)
	}

	// job show prints the stored job, which decodes as a job file.
	r = run(t, nil, "job", "show", "--db", filepath.Join(dir, "job.db"))
	if r.code != 0 || !strings.Contains(r.out, "name: tone") || !strings.Contains(r.out, "model: gemini-2.5-pro") {
		t.Errorf("job show: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
}

// TestJob_Vertex runs a job with `backend: vertex` against the
// simulator's Vertex AI paths, with no credentials (a custom base URL).
func TestJob_Vertex(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	dir := t.TempDir()
	items := 60
	writeItems(t, dir, items, 5)
	sim := geminisim.New(geminisim.Config{})
	var mu sync.Mutex
	paths := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths[r.URL.Path]++
		mu.Unlock()
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); sim.Close() })
	body := "db: job.db\ninput: {path: items.jsonl}\nbackend: vertex\nproject: acme\nlocation: europe-west4\nbase_url: " + srv.URL +
		"\nstages:\n  - llm:\n      name: classify\n      output: {label: [bug, pricing, feature_request, ux, praise, other]}\n  - aggregate: {}\n"
	jobFile := filepath.Join(dir, "job.yaml")
	os.WriteFile(jobFile, []byte(body), 0o600)
	// No API key: Vertex AI does not use one.
	env := []string{"GEMINI_API_KEY=", "GOOGLE_API_KEY=", "GOOGLE_GEMINI_BASE_URL="}
	r := run(t, env, "run", "-f", jobFile, "--quiet")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.err)
	}
	want := "/v1beta1/projects/acme/locations/europe-west4/publishers/google/models/gemini-2.5-flash:generateContent"
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 1 || paths[want] < items-2 {
		t.Errorf("paths = %v, want only %s", paths, want)
	}
}

// TestJob_InitRunPlan: `sawtooth init && sawtooth run -f sawtooth.yaml`
// works against the simulator as written, and `plan` prices the job
// without a call.
func TestJob_InitRunPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	dir := t.TempDir()
	sim, url := startSim(t, geminisim.Config{})
	jobFile := filepath.Join(dir, "sawtooth.yaml")
	if r := run(t, nil, "init", jobFile); r.code != 0 {
		t.Fatalf("init: exit %d: %s", r.code, r.err)
	}
	if r := run(t, nil, "init", jobFile); r.code != 2 || !strings.Contains(r.err, "--force") {
		t.Errorf("init over an existing file: exit %d: %s", r.code, r.err)
	}
	r := run(t, simEnv(url), "plan", "-f", jobFile)
	if r.code != 0 || !strings.Contains(r.out, "classify") || !strings.Contains(r.out, "gemini-2.5-flash") {
		t.Fatalf("plan: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	if calls := sim.Stats().Calls; calls != 0 {
		t.Errorf("plan made %d calls", calls)
	}
	r = run(t, simEnv(url), "plan", "-f", jobFile, "--count-tokens", "5")
	if r.code != 0 || !strings.Contains(r.out, "countTokens") || sim.Stats().Calls != 0 || sim.Stats().CountTokensCalls != 5 {
		t.Fatalf("plan --count-tokens 5: exit %d, %d generate and %d countTokens calls\n%s\n%s", r.code, sim.Stats().Calls, sim.Stats().CountTokensCalls, r.out, r.err)
	}
	if r = run(t, simEnv(url), "run", "-f", jobFile, "--quiet"); r.code != 0 {
		t.Fatalf("run of the starter job: exit %d: %s", r.code, r.err)
	}
	s := status(t, filepath.Join(dir, "sawtooth.db"))
	if s.Counts.Items == 0 || s.Counts.Done == 0 {
		t.Errorf("status after the starter job: %+v", s.Counts)
	}
	// Tomorrow night: the stored job with a new input file, from cron.
	night2 := filepath.Join(dir, "night2.jsonl")
	os.WriteFile(night2, []byte(`{"id":"n1","text":"crashes on start since the update","app":"a"}`+"\n"+`{"id":"n2","text":"too expensive for what it does","app":"a"}`+"\n"), 0o600)
	before := sim.Stats().Calls
	if r = run(t, simEnv(url), "run", "--db", filepath.Join(dir, "sawtooth.db"), "--input", night2, "--quiet"); r.code != 0 || !strings.Contains(r.err, "2 new") {
		t.Fatalf("run --db --input: exit %d: %s", r.code, r.err)
	}
	if paid := sim.Stats().Calls - before; paid != 2 {
		t.Errorf("the second night paid %d calls, want 2", paid)
	}
	// Stage flags do not mix with a job: the job file says those.
	if r = run(t, simEnv(url), "run", "-f", jobFile, "--model", "gemini-2.5-pro"); r.code != 2 || !strings.Contains(r.err, "--model: set in the job file") {
		t.Errorf("run -f with --model: exit %d: %s", r.code, r.err)
	}

	// Planned again, the done items are not counted.
	if r = run(t, simEnv(url), "plan", "-f", jobFile); r.code != 0 || !strings.Contains(r.out, "0 items new") {
		t.Errorf("plan after the run: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
}

// TestJob_RerunChangedPaysOnlyDependants: a changed stage re-runs with
// --rerun-changed, and the stages after it run again too, but a stage
// whose question did not change (it does not read the changed stage's
// output) is answered from the answer cache: only the changed stage is
// paid.
func TestJob_RerunChangedPaysOnlyDependants(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	dir := t.TempDir()
	writeItems(t, dir, 150, 11)
	sim, url := startSim(t, geminisim.Config{})
	body := `db: job.db
input: {path: items.jsonl}
stages:
  - llm:
      name: classify
      output: {label: [bug, pricing, feature_request, ux, praise, other]}
  - llm:
      name: extract
      when: 'classify.label == "bug"'
      prompt: 'Extract the bug: {{.Text}}'
      output: {label: [crash, slow, other]}
  - llm:
      name: summary
      prompt: 'Summarise: {{.Text}}'
      output: {label: [short, long]}
  - aggregate: {count: extract.label}
`
	jobFile := filepath.Join(dir, "job.yaml")
	os.WriteFile(jobFile, []byte(body), 0o600)
	if r := run(t, simEnv(url), "run", "-f", jobFile, "--quiet"); r.code != 0 {
		t.Fatalf("first run: exit %d: %s", r.code, r.err)
	}
	bugs := 0
	for _, out := range exportStage(t, filepath.Join(dir, "job.db"), "extract") {
		if out["skipped"] != true {
			bugs++
		}
	}
	os.WriteFile(jobFile, []byte(strings.Replace(body, "Extract the bug:", "Name the kind of bug:", 1)), 0o600)
	before := sim.Stats().Calls
	r := run(t, simEnv(url), "run", "-f", jobFile, "--quiet", "--rerun-changed", "--yes")
	if r.code != 0 || !strings.Contains(r.err, "extract.prompt: Extract the bug: {{.Text}} -> Name the kind of bug: {{.Text}}") {
		t.Fatalf("--rerun-changed: exit %d\n%s", r.code, r.err)
	}
	if paid := sim.Stats().Calls - before; paid != int64(bugs) || bugs == 0 {
		t.Errorf("re-running extract cost %d calls, want %d (the bugs; summary answered from the cache)", paid, bugs)
	}
}

// TestJob_FromFlagsDatabase: a database run from flags records the job
// the flags compiled to (job show prints it), and resumes under an
// equivalent job file without re-running or paying anything.
func TestJob_FromFlagsDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	dir := t.TempDir()
	input := writeItems(t, dir, 100, 13)
	sim, url := startSim(t, geminisim.Config{})
	db := filepath.Join(dir, "flags.db")
	if r := run(t, simEnv(url), "run", "--db", db, "--input", input, "--quiet"); r.code != 0 {
		t.Fatalf("flags run: exit %d: %s", r.code, r.err)
	}
	if r := run(t, nil, "job", "show", "--db", db); r.code != 0 || !strings.Contains(r.out, "preset: classify") {
		t.Errorf("job show on a flags database: exit %d: %s%s", r.code, r.out, r.err)
	}
	jobFile := filepath.Join(dir, "job.yaml")
	os.WriteFile(jobFile, []byte(`db: flags.db
input: {path: items.jsonl}
stages:
  - sanitize: {}
  - llm: {name: classify, output: {label: [bug, feature_request, pricing, ux, praise, other]}}
  - aggregate: {}
`), 0o600)
	before := sim.Stats().Calls
	r := run(t, simEnv(url), "run", "-f", jobFile, "--quiet")
	if r.code != 0 {
		t.Fatalf("the equivalent job: exit %d: %s", r.code, r.err)
	}
	if paid := sim.Stats().Calls - before; paid != 0 {
		t.Errorf("the equivalent job paid %d calls, want 0", paid)
	}
	if r = run(t, nil, "job", "show", "--db", db); r.code != 0 || !strings.Contains(r.out, "name: classify") {
		t.Errorf("job show after the job ran: exit %d\n%s%s", r.code, r.out, r.err)
	}
}

// TestJob_FlagsRunShownAndRunAgain: on either store, a run from flags
// records its job; `job show` prints it; the printed YAML, run with -f
// from another directory, ingests tonight's file and calls only its new
// items; no item is called twice.
func TestJob_FlagsRunShownAndRunAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary")
	}
	for _, store := range []string{"bbolt", "postgres"} {
		t.Run(store, func(t *testing.T) {
			dir := t.TempDir()
			all := writeItems(t, dir, 90, 17)
			data, err := os.ReadFile(all)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.SplitAfter(string(data), "\n")
			first := filepath.Join(dir, "first.jsonl")
			if err := os.WriteFile(first, []byte(strings.Join(lines[:60], "")), 0o600); err != nil {
				t.Fatal(err)
			}
			db := filepath.Join(dir, "flags.db")
			if store == "postgres" {
				db = startPostgres(t)
			}
			sim, url := startSim(t, geminisim.Config{})
			env := simEnv(url)
			if r := run(t, env, "run", "--db", db, "--input", first, "--quiet", "--labels", "bug,praise,other", "--max-attempts", "3"); r.code != 0 {
				t.Fatalf("flags run: exit %d: %s", r.code, r.err)
			}
			firstCalls := sim.Stats().Calls
			r := run(t, nil, "job", "show", "--db", db)
			if r.code != 0 || !strings.Contains(r.out, "preset: classify") || !strings.Contains(r.out, "max_attempts: 3") {
				t.Fatalf("job show: exit %d\n%s%s", r.code, r.out, r.err)
			}
			other := t.TempDir()
			jobFile := filepath.Join(other, "shown.yaml")
			if err := os.WriteFile(jobFile, []byte(r.out), 0o600); err != nil {
				t.Fatal(err)
			}
			if r := run(t, env, "run", "-f", jobFile, "--input", all, "--quiet"); r.code != 0 || strings.Contains(r.err, "classify.") || strings.Contains(r.err, "sanitize.") {
				t.Fatalf("run -f with the shown job: exit %d\n%s", r.code, r.err)
			}
			// Items whose question was asked before are answered from the
			// cache: the simulator sees each question at most once.
			st := sim.Stats()
			if st.Calls != int64(len(st.Items)) || st.Calls <= firstCalls {
				t.Errorf("%d calls for %d questions (%d in the first run): want one call per question, some for the new items", st.Calls, len(st.Items), firstCalls)
			}
			for id, it := range st.Items {
				if it.Calls != 1 {
					t.Errorf("item %s called %d times, want once", id, it.Calls)
				}
			}
		})
	}
}
