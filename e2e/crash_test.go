package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// crashSim is a simulator slow enough that a run lasts a few seconds and
// kills land mid-flight, with transient faults on. Permanent failures come
// only from texts that always trip the safety filter, so a crashed run and a
// clean one must end with exactly the same outputs.
func crashSim() geminisim.Config {
	return geminisim.Config{
		RPM: 400, Window: time.Second,
		Latency: geminisim.Latency{Base: 15 * time.Millisecond, Jitter: 30 * time.Millisecond},
		Faults:  geminisim.Faults{Err503: 0.02, Err500: 0.01},
		Seed:    7,
	}
}

// runArgs is a run whose request timeout only a lost call reaches: an
// answer slower than the timeout (a loaded CI machine) would be billed and
// asked again, which the per-item accounting would count as paid twice.
func runArgs(db, input string) []string {
	return []string{"run", "--db", db, "--input", input, "--quiet", "--timeout", "20s", "--start", "16"}
}

// callHold stands between one run and the simulator and, once armed,
// holds back the answer to the next generateContent call: the simulator
// has answered (and billed) it, the run has not received it. A kill timed
// from a held call lands with a call in flight however slow the machine
// is; a kill timed by the wall clock alone can land before a run slowed
// down by other work sent any call (a CI run at a load of 25-40 on 2
// cores: 0 of 8 kills in flight). It forwards as answerKiller does, and
// for the same reasons: a call in flight at the kill is answered, not
// canceled, and every call read after the kill is refused, so that once
// settle returned the simulator has seen every call of the killed run it
// ever will.
type callHold struct {
	url string
	srv *httptest.Server
	// pool holds the proxy's connections to the simulator; kill closes
	// them, so that the simulator, idle, has no connection open (idle).
	pool *http.Transport

	killed     atomic.Bool
	forwarding atomic.Int64

	mu      sync.Mutex
	armed   chan struct{} // non-nil while armed; closed once a call is held
	release chan struct{} // closed to let the held answer go
}

func startCallHold(t *testing.T, simURL string) *callHold {
	t.Helper()
	target, err := url.Parse(simURL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	h := &callHold{release: make(chan struct{}), pool: &http.Transport{}}
	rp.Transport = h.pool
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.forwarding.Add(1)
		defer h.forwarding.Add(-1)
		if h.killed.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		r = r.WithContext(context.WithoutCancel(r.Context()))
		var held chan struct{}
		if strings.HasSuffix(r.URL.Path, ":generateContent") {
			h.mu.Lock()
			held, h.armed = h.armed, nil // one call held per arm
			h.mu.Unlock()
		}
		if held == nil {
			rp.ServeHTTP(noCloseNotify{w}, r)
			return
		}
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r)
		close(held)
		<-h.release
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	}))
	h.url = h.srv.URL
	t.Cleanup(func() {
		h.close() // a held handler ends only then
		h.srv.Close()
		h.pool.CloseIdleConnections()
	})
	return h
}

// arm makes the next generateContent call be held; the channel returned is
// closed once it is (its answer received from the simulator, not passed on).
func (h *callHold) arm() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed = make(chan struct{})
	return h.armed
}

// kill SIGKILLs cmd, which calls through h, waits for its death, and then
// for every call h still forwards, and closes h's connections to the
// simulator: the held answer goes nowhere, the calls read later are
// refused.
func (h *callHold) kill(t *testing.T, cmd *exec.Cmd, done <-chan error) {
	t.Helper()
	h.killed.Store(true)
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
	h.close()
	deadline := time.Now().Add(10 * time.Second)
	for h.forwarding.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the proxy still forwards %d calls 10 s after the kill", h.forwarding.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.pool.CloseIdleConnections()
}

// close lets a held answer go and stops holding calls. Once a run is done
// with h, nothing calls through it again.
func (h *callHold) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed = nil
	select {
	case <-h.release:
	default:
		close(h.release)
	}
}

