package e2e

import (
	"encoding/json"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestFleet_BatchSIGKILL: two workers of the real binary drain one
// PostgreSQL pipeline with --mode batch against the simulator's Batch
// API, and the first is SIGKILLed as soon as either creates a job (the
// killed one's create may be in flight, its job made but not recorded).
// The other takes the dead worker's jobs over once their lease ends,
// re-attaches by display name what was created, and finishes: every item
// is done or dead once, each answered by exactly one batch request by the
// simulator's accounting, and no job was created twice.
func TestFleet_BatchSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and kills a real process")
	}
	url := startPostgres(t)
	const items = 200
	dir := t.TempDir()
	input := writeItems(t, dir, items, 3)
	ks := &killSwitch{event: geminisim.EventCreate}
	sim, simURL := startSim(t, geminisim.Config{Seed: 5, Batch: geminisim.BatchConfig{
		Pending: time.Second, Running: 200 * time.Millisecond, Shuffle: true, Observe: ks.observe,
		CreateDelay: createDelay,
	}})
	env := simEnv(simURL)
	args := []string{"run", "--db", url, "--quiet", "--mode", "batch", "--batch-size", "40", "--batch-deadline", "2m",
		"--batch-poll", "100ms", "--batch-create-settle", settle.String(), "--lease", "4s", "--heartbeat", "2s"}

	ks.expect()
	first := startWorker(t, env, append(append([]string{}, args...), "--input", input)...)
	ks.arm(first.cmd.Process, first.done)
	t.Cleanup(func() {
		if !first.exited() {
			first.cmd.Process.Kill()
			<-first.done
		}
	})
	db := openFleetDB(t, url)
	waitFor(t, func() bool {
		c, err := db.Counts()
		return err == nil && c.Items == items
	}, "the first worker to ingest the input")
	second := startWorker(t, env, args...)
	t.Cleanup(func() {
		if !second.exited() {
			second.cmd.Process.Kill()
			<-second.done
		}
	})

	<-first.done
	if ee, ok := first.err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the first worker was not killed at a create: %v\n%s", first.err, first.stderr.String())
	}
	ks.arm(nil, nil)
	<-second.done
	if second.err != nil {
		t.Fatalf("the second worker: %v\n%s", second.err, second.stderr.String())
	}

	finalPlaces(t, url, items)
	if twice, extra := paidTwice(sim); twice > 0 {
		t.Errorf("%d items answered more than once (%d extra answers)", twice, extra)
	}
	sanitizeDead, classifyDead := expectedDead(items)
	once := 0
	for _, n := range okCalls(sim) {
		if n == 1 {
			once++
		}
	}
	if want := items - sanitizeDead - classifyDead; once != want {
		t.Errorf("the simulator answered %d items once, want %d", once, want)
	}
	for name, n := range sim.BatchStats().ByDisplayName {
		if n != 1 {
			t.Errorf("job %s created %d times", name, n)
		}
	}
	// `batch list` reads the jobs from PostgreSQL as from a file.
	code, out, errs := sawtooth(t, nil, "batch", "list", "--db", url, "--json")
	var jobs []pipeline.BatchJob
	if code != 0 || json.Unmarshal([]byte(out), &jobs) != nil {
		t.Fatalf("batch list: exit %d\n%s%s", code, out, errs)
	}
	named := 0
	for _, j := range jobs {
		if j.Open() {
			t.Errorf("job %d (%s) left open: %+v", j.Num, j.DisplayName, j)
		}
		if j.Name != "" {
			named++
		}
	}
	if created := len(sim.BatchStats().ByDisplayName); named != created {
		t.Errorf("batch list names %d jobs, the simulator created %d", named, created)
	}
}
