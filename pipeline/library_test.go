package pipeline_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/sawtooth-dev/sawtooth/store"
)

// libraryChildEnv, set to a DB path, makes the test binary the child of
// TestLibrary_KillAndResume: it runs the library pipeline on that file
// against the simulator at $SAWTOOTH_LIBRARY_SIM, printing "language <id>"
// for every call of the custom stage, until it is killed.
const libraryChildEnv = "SAWTOOTH_LIBRARY_CHILD"

// libraryItems is how many items the library test drains.
const libraryItems = 300

// libraryRecords are the library test's items: English, German and French
// reviews, every 50th blank (dead at sanitize).
func libraryRecords() []pipeline.Record {
	texts := []string{
		"the app crashes and it is not fixed (review %d)",
		"die App ist zu teuer und der Preis ist nicht fair (review %d)",
		"la mise à jour est pas bonne et le prix est cher (review %d)",
	}
	recs := make([]pipeline.Record, libraryItems)
	for i := range recs {
		text := fmt.Sprintf(texts[i%3], i)
		if i%50 == 7 {
			text = "  "
		}
		recs[i] = pipeline.Record{ID: fmt.Sprintf("r%03d", i), Text: text}
	}
	return recs
}

// libraryChild is the child process: exit 0 when the run completed, 1 on
// any error (printed to stderr).
func libraryChild() int {
	ctx := context.Background()
	client := &http.Client{Transport: &http.Transport{}}
	var outMu sync.Mutex
	lang := languageDetector{OnCall: func(id string) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintln(os.Stdout, "language", id)
	}}
	defs, configs, err := libraryPipeline(ctx, os.Getenv("SAWTOOTH_LIBRARY_SIM"), client, lang)
	if err == nil {
		err = runLibrary(ctx, os.Getenv(libraryChildEnv), defs, configs)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "library child:", err)
		return 1
	}
	return 0
}

// runLibrary opens the store at path, ingests libraryRecords (unchanged
// ones are skipped, so a resume ingests nothing) and runs the pipeline.
func runLibrary(ctx context.Context, path string, defs []store.StageDef, configs []pipeline.StageConfig) error {
	db, err := store.Open(path, store.Options{Stages: defs})
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.Ingest(libraryRecords()); err != nil {
		return err
	}
	r := &pipeline.Runner{Store: db, Stages: configs, RunID: store.NewRunID(time.Now())}
	_, err = r.Run(ctx)
	return err
}

// TestLibrary_KillAndResume runs the library pipeline of Example_customStage
// (a custom language stage between classify and aggregate) in a child
// process, SIGKILLs it mid-run, reopens the same bbolt file in this
// process and resumes: every item ends done (or dead at sanitize, for the
// blank ones) exactly once, the store checks clean, and the custom stage
// was called once per item, twice at most for an item whose language
// output the kill threw away, never again for one committed before it;
// the simulator billed classify likewise.
func TestLibrary_KillAndResume(t *testing.T) {
	if testing.Short() {
		t.Skip("runs and kills a child process")
	}
	sim := geminisim.New(geminisim.Config{Latency: geminisim.Latency{Base: 10 * time.Millisecond, Jitter: 10 * time.Millisecond}})
	url, err := sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	path := filepath.Join(t.TempDir(), "library.db")

	// The child runs until the custom stage has been called killAt times.
	const killAt = 60
	calls := map[string]int{} // custom stage calls per item, both processes
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), libraryChildEnv+"="+path, "SAWTOOTH_LIBRARY_SIM="+url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	seen := 0
	for sc.Scan() {
		id, ok := strings.CutPrefix(sc.Text(), "language ")
		if !ok {
			continue
		}
		calls[id]++
		if seen++; seen == killAt {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Every line the child wrote before it died was a call: all counted.
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v, want killed by SIGKILL after %d calls of the custom stage (it made %d)\n%s", err, killAt, seen, stderr.String())
	}

	ctx := context.Background()
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	var mu sync.Mutex
	lang := languageDetector{OnCall: func(id string) { mu.Lock(); calls[id]++; mu.Unlock() }}
	defs, configs, err := libraryPipeline(ctx, url, client, lang)
	if err != nil {
		t.Fatal(err)
	}

	// What the kill left: some items past the custom stage, not all.
	db, err := store.Open(path, store.Options{Stages: defs})
	if err != nil {
		t.Fatalf("reopen after the kill: %v", err)
	}
	if changed := db.ChangedStages(); len(changed) != 0 {
		t.Errorf("stages changed across processes: %v", changed)
	}
	mid, err := db.Counts()
	if err != nil {
		t.Fatal(err)
	}
	committed := outputsOf(t, db, "language")
	classified := outputsOf(t, db, "classify")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if mid.Items != libraryItems || mid.Done+mid.Stages[0].Dead == libraryItems {
		t.Fatalf("after the kill: %+v: the kill must land mid-run", mid)
	}

	if err := runLibrary(ctx, path, defs, configs); err != nil {
		t.Fatalf("resume: %v", err)
	}

	db, err = store.Open(path, store.Options{Stages: defs, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if problems, err := db.Check(); err != nil || len(problems) > 0 {
		t.Fatalf("check after the resume: %v %q", err, problems)
	}
	final, err := db.Counts()
	if err != nil {
		t.Fatal(err)
	}
	blank := libraryItems / 50
	if final.Done != libraryItems-blank || final.Stages[0].Dead != blank {
		t.Fatalf("after the resume: %+v, want %d done and %d dead at sanitize", final, libraryItems-blank, blank)
	}
	if tally, err := db.Tally(); err != nil || tally.Items != int64(final.Done) {
		t.Errorf("tally of %d items (err %v), want %d: an item folded twice or never", tally.Items, err, final.Done)
	}
	langOut := outputsOf(t, db, "language")
	billed, simItems := map[string]int64{}, sim.Stats().Items
	for _, r := range libraryRecords() {
		billed[r.ID] = simItems[geminisim.ItemID(r.ID)].OK
	}
	again := 0
	for _, r := range libraryRecords() {
		id, n := r.ID, calls[r.ID]
		if strings.TrimSpace(r.Text) == "" {
			if n != 0 || billed[id] != 0 || langOut[id] {
				t.Errorf("blank item %s: %d custom calls, %d billed answers, language output %v; want none", id, n, billed[id], langOut[id])
			}
			continue
		}
		switch {
		case !langOut[id]:
			t.Errorf("item %s has no language output", id)
		case committed[id] && n != 1:
			t.Errorf("item %s: custom stage called %d times, its output was committed before the kill", id, n)
		case n < 1 || n > 2:
			t.Errorf("item %s: custom stage called %d times, want 1, or 2 when the kill threw its output away", id, n)
		}
		if n == 2 {
			again++
		}
		switch b := billed[id]; {
		case classified[id] && b != 1:
			t.Errorf("item %s: %d classify answers billed, its output was committed before the kill", id, b)
		case b < 1 || b > 2:
			t.Errorf("item %s: %d classify answers billed, want 1, or 2 when the kill caught it", id, b)
		}
	}
	t.Logf("killed after %d custom calls: %d items past the custom stage, %d classified; the resume called the custom stage again for %d items",
		seen, len(committed), len(classified), again)
}

// outputsOf returns the ids with an output at stage.
func outputsOf(t *testing.T, db *store.DB, stage string) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	err := db.ForEachOutput(stage, func(rec pipeline.Record, _ json.RawMessage) error {
		ids[rec.ID] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}
