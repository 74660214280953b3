package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// heldClock is the simulator's clock when the kill is at a poll: it stands
// still until the kill fired, so every job created while it is held stays
// PENDING (its age 0) until a worker polled it and died there, then runs
// on from where it stopped. On the wall clock, a worker slowed down by
// other work (a CI run at a load of 25-40 on 2 cores) first polled its job
// more than Pending+Running after creating it, found it SUCCEEDED, and no
// worker ever reached the poll.
//
// A kill at a poll of a later stage's job starts it running
// (newRunningClock) so the earlier stage's jobs can end, and holds it
// (holdAhead) at that stage's first create: moved on far enough that every
// job created before has ended, so the only jobs a poll can find live are
// the later stage's.
type heldClock struct {
	mu       sync.Mutex
	held     bool
	released bool          // it stood still once: holdAhead does nothing
	at       time.Time     // where it stands while held
	offset   time.Duration // while it runs, it reads the wall clock plus offset
}

func newHeldClock() *heldClock { return &heldClock{held: true, at: time.Now()} }

// newRunningClock is a clock that runs with the wall clock until holdAhead.
func newRunningClock() *heldClock { return &heldClock{} }

func (c *heldClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held {
		return c.at
	}
	return time.Now().Add(c.offset)
}

// holdAhead moves a running clock d ahead and holds it there: a job
// created before, of a simulator whose jobs end Pending+Running <= d after
// their create, has ended by then. A held clock stays where it is, and a
// released one runs on: the creates after the kill (a resumed run's, the
// other workers') must not stop it again, or their jobs would stay
// PENDING until the batch deadline.
func (c *heldClock) holdAhead(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.held && !c.released {
		c.held, c.at = true, time.Now().Add(c.offset+d)
	}
}

// release lets the clock run on from where it stopped.
func (c *heldClock) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held {
		c.held, c.released, c.offset = false, true, time.Until(c.at)
	}
}

// TestCallHold_holdsOneAnswerUntilTheKill: an armed callHold forwards the
// next call, holds its answer back (the target has answered it, the
// caller has nothing) until it is let go, holds only that one, and after
// the kill refuses every call without forwarding it.
func TestCallHold_holdsOneAnswerUntilTheKill(t *testing.T) {
	var forwarded atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		forwarded.Add(1)
		w.Write([]byte(`{"ok":1}`))
	}))
	t.Cleanup(target.Close)
	h := startCallHold(t, target.URL)
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	type answer struct {
		code int
		body string
	}
	call := func() answer {
		resp, err := client.Post(h.url+"/v1beta/models/m:generateContent", "application/json", strings.NewReader("{}"))
		if err != nil {
			return answer{code: -1, body: err.Error()}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, string(b)}
	}

	held := h.arm()
	first := make(chan answer, 1)
	go func() { first <- call() }()
	select {
	case <-held:
	case a := <-first:
		t.Fatalf("the call after arm was not held: %+v", a)
	}
	if n := forwarded.Load(); n != 1 {
		t.Fatalf("the held call reached the target %d times, want once (answered there before it is held)", n)
	}
	select {
	case a := <-first:
		t.Fatalf("the held call's answer reached its caller before it was let go: %+v", a)
	default:
	}
	// Only one call per arm is held: the next passes while the first waits.
	if a := call(); a.code != http.StatusOK || a.body != `{"ok":1}` {
		t.Errorf("a call after the held one: %+v, want the target's answer", a)
	}

	victim := exec.Command("sleep", "60")
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- victim.Wait() }()
	h.kill(t, victim, done)
	if a := <-first; a.code != http.StatusOK || a.body != `{"ok":1}` {
		t.Errorf("the held call once let go: %+v, want the target's answer", a)
	}
	before := forwarded.Load()
	if a := call(); a.code != http.StatusBadGateway || forwarded.Load() != before {
		t.Errorf("a call after the kill: %+v, %d forwarded; want %d and none forwarded", a, forwarded.Load()-before, http.StatusBadGateway)
	}
}

// TestHeldClock_standsStillThenRunsOnWithoutAJump: while held, the
// simulator's clock does not move (a job created then stays PENDING
// however late it is polled); released, it runs on from where it stood,
// neither jumping ahead by the time it stood still nor going back.
func TestHeldClock_standsStillThenRunsOnWithoutAJump(t *testing.T) {
	c := newHeldClock()
	at := c.Now()
	for range 1000 {
		if now := c.Now(); !now.Equal(at) {
			t.Fatalf("a held clock moved: %v after %v", now, at)
		}
	}
	t0 := time.Now()
	c.release()
	after := c.Now()
	t1 := time.Now()
	if after.Before(at) {
		t.Errorf("released, the clock went back: %v < %v", after, at)
	}
	// It ran on from at: by no more than the wall clock since the release.
	if ran, wall := after.Sub(at), t1.Sub(t0); ran > wall {
		t.Errorf("released, the clock jumped ahead: it ran %v from where it stood, %v passed since the release", ran, wall)
	}
	c.release() // a second release changes nothing
	if now := c.Now(); now.Before(after) {
		t.Errorf("a second release sent the clock back: %v < %v", now, after)
	}
}

// TestHeldClock_holdAheadEndsTheJobsBefore: a running clock held ahead by
// the simulator's Pending+Running ends every job created before the hold
// and keeps one created after it PENDING, however long the test takes,
// until it is released; a second holdAhead does not move it again.
func TestHeldClock_holdAheadEndsTheJobsBefore(t *testing.T) {
	const pending, running = time.Hour, time.Hour
	c := newRunningClock()
	sim, simURL := startSim(t, geminisim.Config{Now: c.Now, Batch: geminisim.BatchConfig{Pending: pending, Running: running}})
	create := func(name string) {
		t.Helper()
		body := `{"batch":{"displayName":"` + name + `","inputConfig":{"requests":{"requests":[` +
			`{"request":{"contents":[{"parts":[{"text":"hello"}]}]},"metadata":{"key":"` + name + `"}}]}}}}`
		req, _ := http.NewRequest(http.MethodPost, simURL+"/v1beta/models/gemini-2.5-flash:batchGenerateContent", strings.NewReader(body))
		req.Header.Set("X-Goog-Api-Key", geminisim.DefaultAPIKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("create %s: %s", name, resp.Status)
		}
	}
	states := func() map[string]int { return sim.BatchStats().States }

	create("before")
	if st := states(); st["BATCH_STATE_PENDING"] != 1 {
		t.Fatalf("a job just created on a running clock: %v, want PENDING", st)
	}
	c.holdAhead(pending + running)
	at := c.Now()
	create("after")
	c.holdAhead(pending + running)
	if now := c.Now(); !now.Equal(at) {
		t.Errorf("a second holdAhead moved the clock from %v to %v", at, now)
	}
	if st := states(); st["BATCH_STATE_SUCCEEDED"] != 1 || st["BATCH_STATE_PENDING"] != 1 {
		t.Errorf("held ahead: jobs %v, want the one before SUCCEEDED and the one after PENDING", st)
	}
	c.release()
	if now := c.Now(); now.Before(at) || now.Sub(at) > time.Minute {
		t.Errorf("released at %v, the clock reads %v: want it to run on from there", at, now)
	}
	// A create after the kill holds it no more: its job ends as any.
	c.holdAhead(pending + running)
	c.mu.Lock()
	held := c.held
	c.mu.Unlock()
	if now := c.Now(); held || now.Sub(at) > time.Minute {
		t.Errorf("released, then held ahead again: held %v, it reads %v (released at %v); want it running on from there", held, now, at)
	}
}