// TestCrash_SIGKILLResume kills a real run with SIGKILL at random instants
// (seeded), restarts it until it finishes, and checks that every item ends
// in exactly one place, with the same labels, dead letters and aggregate
// as an uninterrupted run, that at least one kill landed while calls
// were in flight, and that no item was paid for more than once per kill
// that caught it in flight. Every other kill comes at a seeded instant
// of the wall clock (wherever the run is then: starting, ingesting,
// calling, committing); the others wait from their instant for the next
// call and land while its answer is held back (callHold), so that some
// kill lands in flight however slow the machine. CI: 2,000 items, 8 kills;
// SAWTOOTH_LONG=1: 5,000 items, 20 kills.
func TestCrash_SIGKILLResume(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a real process")
	}
	start := time.Now()
	items, kills := pick(2000, 5000), pick(8, 20)
	dir := t.TempDir()
	input := writeItems(t, dir, items, 1)
	hashOf := map[string]string{} // id -> the simulator's item key
	for id := range itemTexts(t, input) {
		hashOf[id] = geminisim.ItemID(id)
	}

	// The reference: one clean run.
	_, cleanURL := startSim(t, crashSim())
	cleanDB := filepath.Join(dir, "clean.db")
	if code, _, errs := sawtooth(t, simEnv(cleanURL), runArgs(cleanDB, input)...); code != 0 {
		t.Fatalf("clean run exit %d: %s", code, errs)
	}
	finalPlaces(t, cleanDB, items)

	sim, simURL := startSim(t, crashSim())
	db := filepath.Join(dir, "crash.db")
	rng := rand.New(rand.NewPCG(42, 42))

	// After each run: the simulator's answered calls per item, and which
	// items have a committed classify output. A kill "caught an item in
	// flight" when the item was answered during that run but its answer
	// was not committed when the process died.
	prevOK := map[string]int64{}
	prevKilled := false
	committed := map[string]bool{}
	caught := map[string]int{}
	account := func(runNo int, killed bool) {
		t.Helper()
		idle(t, sim)
		ok := okCalls(sim)
		now := map[string]bool{}
		// A kill before the DB was first created leaves no file (a new
		// database is built aside and linked in whole): nothing is
		// committed then. A file there is a database.
		if _, err := os.Stat(db); err == nil {
			r := run(t, nil, "export", "--db", db, "--stage", "classify")
			switch {
			case r.code != 0:
				t.Fatalf("export after run %d: exit %d %s", runNo, r.code, r.err)
			default:
				for _, line := range strings.Split(strings.TrimSpace(r.out), "\n") {
					var row struct{ ID string }
					if json.Unmarshal([]byte(line), &row) == nil && row.ID != "" {
						now[hashOf[row.ID]] = true
					}
				}
			}
		}
		for h, n := range ok {
			d := n - prevOK[h]
			// A request the killed run had already written can reach the
			// simulator only after it looked idle: one answer belongs to
			// the previous kill, not to this run. One at most: an item has
			// one call in flight at a time.
			late := int64(0)
			if prevKilled && d > 1 {
				late = 1
				caught[h]++
			}
			own := d - late
			switch {
			case d > 0 && committed[h]:
				t.Errorf("run %d: item %s paid again after its classify output was committed", runNo, h[:8])
			case own > 1:
				t.Errorf("run %d: item %s answered %d times within one run", runNo, h[:8], d)
			case own == 1 && killed && !now[h]:
				caught[h]++
			}
		}
		prevOK, committed, prevKilled = ok, now, killed
	}

	killed, runs := 0, 0
	inFlightKills := 0 // kills that landed with calls in flight: at the simulator, or answered and held back
	for {
		runs++
		if runs > kills+20 {
			t.Fatalf("no clean finish after %d runs", runs)
		}
		// Every other kill is timed from a held call: that run calls
		// through its own callHold.
		atCall := killed < kills && killed%2 == 1
		var hold *callHold
		url := simURL
		if atCall {
			hold = startCallHold(t, simURL)
			url = hold.url
		}
		cmd := exec.Command(binary, runArgs(db, input)...)
		cmd.Env = append(os.Environ(), simEnv(url)...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var err error
		if killed < kills {
			wait := time.Duration(50+rng.IntN(700)) * time.Millisecond
			finished := false
			select {
			case err = <-done:
				finished = true
			case <-time.After(wait):
				if atCall {
					armed := hold.arm()
					select {
					case err = <-done:
						finished = true
					case <-armed:
					}
				}
			}
			if !finished {
				switch {
				case atCall:
					inFlightKills++ // a call's answer held back: in flight for certain
					hold.kill(t, cmd, done)
				default:
					if sim.Stats().InFlight > 0 {
						inFlightKills++
					}
					cmd.Process.Signal(syscall.SIGKILL)
					<-done
				}
				killed++
				account(runs, true)
				continue
			}
			if hold != nil {
				hold.close()
			}
			t.Logf("run %d finished before its kill (err %v)", runs, err)
		} else {
			err = <-done
		}
		account(runs, false)
		if err != nil {
			t.Fatalf("run %d: %v\n%s", runs, err, errb.String())
		}
		break // finished, possibly before every kill was spent
	}

	st := finalPlaces(t, db, items)
	lost := items - st.Counts.Done
	for _, s := range st.Counts.Stages {
		lost -= s.Dead
	}
	got, want := labels(t, db), labels(t, cleanDB)
	if len(got) != len(want) {
		t.Errorf("classified %d items, clean run %d", len(got), len(want))
	}
	for id, l := range want {
		if got[id] != l {
			t.Errorf("item %s: label %q, clean run %q", id, got[id], l)
		}
	}
	deadKey := func(db string) map[string]string {
		m := map[string]string{}
		for _, e := range deadLetters(t, db) {
			if _, dup := m[e.ID]; dup {
				t.Errorf("%s: item %s dead at two stages", db, e.ID)
			}
			m[e.ID] = e.Stage + "/" + e.Dead.Class
		}
		return m
	}
	gotDead, wantDead := deadKey(db), deadKey(cleanDB)
	if len(gotDead) != len(wantDead) {
		t.Errorf("%d dead letters, clean run %d", len(gotDead), len(wantDead))
	}
	for id, k := range wantDead {
		if gotDead[id] != k {
			t.Errorf("item %s: dead letter %q, clean run %q", id, gotDead[id], k)
		}
	}
	if a, b := aggregate(t, db), aggregate(t, cleanDB); a != b {
		t.Errorf("aggregate differs from the clean run:\n%s\n%s", a, b)
	}
	checkStoredCube(t, db)

	if inFlightKills == 0 {
		t.Errorf("none of the %d kills landed while calls were in flight: the resume of a call in flight was not tested", killed)
	}
	// Paying twice is possible only for a call in flight when the process
	// died: at most one extra answered call per kill that caught the item.
	repaid := 0
	for _, n := range okCalls(sim) {
		if n > 1 {
			repaid += int(n - 1)
		}
	}
	dups := audit(t, db, func(id string) int64 { return int64(caught[hashOf[id]]) }, sim)
	t.Logf("kills survived: %d (%d with calls in flight), runs: %d, done %d, items lost %d, audit problems %d, re-paid calls %d (items caught in flight: %d)",
		killed, inFlightKills, runs, st.Counts.Done, lost, dups, repaid, len(caught))
	figures(t, "crash (SIGKILL)", 1, killed, lost, dups, repaid, start)
}

