package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/sawtooth-dev/sawtooth/store"
)

// stoppedBatchRun runs `run --mode batch` on n items until the simulator
// reaches at, then stops it as a killed run stops: the job is left open
// in db, holding the items (an intent without the API's name when at is
// EventCreated). It returns the simulator, its URL and db.
func stoppedBatchRun(t *testing.T, n int, bc geminisim.BatchConfig, at geminisim.BatchEvent) (*geminisim.Server, string, string) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var release func()
	bc.Observe, release = stopAtEvent(t, at, stop)
	sim, url := batchSim(t, bc)
	dir := t.TempDir()
	db, input := filepath.Join(dir, "b.db"), filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), n); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	err := NewApp(Config{Stdout: &stdout, Stderr: &stderr}).RunContext(ctx, []string{"sawtooth", "run", "--db", db, "--input", input,
		"--base-url", url, "--quiet", "--mode", "batch", "--batch-poll", "10ms"})
	release()
	if !errors.Is(err, pipeline.ErrStopped) {
		t.Fatalf("run: %v, want it stopped\n%s", err, stderr.String())
	}
	return sim, url, db
}

// classifyPlaces counts classify's queue and the items done.
func classifyPlaces(t *testing.T, path string) (queued, done int) {
	t.Helper()
	db, err := store.Open(path, store.Options{Stages: namedStages(), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, err := db.Counts()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Stages {
		if s.Stage == "classify" {
			queued = s.Queued
		}
	}
	return queued, c.Done
}

// TestBatchCancel_SucceededJobIsCollected is the repro of a batch run
// killed after its job was created, the job succeeding while the run was
// down, and `batch cancel` run on it: its answers are collected, none of
// its items goes back to the queue to be paid again.
func TestBatchCancel_SucceededJobIsCollected(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   geminisim.BatchEvent
	}{
		{"recorded job", geminisim.EventResults},
		{"intent whose create answer was lost", geminisim.EventCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim, url, db := stoppedBatchRun(t, 20, geminisim.BatchConfig{}, tc.at)
			var stdout, stderr syncBuffer
			if err := runApp([]string{"sawtooth", "batch", "cancel", "--db", db, "1"}, &stdout, &stderr); err != nil {
				t.Fatalf("cancel: %v\n%s", err, stderr.String())
			}
			if !strings.Contains(stderr.String(), "had already SUCCEEDED") || !strings.Contains(stderr.String(), "collected") {
				t.Errorf("cancel said:\n%s", stderr.String())
			}
			if queued, _ := classifyPlaces(t, db); queued != 0 {
				t.Errorf("%d items back in the classify queue, want 0: they were answered by the job", queued)
			}
			bs := sim.BatchStats()
			if bs.Cancels != 0 || bs.Rows == 0 {
				t.Errorf("simulator %+v: want the job's answers used, no cancel", bs)
			}
			// The next run pays nothing for classify.
			if err := runApp([]string{"sawtooth", "run", "--db", db, "--base-url", url, "--quiet"}, &stdout, &stderr); err != nil {
				t.Fatalf("next run: %v\n%s", err, stderr.String())
			}
			if st := sim.Stats(); st.Calls != 0 {
				t.Errorf("the next run made %d online calls for items the job answered", st.Calls)
			}
			var list syncBuffer
			if err := runApp([]string{"sawtooth", "batch", "list", "--db", db}, &list, &stderr); err != nil || !strings.Contains(list.String(), "SUCCEEDED (closed)") {
				t.Errorf("batch list: %v\n%s", err, list.String())
			}
		})
	}
}

