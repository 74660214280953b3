package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestBatch_JobStageSIGKILL kills a job-file run whose LLM stage is not
// the classify preset (a label stage of its own name) and runs through
// batch jobs (mode: batch, and mode: auto), at the steps of a job's life
// after its create is known, runs it again, and checks that every item was
// answered exactly once by the simulator's accounting and that no job was
// created twice. TestBatch_SIGKILLAtEachStep covers every step for the
// classify stage; what differs here is only which stage the jobs ask.
func TestBatch_JobStageSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a real process")
	}
	steps := []struct {
		name, mode string
		event      geminisim.BatchEvent
		delay      time.Duration
	}{
		{"batch: while polling", "batch", geminisim.EventPoll, 0},
		{"batch: while reading results", "batch", geminisim.EventResults, 0},
		{"auto: mid-commit", "auto", geminisim.EventResults, 20 * time.Millisecond},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			t.Parallel()
			const items = 100
			dir := t.TempDir()
			input := writeItems(t, dir, items, 4)
			ks := &killSwitch{event: step.event, delay: step.delay}
			cfg := geminisim.Config{Seed: 6, Batch: geminisim.BatchConfig{
				Pending: 2 * time.Second, Running: 200 * time.Millisecond, Shuffle: true, Observe: ks.observe,
			}}
			holdForPoll(ks, &cfg)
			sim, url := startSim(t, cfg)
			ks.sim = sim
			db := filepath.Join(dir, "b.db")
			jobFile := filepath.Join(dir, "job.yaml")
			body := fmt.Sprintf("db: %s\ninput: {path: %s}\nbase_url: %s\nstages:\n  - sanitize: {}\n"+
				"  - llm:\n      name: triage\n      output: {label: [bug, praise, other]}\n"+
				"      mode: %s\n      batch: {size: 40, deadline: 1m, poll: 100ms}\n", db, input, url, step.mode)
			if err := os.WriteFile(jobFile, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"run", "-f", jobFile, "--quiet"}

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
				t.Fatalf("first run was not killed at %s: %v\n%s", step.name, err, errb.String())
			}
			ks.arm(nil, nil)
			checkPollKill(t, ks)

			if r := run(t, simEnv(url), args...); r.code != 0 {
				t.Fatalf("resumed run: exit %d\n%s", r.code, r.err)
			}
			finalPlaces(t, db, items)
			if twice, extra := paidTwice(sim); twice > 0 {
				t.Errorf("%d items answered more than once (%d extra answers)", twice, extra)
			}
			sanitizeDead, blocked := expectedDead(items)
			once := 0
			for _, n := range okCalls(sim) {
				if n == 1 {
					once++
				}
			}
			if want := items - sanitizeDead - blocked; once != want {
				t.Errorf("the simulator answered %d items once, want %d", once, want)
			}
			if st := sim.BatchStats(); st.Created == 0 {
				t.Errorf("no batch job created: %+v", st)
			}
			for name, n := range sim.BatchStats().ByDisplayName {
				if n != 1 {
					t.Errorf("job %s created %d times", name, n)
				}
			}
		})
	}
}
