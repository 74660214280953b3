package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// tally collects the figures of parallel subtests for the closing table.
type tally struct {
	mu                               sync.Mutex
	cases, survived, lost, dups, rep int
}

func (ta *tally) add(survived, lost, dups, repaid int) {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	ta.cases++
	ta.survived += survived
	ta.lost += lost
	ta.dups += dups
	ta.rep += repaid
}

// faultOutcomes are the simulator's answers that are faults for a client.
var faultOutcomes = []geminisim.Outcome{
	geminisim.OutcomeRateLimited, geminisim.OutcomeErr500, geminisim.OutcomeErr503, geminisim.OutcomeOverloaded,
	geminisim.OutcomeHang, geminisim.OutcomeMalformed, geminisim.OutcomeBlockPrompt, geminisim.OutcomeBlockCandidate,
	geminisim.OutcomeMaxTokens, geminisim.OutcomeBadKey, geminisim.OutcomeNotFound,
}

// faults counts the faults the simulators answered with.
func faults(sims ...*geminisim.Server) int {
	n := 0
	for _, s := range sims {
		st := s.Stats()
		for _, o := range faultOutcomes {
			n += int(st.Outcomes[o])
		}
	}
	return n
}

// faultSim is a fast simulator for the matrix: a few hundred items take a
// second or two when nothing goes wrong.
func faultSim(seed int64) geminisim.Config {
	return geminisim.Config{
		Latency: geminisim.Latency{Base: 5 * time.Millisecond, Jitter: 10 * time.Millisecond},
		Seed:    seed,
	}
}

// faultArgs is a run with a request timeout long enough that only a hung
// call reaches it, even on a loaded machine: an answer that arrives after
// the client gave up is billed, and asked for again. The hang case passes
// its own, short, --timeout (the last one given wins).
func faultArgs(db, input string, extra ...string) []string {
	return append([]string{"run", "--db", db, "--input", input, "--quiet", "--timeout", "20s", "--start", "16"}, extra...)
}

// settled checks the documented end state of a finished pipeline: every
// item done or dead at exactly one stage, verify clean, the blank items
// dead at sanitize, and every classify dead letter explained. Given the
// simulators of a case where nothing may be paid twice (no kill, no
// timeout), it also checks no item was billed more than one answer. It
// returns the items lost and the audit's problems (see audit).
func settled(t *testing.T, db string, n int, paidOnce ...*geminisim.Server) (lost, dups int) {
	t.Helper()
	st := finalPlaces(t, db, n)
	lost = n - st.Counts.Done
	for _, s := range st.Counts.Stages {
		lost -= s.Dead
	}
	wantSan, _ := expectedDead(n)
	if got := len(deadAt(t, db, "sanitize")); got != wantSan {
		t.Errorf("%d dead letters at sanitize, want the %d blank items", got, wantSan)
	}
	for _, e := range deadLetters(t, db) {
		readable(t, e)
	}
	return lost, audit(t, db, nil, paidOnce...)
}

// readable checks a dead letter says what happened in a sentence a person
// can act on.
func readable(t *testing.T, e deadEntry) {
	t.Helper()
	m := e.Dead.Message
	if e.Dead.Class == "" || len(m) < 20 || len(m) > 1000 || strings.Contains(m, "{\"error\"") || strings.Contains(m, "goroutine") {
		t.Errorf("dead letter %s at %s is not readable: class %q, message %q", e.ID, e.Stage, e.Dead.Class, m)
	}
}

// classifyDead splits the dead letters at classify: the items the safety
// filter blocks, and the others by class.
func classifyDead(t *testing.T, db string) (blocked int, byClass map[string][]deadEntry) {
	t.Helper()
	byClass = map[string][]deadEntry{}
	for _, e := range deadAt(t, db, "classify") {
		if e.Dead.Class == "permanent" && strings.Contains(e.Dead.Message, "safety filter") {
			blocked++
			continue
		}
		byClass[e.Dead.Class] = append(byClass[e.Dead.Class], e)
	}
	return blocked, byClass
}