// TestSignal_InterruptResume sends SIGINT mid-run: the run stops taking
// work, commits what is in flight and exits 3; a second run finishes with
// exit 0 and the same final state as an uninterrupted run.
func TestSignal_InterruptResume(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and signals a real process")
	}
	const items = 1000
	dir := t.TempDir()
	input := writeItems(t, dir, items, 2)
	cfg := crashSim()
	cfg.Faults = geminisim.Faults{}
	sim, url := startSim(t, cfg)
	db := filepath.Join(dir, "sig.db")

	cmd := exec.Command(binary, runArgs(db, input)...)
	cmd.Env = append(os.Environ(), simEnv(url)...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupt once the API stage is busy.
	deadline := time.Now().Add(30 * time.Second)
	for sim.Stats().Outcomes[geminisim.OutcomeOK] < 100 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 3 {
		t.Fatalf("interrupted run: %v, want exit 3\n%s", err, errb.String())
	}
	if !strings.Contains(errb.String(), "stopping") {
		t.Errorf("no stop message on stderr:\n%s", errb.String())
	}
	mid := status(t, db)
	if mid.Counts.Done == items {
		t.Fatalf("the run finished before the signal; nothing was tested")
	}
	if code, _, errs := sawtooth(t, simEnv(url), runArgs(db, input)...); code != 0 {
		t.Fatalf("resume exit %d: %s", code, errs)
	}
	finalPlaces(t, db, items)
	for h, it := range sim.Stats().Items {
		if it.OK > 1 {
			t.Errorf("item %s answered %d times after a graceful stop", h[:8], it.OK)
		}
	}
	for id, l := range labels(t, db) {
		if l == "" {
			t.Errorf("item %s has no label", id)
		}
	}
}

// TestLock_SecondProcess checks a second process on the same DB fails at
// once with a clear message instead of hanging.
func TestLock_SecondProcess(t *testing.T) {
	dir := t.TempDir()
	input := writeItems(t, dir, 300, 3)
	cfg := crashSim()
	cfg.Latency.Base = 200 * time.Millisecond
	_, url := startSim(t, cfg)
	db := filepath.Join(dir, "lock.db")
	cmd := exec.Command(binary, runArgs(db, input)...)
	cmd.Env = append(os.Environ(), simEnv(url)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat(db + ".pid"); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	code, _, errs := sawtooth(t, simEnv(url), runArgs(db, input)...)
	if code != 1 || !strings.Contains(errs, "in use by another sawtooth process") {
		t.Fatalf("second run: exit %d, stderr %q", code, errs)
	}
	// status still answers, from the live figures the run publishes.
	deadline = time.Now().Add(20 * time.Second)
	for {
		code, out, errs := sawtooth(t, nil, "status", "--db", db)
		if code == 0 && strings.Contains(out, "in progress") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status during a run: exit %d %s %s", code, out, errs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
