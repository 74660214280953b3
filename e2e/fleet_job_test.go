package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestFleet_JobFile: a job file whose db is a PostgreSQL URL runs as on
// a file. The pipeline records the job and its own stage list; status,
// job show, retry and rerun read them from the database; a rerun is
// answered from the answer cache (--no-cache pays again); a changed
// stage is refused with its diff until --rerun-changed; a resume with
// `run --db URL --input FILE` runs the new items through the stored job;
// and an added stage is refused with what to do instead.
func TestFleet_JobFile(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and runs the binary")
	}
	url := startPostgres(t)
	dir := t.TempDir()
	const items = 120
	writeItems(t, dir, items, 3)
	sim, simURL := startSim(t, geminisim.Config{})
	env := simEnv(simURL)
	body := "db: " + strconv.Quote(url) + `
input: {path: items.jsonl}
stages:
  - sanitize: {}
  - llm:
      name: classify
      output: {label: [bug, pricing, feature_request, ux, praise, other]}
      limiter: {ceiling: 16}
  - llm:
      name: tone
      prompt: 'Tone of {{.Text}} ({{.Out.classify.label}})'
      output: {label: [calm, angry]}
      limiter: {ceiling: 16}
  - aggregate: {}
`
	jobFile := filepath.Join(dir, "job.yaml")
	write := func(s string) {
		if err := os.WriteFile(jobFile, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(body)
	if r := run(t, env, "run", "-f", jobFile, "--quiet"); r.code != 0 {
		t.Fatalf("run -f with a postgres db: exit %d\n%s", r.code, r.err)
	}
	s := finalPlaces(t, url, items)
	var names []string
	classified := 0
	for _, st := range s.Counts.Stages {
		names = append(names, st.Stage)
		if st.Stage == "classify" {
			classified = st.Output
		}
	}
	if strings.Join(names, ",") != "sanitize,classify,tone,aggregate" || classified == 0 {
		t.Fatalf("status shows stages %v, %d classified; want the job's four stages", names, classified)
	}
	// The LLM stages' limiters were the fleet's: the shared quota row of
	// their model is in the database.
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	rows, _ := conn.Query(context.Background(), `SELECT key FROM sawtooth.quota ORDER BY key`)
	keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
	conn.Close(context.Background())
	if err != nil || len(keys) != 1 || !strings.HasPrefix(keys[0], "gemini/") {
		t.Errorf("shared quota rows %v, %v; want the one of the stages' model", keys, err)
	}
	if r := run(t, nil, "job", "show", "--db", url); r.code != 0 || !strings.Contains(r.out, "name: tone") {
		t.Errorf("job show: exit %d\n%s\n%s", r.code, r.out, r.err)
	}

	// retry reads the stored job: classify's dead letters (blocked
	// prompts) are sent again, and blocked again.
	r := run(t, env, "retry", "--db", url, "--stage", "classify", "--quiet")
	if r.code != 0 || !regexp.MustCompile(`re-queued [1-9]\d* dead letters? at classify`).MatchString(r.err) {
		t.Errorf("retry: exit %d\n%s", r.code, r.err)
	}
	if r = run(t, env, "retry", "--db", url, "--stage", "tones"); r.code != 2 || !strings.Contains(r.err, "did you mean tone") {
		t.Errorf("retry of an unknown stage: exit %d\n%s", r.code, r.err)
	}

	// rerun reads it too, and the same questions come from the cache.
	for _, tc := range []struct {
		args []string
		want int64
	}{{nil, 0}, {[]string{"--no-cache"}, int64(classified)}} {
		before := sim.Stats().Calls
		if r = run(t, env, append([]string{"rerun", "--db", url, "--from-stage", "tone", "--yes", "--quiet"}, tc.args...)...); r.code != 0 {
			t.Errorf("rerun %v: exit %d\n%s", tc.args, r.code, r.err)
		}
		if paid := sim.Stats().Calls - before; paid != tc.want {
			t.Errorf("rerun --from-stage tone %v cost %d calls, want %d", tc.args, paid, tc.want)
		}
	}

	// A changed stage: refused with the diff, re-run on request.
	changed := strings.Replace(body, "name: tone\n", "name: tone\n      model: gemini-2.5-pro\n", 1)
	write(changed)
	if r = run(t, env, "run", "-f", jobFile, "--quiet"); r.code != 2 || !strings.Contains(r.err, "tone.model: (none) -> gemini-2.5-pro") {
		t.Fatalf("changed model: exit %d, want 2 with the diff\n%s", r.code, r.err)
	}
	before := sim.Stats().Calls
	if r = run(t, env, "run", "-f", jobFile, "--quiet", "--rerun-changed", "--yes"); r.code != 0 {
		t.Fatalf("--rerun-changed: exit %d\n%s", r.code, r.err)
	}
	if paid := sim.Stats().Calls - before; paid != int64(classified) {
		t.Errorf("re-running tone cost %d calls, want %d (classify is not paid again)", paid, classified)
	}

	// New items through the stored job, from `run --db URL --input`.
	more := filepath.Join(dir, "more.jsonl")
	if err := os.WriteFile(more, []byte(`{"id":"new1","text":"the new update crashes on start","app":"photo-editor","rating":1,"date":"2026-12-01"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r = run(t, env, "run", "--db", url, "--input", more, "--quiet"); r.code != 0 {
		t.Fatalf("run --db URL --input: exit %d\n%s", r.code, r.err)
	}
	finalPlaces(t, url, items+1)
	if out := exportStage(t, url, "tone"); out["new1"] == nil {
		t.Errorf("the new item has no tone output: the stored job did not run it")
	}

	// An added stage is refused, the pipeline unchanged.
	write(strings.Replace(changed, "  - aggregate: {}", "  - llm: {name: lang, output: {label: [en, other]}}\n  - aggregate: {}", 1))
	if r = run(t, env, "run", "-f", jobFile, "--quiet"); r.code != 2 || !strings.Contains(r.err, "keeps the stage list it was created with") {
		t.Errorf("an added stage: exit %d, want 2 and what to do\n%s", r.code, r.err)
	}
	if st := status(t, url); len(st.Counts.Stages) != 4 {
		t.Errorf("after the refusal the pipeline holds %d stages, want 4", len(st.Counts.Stages))
	}
}