// TestBatchCancel_RunningJob: a job still running is cancelled at the
// endpoint it was created at (not $GOOGLE_GEMINI_BASE_URL, not another
// --base-url that does not know it); its items go back to the queue once
// the API reports it CANCELLED, and the list shows that state.
func TestBatchCancel_RunningJob(t *testing.T) {
	sim, _, db := stoppedBatchRun(t, 8, geminisim.BatchConfig{Fates: []geminisim.Fate{geminisim.FateStuck}}, geminisim.EventPoll)
	_, other := batchSim(t, geminisim.BatchConfig{})
	t.Setenv("GOOGLE_GEMINI_BASE_URL", other)
	var stdout, stderr syncBuffer
	err := runApp([]string{"sawtooth", "batch", "cancel", "--db", db, "--base-url", other, "1"}, &stdout, &stderr)
	var ue *UsageError
	if err == nil || errors.As(err, &ue) || !strings.Contains(err.Error(), "does not know") || !strings.Contains(err.Error(), "--base-url") {
		t.Errorf("cancel at an endpoint without the job: %v, want it refused naming --base-url", err)
	}
	if queued, _ := classifyPlaces(t, db); queued != 0 {
		t.Errorf("classify queue %d after a refused cancel, want 0", queued)
	}
	stderr = syncBuffer{}
	if err := runApp([]string{"sawtooth", "batch", "cancel", "--db", db, "1"}, &stdout, &stderr); err != nil {
		t.Fatalf("cancel: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "where the job was created") || !strings.Contains(stderr.String(), "CANCELLED") || !strings.Contains(stderr.String(), "8 items back in the classify queue") {
		t.Errorf("cancel said:\n%s", stderr.String())
	}
	if queued, _ := classifyPlaces(t, db); queued != 8 {
		t.Errorf("classify queue %d, want 8", queued)
	}
	if bs := sim.BatchStats(); bs.Cancels != 1 {
		t.Errorf("simulator %+v: want the job cancelled", bs)
	}
	var list syncBuffer
	if err := runApp([]string{"sawtooth", "batch", "list", "--db", db}, &list, &stderr); err != nil || !strings.Contains(list.String(), "CANCELLED (closed)") {
		t.Errorf("batch list: %v\n%s", err, list.String())
	}
}

// TestBatchCommands_DuringARun runs `batch list|show|cancel` while `run
// --mode batch` holds the database and polls its job: list and show read
// the jobs the run published, cancel refuses naming the run's process,
// and nothing is cancelled.
func TestBatchCommands_DuringARun(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	type outcome struct {
		list, show, notes string
		listErr, showErr  error
		cancelErr         error
	}
	var during *outcome
	var db string
	bc := geminisim.BatchConfig{Fates: []geminisim.Fate{geminisim.FateStuck}}
	bc.Observe = func(e geminisim.BatchEvent) {
		if e != geminisim.EventPoll || during != nil {
			return
		}
		// The run waits for this poll's answer, holding the database.
		during = &outcome{}
		var list, show, notes syncBuffer
		during.listErr = runApp([]string{"sawtooth", "batch", "list", "--db", db}, &list, &notes)
		during.showErr = runApp([]string{"sawtooth", "batch", "show", "--db", db, "1"}, &show, &notes)
		during.cancelErr = runApp([]string{"sawtooth", "batch", "cancel", "--db", db, "1"}, &show, &notes)
		during.list, during.show, during.notes = list.String(), show.String(), notes.String()
		stop()
	}
	sim, url := batchSim(t, bc)
	dir := t.TempDir()
	db = filepath.Join(dir, "b.db")
	input := filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 6); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	err := NewApp(Config{Stdout: &stdout, Stderr: &stderr}).RunContext(ctx, []string{"sawtooth", "run", "--db", db, "--input", input,
		"--base-url", url, "--quiet", "--mode", "batch", "--batch-poll", "10ms"})
	if !errors.Is(err, pipeline.ErrStopped) || during == nil {
		t.Fatalf("run: %v, want it stopped after the commands ran\n%s", err, stderr.String())
	}
	if during.listErr != nil || !strings.Contains(during.list, "batches/") || !strings.Contains(during.list, "PENDING") {
		t.Errorf("batch list during the run: %v\n%s", during.listErr, during.list)
	}
	if during.showErr != nil || !strings.Contains(during.show, `"name": "batches/`) {
		t.Errorf("batch show during the run: %v\n%s", during.showErr, during.show)
	}
	if !strings.Contains(during.notes, "held by a running sawtooth (pid") {
		t.Errorf("list and show did not say the jobs come from the running process:\n%s", during.notes)
	}
	if during.cancelErr == nil || !strings.Contains(during.cancelErr.Error(), "driven by the running sawtooth (pid") || !strings.Contains(during.cancelErr.Error(), "nothing changed") {
		t.Errorf("batch cancel during the run: %v, want it refused naming the process", during.cancelErr)
	}
	if bs := sim.BatchStats(); bs.Cancels != 0 {
		t.Errorf("simulator %+v: the job was cancelled", bs)
	}
	// Once the run is gone, the database itself answers.
	var list syncBuffer
	if err := runApp([]string{"sawtooth", "batch", "list", "--db", db}, &list, &stderr); err != nil || !strings.Contains(list.String(), "PENDING") || strings.Contains(list.String(), "closed") {
		t.Errorf("batch list after the run: %v\n%s", err, list.String())
	}
}

