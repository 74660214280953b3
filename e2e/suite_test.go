package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// longMode is SAWTOOTH_LONG=1: the suites run at the sizes of issue #5
// (5,000 items and 20 kills, a 10 s outage, a 1 GB line) instead of the
// CI sizes.
func longMode() bool { return os.Getenv("SAWTOOTH_LONG") == "1" }

// pick returns ci in CI mode and long in long mode.
func pick[T any](ci, long T) T {
	if longMode() {
		return long
	}
	return ci
}

// figures prints one row of the closing table of a suite, in a form that
// is easy to grep from `go test -v` output.
func figures(t testing.TB, suite string, cases, survived, lost, dups, repaid int, start time.Time) {
	t.Helper()
	t.Logf("FIGURES | %s | cases %d | kills/faults survived %d | items lost %d | duplicates %d | re-paid calls %d | %s |",
		suite, cases, survived, lost, dups, repaid, time.Since(start).Round(100*time.Millisecond))
}

// result is one finished run of the binary.
type result struct {
	code     int
	out, err string
	// maxRSS is the process's peak resident set size in bytes (VmHWM),
	// as last seen while it ran; 0 where /proc is not available.
	maxRSS int64
}

// run runs the binary to completion (at most 3 minutes) with env added to
// the test's environment and returns what it did. A process killed by a
// signal is a test failure: nothing in these suites sends one.
func run(t testing.TB, env []string, args ...string) result {
	t.Helper()
	return runCmd(t, exec.Command(binary, args...), env)
}

// runCmd is run for a prepared command, e.g. one wrapped by bash to set a
// resource limit.
func runCmd(t testing.TB, cmd *exec.Cmd, env []string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd = exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatalf("sawtooth %v: %v", cmd.Args[1:], err)
	}
	peak := make(chan int64, 1)
	stop := make(chan struct{})
	go func() { peak <- watchRSS(cmd.Process.Pid, stop) }()
	err := cmd.Wait()
	close(stop)
	r := result{out: out.String(), err: errb.String(), maxRSS: <-peak}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
		if r.code < 0 {
			t.Fatalf("sawtooth %v: %v (killed by a signal?)\nstderr:\n%s", cmd.Args[1:], err, tail(r.err, 3000))
		}
	default:
		t.Fatalf("sawtooth %v: %v", cmd.Args[1:], err)
	}
	if strings.Contains(r.err, "panic:") || strings.Contains(r.err, "goroutine ") && strings.Contains(r.err, "[running]") {
		t.Errorf("sawtooth %v panicked:\n%s", cmd.Args[1:], tail(r.err, 3000))
	}
	if strings.Contains(r.err, "WARNING: DATA RACE") {
		t.Errorf("sawtooth %v: data race:\n%s", cmd.Args[1:], tail(r.err, 6000))
	}
	return r
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// startSimAt serves a simulator on addr, retrying for a few seconds while
// the address is still held (a restart on the port of a closed one).
func startSimAt(t testing.TB, cfg geminisim.Config, addr string) (*geminisim.Server, string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		srv := geminisim.New(cfg)
		url, err := srv.Start(addr)
		if err == nil {
			t.Cleanup(func() { srv.Close() })
			return srv, url
		}
		srv.Close()
		if time.Now().After(deadline) {
			t.Fatalf("restart the simulator on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// envKey is simEnv with another API key.
func envKey(url, key string) []string {
	return []string{"GEMINI_API_KEY=" + key, "GOOGLE_GEMINI_BASE_URL=" + url}
}

// deadEntry is one line of `dlq list --json`.
type deadEntry struct {
	Stage string `json:"stage"`
	ID    string `json:"id"`
	Dead  struct {
		Class    string `json:"class"`
		Message  string `json:"message"`
		Attempts int    `json:"attempts"`
	} `json:"dead"`
}

// deadLetters lists every dead letter of the DB.
func deadLetters(t testing.TB, db string) []deadEntry {
	t.Helper()
	r := run(t, nil, "dlq", "list", "--db", db, "--json")
	if r.code != 0 {
		t.Fatalf("dlq list exit %d: %s", r.code, r.err)
	}
	var out []deadEntry
	sc := bufio.NewScanner(strings.NewReader(r.out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var e deadEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("dlq list line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// deadAt returns the dead letters at stage.
func deadAt(t testing.TB, db, stage string) []deadEntry {
	t.Helper()
	var out []deadEntry
	for _, e := range deadLetters(t, db) {
		if e.Stage == stage {
			out = append(out, e)
		}
	}
	return out
}

// itemTexts reads a JSONL file written by writeItems: id -> text.
func itemTexts(t testing.TB, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var r struct{ ID, Text string }
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		m[r.ID] = r.Text
	}
	return m
}

// idle waits until the simulators' accounting holds every call the
// processes that called them sent (geminisim's Quiesce), so a snapshot of
// it taken after every such process died is final: a request a killed
// process wrote just before it died can still sit in a socket, or in the
// listener's accept queue, after every call in flight has ended, and on a
// loaded machine it is then answered and billed like any other. It fails
// the test after 10 s: an accounting still moving would be compared as if
// it were final.
func idle(t testing.TB, sims ...*geminisim.Server) {
	t.Helper()
	idleWithin(t, 10*time.Second, sims...)
}

// idleWithin is idle failing after max: for calls that take longer.
func idleWithin(t testing.TB, max time.Duration, sims ...*geminisim.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), max)
	defer cancel()
	for _, s := range sims {
		if err := s.Quiesce(ctx); err != nil {
			t.Fatalf("after the processes died: %v", err)
		}
	}
}

// okCalls adds up the calls answered normally, per item hash, over sims.
func okCalls(sims ...*geminisim.Server) map[string]int64 {
	m := map[string]int64{}
	for _, s := range sims {
		for h, it := range s.Stats().Items {
			m[h] += it.OK
		}
	}
	return m
}

// paidTwice lists the items answered normally more than once.
func paidTwice(sims ...*geminisim.Server) (items int, extra int64) {
	for _, ok := range okCalls(sims...) {
		if ok > 1 {
			items++
			extra += ok - 1
		}
	}
	return items, extra
}

// expectedDead is how many of writeItems' n items end dead: every 97th
// from 13 is always blocked by the safety filter (classify), every 97th
// from 41 is blank (sanitize).
func expectedDead(n int) (sanitize, classify int) {
	for i := 0; i < n; i++ {
		switch i % 97 {
		case 13:
			classify++
		case 41:
			sanitize++
		}
	}
	return sanitize, classify
}

// watchRSS polls the peak resident set size (VmHWM) of a running process
// until stop is closed and returns the last value read, in bytes. The
// rusage of a finished child is no use here: Linux counts in it the
// parent's peak at the instant of the fork (Go starts children with
// CLONE_VM), so it reports the test process's memory, not the binary's.
func watchRSS(pid int, stop <-chan struct{}) int64 {
	var peak int64
	path := fmt.Sprintf("/proc/%d/status", pid)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
					var kb int64
					fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
					peak = max(peak, kb<<10)
				}
			}
		}
		select {
		case <-stop:
			return peak
		case <-t.C:
		}
	}
}
