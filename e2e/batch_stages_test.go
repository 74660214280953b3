package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestBatch_TwoStagesSIGKILL kills a job-file run whose two LLM stages
// (triage, then tone) both run through batch jobs, at each step of the
// life of the second stage's first job (and once in the first stage's),
// runs it again, and checks by the simulator's per-item accounting that
// each item was answered exactly once per stage and that no job was
// created twice. The second stage in auto mode is killed too. A step of
// the second stage is reached only once the first stage's jobs are all
// made (upload, create) or a job of the second stage exists (the rest):
// the driver takes the stages one after the other.
func TestBatch_TwoStagesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a real process")
	}
	steps := []struct {
		name, second string
		event        geminisim.BatchEvent
		delay        time.Duration
		files        bool
		first        bool // kill in the first stage's jobs
	}{
		{"first stage: while polling", "batch", geminisim.EventPoll, 0, false, true},
		{"after the intent, before create", "batch", geminisim.EventUpload, 0, true, false},
		{"while the create is in flight", "batch", geminisim.EventCreate, 0, false, false},
		{"between create and record", "batch", geminisim.EventCreated, 0, false, false},
		{"while polling", "batch", geminisim.EventPoll, 0, false, false},
		{"while reading inlined results", "batch", geminisim.EventResults, 0, false, false},
		{"while downloading a results file", "batch", geminisim.EventResults, 0, true, false},
		{"mid-commit", "batch", geminisim.EventResults, 20 * time.Millisecond, false, false},
		{"auto: while polling", "auto", geminisim.EventPoll, 0, false, false},
		{"auto: mid-commit", "auto", geminisim.EventResults, 20 * time.Millisecond, false, false},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			t.Parallel()
			const items, size = 100, 40
			dir := t.TempDir()
			input := writeItems(t, dir, items, 7)
			sanitizeDead, blocked := expectedDead(items)
			firstJobs := (items - sanitizeDead + size - 1) / size
			ks := &killSwitch{event: step.event, delay: step.delay}
			var simp atomic.Pointer[geminisim.Server]
			const pending, running = 2 * time.Second, 200 * time.Millisecond
			observe := func(e geminisim.BatchEvent) {
				sim := simp.Load()
				if sim == nil || !step.first && !secondStageAt(sim, e, firstJobs) {
					return
				}
				if !step.first && ks.clock != nil && e == geminisim.EventCreate {
					// The second stage's first create: every first-stage
					// job has ended, the second's stay PENDING until the
					// kill.
					ks.clock.holdAhead(pending + running)
				}
				ks.observe(e)
			}
			cfg := geminisim.Config{Seed: 8, Batch: geminisim.BatchConfig{
				Pending: pending, Running: running, Shuffle: true, Observe: observe,
				CreateDelay: createDelay,
			}}
			if step.event == geminisim.EventPoll && !step.first {
				// The clock runs until the second stage's jobs: the
				// first stage's must end for them to exist.
				ks.clock = newRunningClock()
				cfg.Now = ks.clock.Now
			} else {
				holdForPoll(ks, &cfg)
			}
			sim, url := startSim(t, cfg)
			simp.Store(sim)
			ks.sim = sim
			db := filepath.Join(dir, "b.db")
			jobFile := filepath.Join(dir, "job.yaml")
			tune := fmt.Sprintf("batch: {size: %d, deadline: 1m, poll: 100ms, create_settle: %s", size, settle)
			if step.files {
				tune += ", inline_bytes: 1000"
			}
			tune += "}"
			body := fmt.Sprintf("db: %q\ninput: {path: %q}\nbase_url: %s\nstages:\n  - sanitize: {}\n"+
				"  - llm:\n      name: triage\n      output: {label: [bug, praise, other]}\n      mode: batch\n      %s\n"+
				"  - llm:\n      name: tone\n      prompt: \"What is the tone of this review? {{.Text}}\"\n"+
				"      output: {label: [angry, calm]}\n      mode: %s\n      %s\n", db, input, url, tune, step.second, tune)
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
			// The kill came in the stage it was meant for: the second
			// stage's step once the first stage's jobs were all made.
			made := map[string]int{}
			for name := range sim.BatchStats().ByDisplayName {
				made[strings.Split(name, "-")[2]]++
			}
			if step.first && made["tone"] != 0 || !step.first && made["triage"] != firstJobs {
				t.Fatalf("killed with jobs by stage %v: not in the %s stage's jobs", made, map[bool]string{true: "first", false: "second"}[step.first])
			}
			checkPollKill(t, ks)
			if n, st := ks.live(); step.event == geminisim.EventPoll && !step.first && n > secondStageJobs(st) {
				t.Fatalf("killed at a poll with %d jobs live, %d of them at most the second stage's (%v): the poll may have been of a first stage's job",
					n, secondStageJobs(st), st.States)
			}

			r := run(t, simEnv(url), args...)
			if r.code != 0 {
				t.Fatalf("resumed run: exit %d\n%s", r.code, r.err)
			}
			if step.event == geminisim.EventCreated && !strings.Contains(r.err, " 1 re-attached") {
				t.Errorf("the resumed run did not re-attach the job created before the kill:\n%s", r.err)
			}
			finalPlaces(t, db, items)
			// The simulator counts a batch request by its key, the item's
			// id, whichever stage asks: an item both stages answered (each
			// at least once, as every item is done) was answered exactly
			// once per stage when it has two answers.
			twice := 0
			for key, n := range okCalls(sim) {
				switch {
				case n == 2:
					twice++
				case n > 2:
					t.Errorf("item %s answered %d times by two stages", key, n)
				}
			}
			if want := items - sanitizeDead - blocked; twice != want {
				t.Errorf("the simulator answered %d items twice (once per stage), want %d", twice, want)
			}
			jobs := map[string]int{}
			for name, n := range sim.BatchStats().ByDisplayName {
				if n != 1 {
					t.Errorf("job %s created %d times", name, n)
				}
				for _, stage := range []string{"triage", "tone"} {
					if strings.Contains(name, "-"+stage+"-") {
						jobs[stage]++
					}
				}
			}
			if jobs["triage"] == 0 || jobs["tone"] == 0 {
				t.Errorf("batch jobs by stage %v, want some of each", jobs)
			}
			code, out, errs := sawtooth(t, nil, "batch", "list", "--db", db)
			if code != 0 || !strings.Contains(out, " triage ") || !strings.Contains(out, " tone ") {
				t.Errorf("batch list (exit %d) does not name both stages:\n%s%s", code, out, errs)
			}
		})
	}
}

// secondStageJobs is how many of st's jobs are the second stage's (tone).
func secondStageJobs(st geminisim.BatchStats) int {
	n := 0
	for name, c := range st.ByDisplayName {
		if strings.Contains(name, "-tone-") {
			n += c
		}
	}
	return n
}

// secondStageAt reports whether event e of sim belongs to the second
// stage's jobs: a create (or its upload) once the first stage's jobs
// all exist, any other event once a job of the second stage does.
func secondStageAt(sim *geminisim.Server, e geminisim.BatchEvent, firstJobs int) bool {
	first, second := 0, 0
	for name := range sim.BatchStats().ByDisplayName {
		switch {
		case strings.Contains(name, "-triage-"):
			first++
		case strings.Contains(name, "-tone-"):
			second++
		}
	}
	if e == geminisim.EventUpload || e == geminisim.EventCreate {
		return first >= firstJobs
	}
	return second > 0
}