// TestBatchCancel_JobStageSucceededIsCollected: a job file's LLM stage
// other than classify (triage) ran through batch jobs and was stopped
// once its job had answered; `batch cancel` reads the job's answers with
// the stage the stored job builds, as for classify: collected, nothing
// back in the queue to be paid again.
func TestBatchCancel_JobStageSucceededIsCollected(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	observe, release := stopAtEvent(t, geminisim.EventResults, stop)
	sim, url := batchSim(t, geminisim.BatchConfig{Observe: observe})
	dir := t.TempDir()
	if _, err := writeFirstLines(filepath.Join(dir, "items.jsonl"), testReviews(t), 12); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, "job.yaml")
	body := "db: job.db\ninput: {path: items.jsonl}\nbase_url: " + url + "\nstages:\n" +
		"  - llm:\n      name: triage\n      output: {label: [bug, praise, other]}\n" +
		"      mode: batch\n      batch: {deadline: 30s, poll: 10ms}\n"
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	err := NewApp(Config{Stdout: &stdout, Stderr: &stderr}).RunContext(ctx, []string{"sawtooth", "run", "-f", f, "--quiet"})
	release()
	if !errors.Is(err, pipeline.ErrStopped) {
		t.Fatalf("run: %v, want it stopped\n%s", err, stderr.String())
	}
	db := filepath.Join(dir, "job.db")
	if err := runApp([]string{"sawtooth", "batch", "cancel", "--db", db, "1"}, &stdout, &stderr); err != nil {
		t.Fatalf("cancel: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "had already SUCCEEDED") || !strings.Contains(stderr.String(), "collected") {
		t.Errorf("cancel said:\n%s", stderr.String())
	}
	d, err := openReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if c, err := d.Counts(); err != nil || c.Stages[0].Queued != 0 || c.Done != 12 {
		t.Errorf("counts %+v %v: want all 12 answered by the job, none queued", c, err)
	}
	if bs := sim.BatchStats(); bs.Cancels != 0 || bs.Rows != 12 {
		t.Errorf("simulator %+v: want the job's answers used, no cancel", bs)
	}
}

// stopAtEvent is a simulator Observe that stops a run (stop) at the
// first request that reaches at, and holds the simulator's answer to it
// until release, called once the run has returned. Stopped first, the
// run cannot read that answer (a SUCCEEDED job's results, say) and
// commit it before it sees the stop, which a loaded machine let it do
// now and then. Later requests reaching at are answered at once.
func stopAtEvent(t testing.TB, at geminisim.BatchEvent, stop func()) (observe func(geminisim.BatchEvent), release func()) {
	returned := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(returned) }) }
	t.Cleanup(release)
	return func(e geminisim.BatchEvent) {
		if e == at {
			stop()
			<-returned
		}
	}, release
}
