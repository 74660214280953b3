package e2e

import (
	"bytes"
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

// killSwitch kills the process it is armed with the first time the
// simulator reaches its event, before the simulator answers: a kill at an
// exact step of the Batch API protocol.
type killSwitch struct {
	mu    sync.Mutex
	event geminisim.BatchEvent
	delay time.Duration
	proc  *os.Process
	dead  <-chan struct{} // closed once proc was reaped
	fired bool
	// expecting: a process is being started (expect) and not yet armed:
	// its event waits for arm, since a loaded test goroutine can hand the
	// process over after the child already reached the event.
	expecting bool
	armed     *sync.Cond
	// clock, when set, is the simulator's held clock: released once the
	// kill is done (for a delayed kill, once it was sent).
	clock *heldClock
	// sim, when set, is read as the kill fires: atKill is its Batch API
	// state then, for the test to check that the kill landed where it
	// was meant to.
	sim    *geminisim.Server
	atKill geminisim.BatchStats
}

func (k *killSwitch) observe(e geminisim.BatchEvent) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if e != k.event {
		return
	}
	for k.expecting && k.proc == nil {
		k.armed.Wait()
	}
	if k.proc == nil || k.fired {
		return
	}
	k.fired = true
	if k.sim != nil {
		k.atKill = k.sim.BatchStats()
	}
	if k.delay > 0 {
		// Let the answer through and kill while the client works on it.
		p, d, c := k.proc, k.delay, k.clock
		go func() {
			time.Sleep(d)
			p.Signal(syscall.SIGKILL)
			if c != nil {
				c.release()
			}
		}()
		return
	}
	k.proc.Signal(syscall.SIGKILL)
	// The simulator answers a dead connection: wait for the death so the
	// answer cannot be read.
	<-k.dead
	if k.clock != nil {
		k.clock.release()
	}
}

// live is how many jobs were PENDING or RUNNING as the kill fired, and
// the Batch API's state then.
func (k *killSwitch) live() (int, geminisim.BatchStats) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return liveJobs(k.atKill), k.atKill
}

// liveJobs is how many of st's jobs are PENDING or RUNNING.
func liveJobs(st geminisim.BatchStats) int {
	return st.States["BATCH_STATE_PENDING"] + st.States["BATCH_STATE_RUNNING"]
}

// expect is called before the process to kill is started: its event,
// should the child reach it first, waits for arm.
func (k *killSwitch) expect() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.armed == nil {
		k.armed = sync.NewCond(&k.mu)
	}
	k.expecting = true
}

func (k *killSwitch) arm(p *os.Process, dead <-chan struct{}) {
	k.mu.Lock()
	k.proc, k.dead, k.fired, k.expecting = p, dead, false, false
	if k.armed != nil {
		k.armed.Broadcast()
	}
	k.mu.Unlock()
}

// holdForPoll gives the simulator of cfg a clock that stands still until
// ks killed, when ks kills at a poll: every job stays PENDING until the
// run polled one and died there, however late a loaded run polls. On the
// wall clock (PENDING for 2 s) a run that first polled more than
// Pending+Running after the create found every job ended and was never
// killed.
func holdForPoll(ks *killSwitch, cfg *geminisim.Config) {
	if ks.event == geminisim.EventPoll {
		ks.clock = newHeldClock()
		cfg.Now = ks.clock.Now
	}
}

// checkPollKill fails the test if a kill at a poll found no job PENDING
// or RUNNING: it did not land while a job ran.
func checkPollKill(t *testing.T, ks *killSwitch) {
	t.Helper()
	if n, st := ks.live(); ks.event == geminisim.EventPoll && n == 0 {
		t.Fatalf("killed at a poll with no job live: %v", st.States)
	}
}

// Batch API timing of these tests: the simulator lists a job createDelay
// after it accepted the create (as a create finished after its client
// died), and the client looks for a job whose create's outcome it does
// not know until settle after it sent that create. settle is far above
// createDelay: a loaded machine can delay the server's handler, but not
// by the difference.
const (
	createDelay = 3 * time.Second
	settle      = 15 * time.Second
)

// batchArgs is a batch run of jobs of 40 requests, sent as files when
// files is set.
func batchArgs(db, input string, files bool) []string {
	args := []string{"run", "--db", db, "--input", input, "--quiet", "--mode", "batch",
		"--batch-size", "40", "--batch-deadline", "1m", "--batch-poll", "100ms", "--batch-create-settle", settle.String()}
	if files {
		args = append(args, "--batch-inline-bytes", "1000")
	}
	return args
}

// TestBatch_SIGKILLAtEachStep kills `sawtooth run --mode batch` at each
// step of a batch job's life, runs it again, and checks that every item was
// answered exactly once by the simulator's accounting and that no job was
// created twice. The simulator lists a created job only createDelay later,
// so a resumed run that looks for a job whose create was in flight when
// the first run died does not find it at once, as on a loaded server.
func TestBatch_SIGKILLAtEachStep(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a real process")
	}
	steps := []struct {
		name  string
		event geminisim.BatchEvent
		delay time.Duration
		files bool
	}{
		{"after the intent, before create", geminisim.EventUpload, 0, true},
		// The server may or may not have read the whole request when
		// the client dies: the job may exist or not.
		{"while the create is in flight", geminisim.EventCreate, 0, false},
		{"between create and record", geminisim.EventCreated, 0, false},
		{"while polling", geminisim.EventPoll, 0, false},
		{"while reading inlined results", geminisim.EventResults, 0, false},
		{"while downloading a results file", geminisim.EventResults, 0, true},
		{"mid-commit", geminisim.EventResults, 20 * time.Millisecond, false},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			t.Parallel()
			const items = 100
			dir := t.TempDir()
			input := writeItems(t, dir, items, 3)
			ks := &killSwitch{event: step.event, delay: step.delay}
			cfg := geminisim.Config{Seed: 5, Batch: geminisim.BatchConfig{
				Pending: 2 * time.Second, Running: 200 * time.Millisecond, Shuffle: true, Observe: ks.observe,
				CreateDelay: createDelay,
			}}
			holdForPoll(ks, &cfg)
			sim, url := startSim(t, cfg)
			ks.sim = sim
			db := filepath.Join(dir, "b.db")

			cmd := exec.Command(binary, batchArgs(db, input, step.files)...)
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
				t.Fatalf("first run was not killed at %s: %v\n%s", step.name, err, errb.String())
			}
			ks.arm(nil, nil)
			checkPollKill(t, ks)

			r := run(t, simEnv(url), batchArgs(db, input, step.files)...)
			if r.code != 0 {
				t.Fatalf("resumed run: exit %d\n%s", r.code, r.err)
			}
			if step.event == geminisim.EventCreated && !strings.Contains(r.err, " 1 re-attached") {
				t.Errorf("the resumed run did not re-attach the job created before the kill:\n%s", r.err)
			}
			finalPlaces(t, db, items)
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
		})
	}
}
