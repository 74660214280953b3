package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

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
