package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// writeRepeats writes n reviews whose last 30% repeat earlier texts, ids
// prefixed by prefix, and returns the path and how many texts are
// distinct. No text is blank or blocked: every item is answered.
func writeRepeats(t testing.TB, dir, prefix string, n int) (string, int) {
	t.Helper()
	distinct := n - n*3/10
	themes := []string{"the app crashes when I open it", "the subscription is too expensive", "please add a dark mode",
		"the layout is confusing", "I love this app", "it is fine I guess"}
	var b bytes.Buffer
	for i := range n {
		j := i
		if i >= distinct {
			j = (i - distinct) * 3 % distinct
		}
		line, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("%s%05d", prefix, i),
			"text": fmt.Sprintf("%s (review %d)", themes[j%len(themes)], j), "app": "photo-editor", "rating": 1 + j%5, "date": "2026-03-01"})
		b.Write(line)
		b.WriteByte('\n')
	}
	path := filepath.Join(dir, prefix+".jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, distinct
}

// TestBatch_DuplicatesPaidOnce: batch mode over 300 reviews with 30%
// duplicate texts, in jobs of 40 (duplicates meet inside a job and
// across jobs), sends and pays the distinct questions only, by the
// simulator's per-request and per-item accounting; a second batch run
// over the same texts under other ids pays nothing and creates no job.
func TestBatch_DuplicatesPaidOnce(t *testing.T) {
	t.Parallel()
	const n = 300
	dir := t.TempDir()
	first, distinct := writeRepeats(t, dir, "a", n)
	again, _ := writeRepeats(t, dir, "b", n)
	sim, url := startSim(t, geminisim.Config{Seed: 5, Batch: geminisim.BatchConfig{Shuffle: true, Pending: 200 * time.Millisecond}})
	db := filepath.Join(dir, "b.db")
	if r := run(t, simEnv(url), batchArgs(db, first, false)...); r.code != 0 {
		t.Fatalf("batch run: exit %d\n%s", r.code, r.err)
	}
	bs := sim.BatchStats()
	if bs.Rows != distinct {
		t.Errorf("the simulator answered %d batch requests for %d distinct texts of %d items", bs.Rows, distinct, n)
	}
	if items := sim.Stats().Items; len(items) != distinct {
		t.Errorf("the simulator billed %d items, want the %d distinct texts", len(items), distinct)
	}
	if twice, extra := paidTwice(sim); twice > 0 {
		t.Errorf("%d items answered more than once (%d extra answers)", twice, extra)
	}
	finalPlaces(t, db, n)

	if r := run(t, simEnv(url), batchArgs(db, again, false)...); r.code != 0 {
		t.Fatalf("second batch run: exit %d\n%s", r.code, r.err)
	} else if !strings.Contains(r.err, fmt.Sprintf("%d answered (%d without a request", n, n)) {
		t.Errorf("the second run did not answer every item without a request:\n%s", r.err)
	}
	if after := sim.BatchStats(); after.Rows != bs.Rows || after.Created != bs.Created || after.BilledTokens != bs.BilledTokens {
		t.Errorf("the second run over the same texts paid: %d requests in %d jobs, was %d in %d", after.Rows, after.Created, bs.Rows, bs.Created)
	}
	if calls := sim.Stats().Calls; calls != 0 {
		t.Errorf("%d online calls", calls)
	}
	finalPlaces(t, db, 2*n)
}

// simBatchBill is what the simulator billed, in USD at the batch price
// of the default model: each item's prompt and answer tokens (items are
// answered at most once here; the test checks it).
func simBatchBill(sim *geminisim.Server) float64 {
	in, out := stages.BatchPrice(stages.DefaultModel)
	var usd float64
	for _, it := range sim.Stats().Items {
		if it.BilledTokens > 0 {
			usd += (float64(it.PromptTokens)*in + float64(it.BilledTokens-it.PromptTokens)*out) / 1e6
		}
	}
	return usd
}

// TestBatch_BudgetTotalAcrossSIGKILL: `run --mode batch --budget-total`
// killed between a job's create and its record, then run again under the
// same cap, counts that job as spent: it stops with exit 3 and the
// budget's message, and the simulator's whole bill stays within the cap.
// A run with a higher cap finishes, every item answered once.
func TestBatch_BudgetTotalAcrossSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a real process")
	}
	t.Parallel()
	const n, budget = 150, 0.003
	dir := t.TempDir()
	input, _ := writeRepeats(t, dir, "a", n)
	ks := &killSwitch{event: geminisim.EventCreated}
	sim, url := startSim(t, geminisim.Config{Seed: 5, Batch: geminisim.BatchConfig{
		Pending: 100 * time.Millisecond, Running: 100 * time.Millisecond, Observe: ks.observe, CreateDelay: createDelay,
	}})
	db := filepath.Join(dir, "b.db")
	args := append(batchArgs(db, input, false), "--budget-total", fmt.Sprint(budget))

	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), simEnv(url)...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	ks.expect()
	if err := cmd.Start(); err != nil {
		ks.arm(nil, nil)
		t.Fatal(err)
	}
	dead := make(chan struct{})
	var err error
	go func() { err = cmd.Wait(); close(dead) }()
	ks.arm(cmd.Process, dead)
	<-dead
	if ee, ok := err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("first run was not killed between create and record: %v\n%s", err, errb.String())
	}
	ks.arm(nil, nil)

	r := run(t, simEnv(url), args...)
	if r.code != 3 || !strings.Contains(r.err, "total budget $0.0030 reached") || !strings.Contains(r.err, "raise --budget-total to continue") {
		t.Fatalf("resumed run: exit %d, want 3 with the budget's message\n%s", r.code, r.err)
	}
	if bill := simBatchBill(sim); bill <= 0 || bill > budget {
		t.Errorf("the simulator billed $%.6f, want some, within --budget-total $%.4f", bill, budget)
	}
	if twice, extra := paidTwice(sim); twice > 0 {
		t.Errorf("%d items answered more than once (%d extra answers)", twice, extra)
	}

	if r := run(t, simEnv(url), append(batchArgs(db, input, false), "--budget-total", "1")...); r.code != 0 {
		t.Fatalf("run with a higher cap: exit %d\n%s", r.code, r.err)
	}
	finalPlaces(t, db, n)
	if twice, extra := paidTwice(sim); twice > 0 {
		t.Errorf("%d items answered more than once (%d extra answers)", twice, extra)
	}
	for name, c := range sim.BatchStats().ByDisplayName {
		if c != 1 {
			t.Errorf("job %s created %d times", name, c)
		}
	}
}
