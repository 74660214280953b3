package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestFleet_TwoBatchedStagesSIGKILL: two workers of the real binary
// drain one PostgreSQL pipeline whose two LLM stages (triage in mode
// batch, then tone in mode batch or auto) both run through batch jobs,
// and the worker that reaches a step of the second stage's jobs first is
// SIGKILLed there. The other worker and one started in the dead one's
// place finish: every item done, each answered exactly once per stage by
// a batch job (the simulator counts an item's requests by its id, so
// once per stage is two answers), no job created twice or left open.
func TestFleet_TwoBatchedStagesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and kills real processes")
	}
	srv, _ := startPostgresServer(t)
	for _, tc := range []struct {
		name, second string
		event        geminisim.BatchEvent
		delay        time.Duration
	}{
		{"batch: between create and record", "batch", geminisim.EventCreated, 0},
		{"batch: while polling", "batch", geminisim.EventPoll, 0},
		{"batch: mid-commit", "batch", geminisim.EventResults, 20 * time.Millisecond},
		{"auto: while reading results", "auto", geminisim.EventResults, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, err := srv.NewDB("twostages")
			if err != nil {
				t.Fatal(err)
			}
			const items, size = 60, 20
			dir := t.TempDir()
			input := writeCleanItems(t, dir, items)
			k := &stepKill{event: tc.event, delay: tc.delay, fired: make(chan struct{})}
			var simp atomic.Pointer[geminisim.Server]
			const pending, running = time.Second, 200 * time.Millisecond
			observe := func(e geminisim.BatchEvent) {
				sim := simp.Load()
				if sim == nil || !fleetSecondStageAt(sim, e, items) {
					return
				}
				if k.clock != nil && e == geminisim.EventCreate {
					// The second stage's first create: every first-stage
					// job has ended, the second's stay PENDING until the
					// kill, however late a loaded worker polls.
					k.clock.holdAhead(pending + running)
				}
				k.observe(e)
			}
			cfg := geminisim.Config{Seed: 9, Batch: geminisim.BatchConfig{
				Pending: pending, Running: running, Shuffle: true, CreateDelay: time.Second, Observe: observe,
			}}
			if tc.event == geminisim.EventPoll {
				// It runs until the second stage's jobs: the first
				// stage's must end for them to exist.
				k.clock = newRunningClock()
				cfg.Now = k.clock.Now
			}
			sim, simURL := startSim(t, cfg)
			simp.Store(sim)
			k.sim = sim
			p := startKeyProxy(t, simURL)
			k.proxy = p
			tune := fmt.Sprintf("batch: {size: %d, deadline: 2m, poll: 100ms}", size)
			body := fmt.Sprintf("db: %s\ninput: {path: %s}\nfleet: {lease: 4s}\nstages:\n  - sanitize: {}\n"+
				"  - llm:\n      name: triage\n      output: {label: [bug, praise, other]}\n      mode: batch\n      %s\n"+
				"  - llm:\n      name: tone\n      prompt: 'What is the tone of this review? {{.Text}}'\n"+
				"      output: {label: [angry, calm]}\n      mode: %s\n      %s\n",
				strconv.Quote(db), strconv.Quote(input), tune, tc.second, tune)
			jobFile := filepath.Join(dir, "job.yaml")
			if err := os.WriteFile(jobFile, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			first := p.start(t, "worker-1", "run", "-f", jobFile, "--quiet")
			select {
			case <-p.first:
			case <-first.done:
				t.Fatalf("the first worker ended before any batch job: %v\n%s", first.err, first.stderr.String())
			}
			second := p.start(t, "worker-2", "run", "--db", db, "--quiet")
			go func() {
				select {
				case <-second.done:
					p.open()
				case <-p.opened:
				}
			}()
			victim := waitKill(t, k, first, second)
			<-victim.done
			if ee, ok := victim.err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("the worker at %s was not killed there: %v\n%s", k.event, victim.err, victim.stderr.String())
			}
			if k.event == geminisim.EventPoll {
				k.mu.Lock()
				st := k.atKill
				k.mu.Unlock()
				if n := liveJobs(st); n == 0 || n > secondStageJobs(st) {
					t.Fatalf("killed at a poll with %d jobs live, %d of the second stage created (%v): not while a second stage's job ran",
						n, secondStageJobs(st), st.States)
				}
			}
			survivor := first
			if victim == first {
				survivor = second
			}
			restarted := p.start(t, "worker-3", "run", "--db", db, "--quiet")
			for _, w := range []*worker{survivor, restarted} {
				<-w.done
				if w.err != nil {
					t.Fatalf("a worker after the kill: %v\n%s", w.err, w.stderr.String())
				}
			}
			if s := finalPlaces(t, db, items); s.Counts.Done != items {
				t.Errorf("%d items done, want all %d", s.Counts.Done, items)
			}
			answered := okCalls(sim)
			for key, n := range answered {
				if n != 2 {
					t.Errorf("item %s answered %d times by two stages, want once each", key, n)
				}
			}
			if len(answered) != items {
				t.Errorf("the simulator answered %d items, want %d", len(answered), items)
			}
			bs := sim.BatchStats()
			if bs.Rows != 2*items {
				t.Errorf("batch jobs answered %d requests, want %d: every item through a job at each stage", bs.Rows, 2*items)
			}
			tone := 0
			for name, n := range bs.ByDisplayName {
				if n != 1 {
					t.Errorf("job %s created %d times", name, n)
				}
				if strings.Contains(name, "-tone-") {
					tone++
				}
			}
			if tone == 0 {
				t.Error("no job of the second stage")
			}
		})
	}
}

// fleetSecondStageAt is secondStageAt for a fleet whose first stage
// sends firstItems requests, each once: a create (or its upload) is the
// second stage's once every one of them is answered. Counting the first
// stage's jobs would not do: two workers that reserve at the same moment
// may split one job's items into two (see TestFleet_BatchStageFailedJob),
// and the last of them would be read as the second stage's first create.
func fleetSecondStageAt(sim *geminisim.Server, e geminisim.BatchEvent, firstItems int) bool {
	if e == geminisim.EventUpload || e == geminisim.EventCreate {
		return sim.BatchStats().Rows >= firstItems
	}
	return secondStageAt(sim, e, 0)
}