// TestFaults runs the fault matrix of issue #5: each case injects one kind
// of failure into the simulator and checks the run ends in the documented
// state (done; dead letters with a readable reason; exit 3, resumable; or
// exit 1, fatal, with no item dead-lettered) and that a resume completes
// it where that applies. The cases run in parallel, a few hundred items
// each.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a real process")
	}
	start := time.Now()
	var ta tally
	const n = 300
	_, wantBlocked := expectedDead(n)

	// Transient faults at low rates: retried in place, every item done.
	transient := []struct {
		name    string
		faults  geminisim.Faults
		outcome geminisim.Outcome
		extra   []string
	}{
		{"503 at 5%", geminisim.Faults{Err503: 0.05}, geminisim.OutcomeErr503, nil},
		{"500 at 2%", geminisim.Faults{Err500: 0.02}, geminisim.OutcomeErr500, nil},
		{"hang at 1%", geminisim.Faults{Hang: 0.01}, geminisim.OutcomeHang, []string{"--timeout", "1s"}},
		{"malformed body at 5%", geminisim.Faults{Malformed: 0.05}, geminisim.OutcomeMalformed, nil},
		{"MAX_TOKENS at 5%", geminisim.Faults{MaxTokens: 0.05}, geminisim.OutcomeMaxTokens, nil},
	}

	t.Run("matrix", func(t *testing.T) {
		for i, tc := range transient {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				input := writeItems(t, dir, n, uint64(10+i))
				cfg := faultSim(int64(10 + i))
				cfg.Faults = tc.faults
				sim, url := startSim(t, cfg)
				db := filepath.Join(dir, "f.db")
				if r := run(t, simEnv(url), faultArgs(db, input, tc.extra...)...); r.code != 0 {
					t.Fatalf("exit %d, want 0\n%s", r.code, r.err)
				}
				// With a 1 s timeout an answer slower than that (a loaded
				// machine) is billed and asked again: only then may an item
				// be answered twice.
				var paidOnce []*geminisim.Server
				if tc.extra == nil {
					paidOnce = append(paidOnce, sim)
				}
				lost, dups := settled(t, db, n, paidOnce...)
				blocked, other := classifyDead(t, db)
				if blocked != wantBlocked || len(other) != 0 {
					t.Errorf("classify dead letters: %d blocked (want %d), others %v", blocked, wantBlocked, other)
				}
				if got := sim.Stats().Outcomes[tc.outcome]; got == 0 {
					t.Errorf("the simulator injected no %s: the case tested nothing", tc.outcome)
				}
				_, extra := paidTwice(sim)
				ta.add(faults(sim), lost, dups, int(extra))
			})
		}

		// Half the bodies malformed: a few items spend their whole budget
		// (5 attempts) and are dead-lettered with the reason; `retry`
		// re-queues them and finishes.
		t.Run("malformed body at 50%, then retry", func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			input := writeItems(t, dir, n, 20)
			cfg := faultSim(20)
			cfg.Faults = geminisim.Faults{Malformed: 0.5}
			sim, url := startSim(t, cfg)
			db := filepath.Join(dir, "f.db")
			if r := run(t, simEnv(url), faultArgs(db, input)...); r.code != 0 {
				t.Fatalf("exit %d, want 0\n%s", r.code, r.err)
			}
			finalPlaces(t, db, n)
			_, other := classifyDead(t, db)
			gaveUp := other["transient"]
			if len(gaveUp) == 0 || len(other) != 1 {
				t.Fatalf("want transient dead letters only besides the blocked items, got %v", other)
			}
			for _, e := range gaveUp {
				if !strings.Contains(e.Dead.Message, "gave up after 5 attempts") || e.Dead.Attempts != 5 {
					t.Errorf("dead letter %s: %d attempts, %q", e.ID, e.Dead.Attempts, e.Dead.Message)
				}
			}
			t.Logf("%d items dead-lettered after 5 malformed answers, e.g. %q", len(gaveUp), gaveUp[0].Dead.Message)
			for retry := 1; ; retry++ {
				r := run(t, simEnv(url), "retry", "--db", db, "--stage", "classify", "--quiet", "--timeout", "20s")
				if r.code != 0 {
					t.Fatalf("retry exit %d\n%s", r.code, r.err)
				}
				if _, other = classifyDead(t, db); len(other) == 0 {
					break
				}
				if retry == 4 {
					t.Fatalf("still dead after %d retries: %v", retry, other)
				}
			}
			lost, dups := settled(t, db, n, sim)
			if blocked, _ := classifyDead(t, db); blocked != wantBlocked {
				t.Errorf("%d blocked items dead, want %d", blocked, wantBlocked)
			}
			ta.add(faults(sim), lost, dups, 0)
		})

		// Safety blocks are permanent: dead-lettered at their first answer,
		// never retried.
		t.Run("safety blocks", func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			input := writeItems(t, dir, n, 21)
			cfg := faultSim(21)
			cfg.Faults = geminisim.Faults{BlockPrompt: 0.03, BlockCandidate: 0.03}
			sim, url := startSim(t, cfg)
			db := filepath.Join(dir, "f.db")
			if r := run(t, simEnv(url), faultArgs(db, input)...); r.code != 0 {
				t.Fatalf("exit %d, want 0\n%s", r.code, r.err)
			}
			lost, dups := settled(t, db, n, sim)
			st := sim.Stats()
			blocks := st.Outcomes[geminisim.OutcomeBlockPrompt] + st.Outcomes[geminisim.OutcomeBlockCandidate]
			blocked, other := classifyDead(t, db)
			if int64(blocked) != blocks || len(other) != 0 || blocked <= wantBlocked {
				t.Errorf("%d items dead for the safety filter, the simulator blocked %d answers; others %v", blocked, blocks, other)
			}
			for h, it := range st.Items {
				if it.Calls > 1 && it.OK == 0 {
					t.Errorf("blocked item %s called %d times: a block is permanent", h[:8], it.Calls)
				}
			}
			ta.add(faults(sim), lost, dups, 0)
		})

		// The quota halves a second into the run: 429s, AIMD backs off,
		// every item done, nothing paid twice.
		t.Run("quota halves mid-run", func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			input := writeItems(t, dir, n, 22)
			cfg := faultSim(22)
			cfg.RPM, cfg.Window = 100, time.Second
			cfg.Schedule = []geminisim.Step{{At: time.Second, Percent: 50}}
			sim, url := startSim(t, cfg)
			db := filepath.Join(dir, "f.db")
			if r := run(t, simEnv(url), faultArgs(db, input)...); r.code != 0 {
				t.Fatalf("exit %d, want 0\n%s", r.code, r.err)
			}
			lost, dups := settled(t, db, n, sim)
			if blocked, other := classifyDead(t, db); blocked != wantBlocked || len(other) != 0 {
				t.Errorf("classify dead letters: %d blocked, others %v", blocked, other)
			}
			st := sim.Stats()
			if st.Outcomes[geminisim.OutcomeRateLimited] == 0 || st.QuotaPercent != 50 {
				t.Errorf("429s %d, quota at %d%%: the quota did not bite", st.Outcomes[geminisim.OutcomeRateLimited], st.QuotaPercent)
			}
			if items, _ := paidTwice(sim); items != 0 {
				t.Errorf("%d items answered more than once", items)
			}
			ta.add(faults(sim), lost, dups, 0)
		})

		// The daily quota runs out: the run parks, exits 3 saying when to
		// resume, dead-letters nothing for it; the next day's run (a fresh
		// quota) finishes without paying twice for anything.
		t.Run("daily quota exhausted", func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			input := writeItems(t, dir, n, 23)
			cfg := faultSim(23)
			cfg.RPD = 120
			sim, url := startSim(t, cfg)
			db := filepath.Join(dir, "f.db")
			r := run(t, simEnv(url), faultArgs(db, input)...)
			if r.code != 3 || !strings.Contains(r.err, "daily quota") || !strings.Contains(r.err, "resume") {
				t.Fatalf("exit %d, want 3 with a message saying when to resume\n%s", r.code, r.err)
			}
			if _, other := classifyDead(t, db); len(other) != 0 {
				t.Errorf("items dead-lettered for the quota: %v", other)
			}
			mid := status(t, db)
			if mid.Counts.Done == n || mid.Counts.Done > 120 {
				t.Errorf("%d items done with a daily quota of 120", mid.Counts.Done)
			}
			tomorrow, url2 := startSim(t, faultSim(23))
			if r := run(t, simEnv(url2), faultArgs(db, input)...); r.code != 0 {
				t.Fatalf("resume exit %d\n%s", r.code, r.err)
			}
			lost, dups := settled(t, db, n, sim, tomorrow)
			if blocked, other := classifyDead(t, db); blocked != wantBlocked || len(other) != 0 {
				t.Errorf("classify dead letters: %d blocked, others %v", blocked, other)
			}
			items, extra := paidTwice(sim, tomorrow)
			if items != 0 {
				t.Errorf("%d items answered twice across the stop", items)
			}
			ta.add(faults(sim, tomorrow), lost, dups, int(extra))
		})

		// A rejected key fails every item alike: exit 1 at once, nothing
		// dead-lettered; with the right key the same command finishes.
		t.Run("bad key", func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			input := writeItems(t, dir, n, 24)
			cfg := faultSim(24)
			cfg.APIKey = "the-right-key"
			sim, url := startSim(t, cfg)
			db := filepath.Join(dir, "f.db")
			r := run(t, envKey(url, "a-wrong-key"), faultArgs(db, input)...)
			if r.code != 1 || !strings.Contains(r.err, "API key was rejected") || !strings.Contains(r.err, "no item was dead-lettered") {
				t.Fatalf("exit %d, want 1 naming the key\n%s", r.code, r.err)
			}
			if d := deadAt(t, db, "classify"); len(d) != 0 {
				t.Errorf("%d items dead-lettered for a bad key", len(d))
			}
			if st := status(t, db); st.Counts.Done != 0 || st.Counts.Items != n {
				t.Errorf("after a bad key: %d items, %d done", st.Counts.Items, st.Counts.Done)
			}
			if calls := sim.Stats().Outcomes[geminisim.OutcomeBadKey]; calls > 64 {
				t.Errorf("%d calls with a bad key: the run did not stop at the first", calls)
			}
			if r := run(t, envKey(url, "the-right-key"), faultArgs(db, input)...); r.code != 0 {
				t.Fatalf("resume exit %d\n%s", r.code, r.err)
			}
			lost, dups := settled(t, db, n, sim)
			ta.add(faults(sim), lost, dups, 0)
		})

		// An unknown model fails every item alike: exit 1, nothing
		// dead-lettered. The model is part of classify's configuration, so
		// the run with the right model must be told to re-run classify
		// (--rerun-changed), as for any configuration change.
		t.Run("unknown model", func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			input := writeItems(t, dir, n, 25)
			sim, url := startSim(t, faultSim(25))
			db := filepath.Join(dir, "f.db")
			r := run(t, simEnv(url), faultArgs(db, input, "--model", "gemini-0-nope")...)
			if r.code != 1 || !strings.Contains(r.err, `model "gemini-0-nope" not found`) || !strings.Contains(r.err, "no item was dead-lettered") {
				t.Fatalf("exit %d, want 1 naming the model\n%s", r.code, r.err)
			}
			if d := deadAt(t, db, "classify"); len(d) != 0 {
				t.Errorf("%d items dead-lettered for an unknown model", len(d))
			}
			r = run(t, simEnv(url), faultArgs(db, input)...)
			if r.code == 2 {
				if !strings.Contains(r.err, "--rerun-changed") {
					t.Fatalf("exit 2 without saying how to go on:\n%s", r.err)
				}
				r = run(t, simEnv(url), faultArgs(db, input, "--rerun-changed")...)
			}
			if r.code != 0 {
				t.Fatalf("resume with the right model: exit %d\n%s", r.code, r.err)
			}
			lost, dups := settled(t, db, n, sim)
			ta.add(faults(sim), lost, dups, 0)
		})

		t.Run("simulator away", func(t *testing.T) { t.Parallel(); outage(t, &ta) })
	})

	figures(t, "fault matrix", ta.cases, ta.survived, ta.lost, ta.dups, ta.rep, start)
	if ta.lost != 0 || ta.dups != 0 {
		t.Errorf("items lost %d, audit problems %d", ta.lost, ta.dups)
	}
}

// outage stops the simulator mid-run and starts a new one on the same
// address after a pause (3 s; 10 s in long mode). The run retries with
// backoff: items whose budget outlasts the outage are done, the others
// are dead-lettered with the reason, and `retry` finishes them. Either way
// the run itself ends with exit 0, every item in one place.
func outage(t *testing.T, ta *tally) {
	pause := pick(3*time.Second, 10*time.Second)
	const n = 600
	dir := t.TempDir()
	input := writeItems(t, dir, n, 26)
	cfg := faultSim(26)
	cfg.Latency.Base = 15 * time.Millisecond
	before, url := startSim(t, cfg)
	db := filepath.Join(dir, "f.db")

	cmd := exec.Command(binary, faultArgs(db, input)...)
	cmd.Env = append(os.Environ(), simEnv(url)...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-done
	}()
	deadline := time.Now().Add(30 * time.Second)
	for before.Stats().Outcomes[geminisim.OutcomeOK] < 100 {
		if time.Now().After(deadline) {
			t.Fatalf("the run did not get going:\n%s", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	before.Close()
	time.Sleep(pause)
	after, _ := startSimAt(t, cfg, strings.TrimPrefix(url, "http://"))
	var err error
	select {
	case err = <-done:
		done <- err // for the deferred cleanup
	case <-time.After(2 * time.Minute):
		t.Fatalf("the run did not end after the outage:\n%s", errb.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit %d (%v), want 0: every item done or dead-lettered\n%s", code, err, errb.String())
	}
	finalPlaces(t, db, n)
	_, other := classifyDead(t, db)
	gaveUp := other["transient"]
	for class, es := range other {
		if class != "transient" {
			t.Errorf("dead letters other than the outage's: %s %v", class, es)
		}
	}
	for _, e := range gaveUp {
		if !strings.Contains(e.Dead.Message, "gave up after 5 attempts") || !strings.Contains(e.Dead.Message, "classify: calling "+url) {
			t.Errorf("dead letter %s does not say what failed: %q", e.ID, e.Dead.Message)
		}
	}
	if len(gaveUp) > 0 {
		t.Logf("outage of %s: %d items dead-lettered, e.g. %q; retrying them", pause, len(gaveUp), gaveUp[0].Dead.Message)
		if r := run(t, simEnv(url), "retry", "--db", db, "--stage", "classify", "--quiet", "--timeout", "20s"); r.code != 0 {
			t.Fatalf("retry exit %d\n%s", r.code, r.err)
		}
	} else {
		t.Logf("outage of %s: every item outlasted it within its retry budget", pause)
	}
	_, wantBlocked := expectedDead(n)
	if blocked, other := classifyDead(t, db); blocked != wantBlocked || len(other) != 0 {
		t.Errorf("after the outage: %d blocked, others %v", blocked, other)
	}
	lost, dups := settled(t, db, n)
	// An answer the first simulator decided but could not deliver when it
	// closed is counted there and asked again of the second.
	_, extra := paidTwice(before, after)
	ta.add(1+faults(before, after), lost, dups, int(extra))
}
