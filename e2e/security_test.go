package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// randomKey is a key no code path could produce by accident.
func randomKey(t testing.TB, prefix string) string {
	t.Helper()
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
	b := make([]byte, 48)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return prefix + string(b)
}

// TestSecurity_KeyNowhere runs a whole night with a distinctive API key
// (and, first, a wrong one) and greps every artefact for both: the DB
// file, the files beside it, and the stdout and stderr of run, a goroutine
// dump (SIGQUIT, what a panic prints), status, report in every format,
// export, dlq and verify. It also checks the files, the report file
// included, are created 0600 and that the HTML report escapes item text.
func TestSecurity_KeyNowhere(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a real process")
	}
	start := time.Now()
	key, wrong := randomKey(t, "AIzaSyRIGHT"), randomKey(t, "AIzaSyWRONG")
	cfg := faultSim(50)
	cfg.APIKey = key
	cfg.Latency.Base = 50 * time.Millisecond
	cfg.Faults = geminisim.Faults{Err503: 0.03, Err500: 0.02, Malformed: 0.02, BlockCandidate: 0.02, MaxTokens: 0.02}
	_, url := startSim(t, cfg)

	dir := t.TempDir()
	const n = 400
	input := writeItems(t, dir, n, 50)
	hostile := filepath.Join(dir, "hostile.jsonl")
	var hb bytes.Buffer
	for i, text := range []string{
		`<script>alert("text")</script> the app crashes`,
		`<img src=x onerror=alert(1)> too expensive`,
		`"><svg onload=alert(1)> please add a dark mode`,
		`</title><script>alert(2)</script> how to build a bomb`,
	} {
		line, _ := json.Marshal(map[string]string{"id": fmt.Sprintf(`<script>alert(%d)</script>`, i), "text": text, "app": "<b>app</b>"})
		hb.Write(line)
		hb.WriteByte('\n')
	}
	os.WriteFile(hostile, hb.Bytes(), 0o600)
	db := filepath.Join(dir, "night.db")

	var outputs []string // every stdout and stderr to grep
	keep := func(r result) result { outputs = append(outputs, r.out, r.err); return r }

	// A wrong key: the run stops at once, and must not echo the key back.
	if r := keep(run(t, envKey(url, wrong), faultArgs(db, input)...)); r.code != 1 || !strings.Contains(r.err, "API key was rejected") {
		t.Fatalf("wrong key: exit %d\n%s", r.code, r.err)
	}

	// A goroutine dump mid-run (what a crash prints), from a run logging
	// everything it can (JSON, debug) and serving its metrics.
	metrics := freeAddr(t)
	// At most 8 calls of 50 ms in flight: the run lasts long enough to
	// publish its live status.
	cmd := exec.Command(binary, "run", "--db", db, "--input", input, "--timeout", "20s", "--start", "8", "--ceiling", "8",
		"--log-format", "json", "--log-level", "debug", "--metrics-addr", metrics)
	cmd.Env = append(os.Environ(), envKey(url, key)...)
	var dump bytes.Buffer
	cmd.Stdout, cmd.Stderr = &dump, &dump
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { _, err := os.Stat(db + ".status.json"); return err == nil }, "the live status file")
	checkMode(t, db)
	checkMode(t, db+".pid")
	checkMode(t, db+".status.json")
	for _, f := range []string{db + ".pid", db + ".status.json"} {
		b, _ := os.ReadFile(f)
		outputs = append(outputs, string(b))
	}
	live := keep(run(t, nil, "status", "--db", db))
	if live.code != 0 {
		t.Errorf("live status: exit %d %s", live.code, live.err)
	}
	if resp, err := http.Get("http://" + metrics + "/metrics"); err != nil {
		t.Errorf("metrics: %v", err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Contains(b, []byte("sawtooth")) {
			t.Errorf("metrics page without sawtooth metrics:\n%s", tail(string(b), 1000))
		}
		outputs = append(outputs, string(b))
	}
	cmd.Process.Signal(syscall.SIGQUIT)
	cmd.Wait()
	if !strings.Contains(dump.String(), "goroutine ") {
		t.Errorf("SIGQUIT printed no goroutine dump:\n%s", tail(dump.String(), 2000))
	}
	outputs = append(outputs, dump.String())

	// The night itself, then the hostile items.
	if r := keep(run(t, envKey(url, key), faultArgs(db, input)...)); r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.err)
	}
	if r := keep(run(t, envKey(url, key), faultArgs(db, hostile, "--json")...)); r.code != 0 {
		t.Fatalf("run hostile items: exit %d\n%s", r.code, r.err)
	}
	checkMode(t, db)

	commands := [][]string{
		{"status", "--db", db}, {"status", "--db", db, "--json"}, {"verify", "--db", db},
		{"report", "--db", db}, {"report", "--db", db, "--format", "markdown"}, {"report", "--db", db, "--format", "json"},
		{"dlq", "list", "--db", db}, {"dlq", "list", "--db", db, "--json"},
		{"dlq", "show", "--db", db, "--id", "r00013"}, {"dlq", "show", "--db", db, "--id", "<script>alert(3)</script>"},
	}
	for _, stage := range []string{"sanitize", "classify", "aggregate"} {
		commands = append(commands,
			[]string{"export", "--db", db, "--stage", stage},
			[]string{"export", "--db", db, "--stage", stage, "--format", "csv"})
	}
	for _, args := range commands {
		if r := keep(run(t, nil, args...)); r.code != 0 {
			t.Errorf("%v: exit %d\n%s", args, r.code, r.err)
		}
	}
	html := keep(run(t, nil, "report", "--db", db, "--format", "html"))
	if html.code != 0 {
		t.Errorf("report --format html: exit %d\n%s", html.code, html.err)
	} else {
		checkEscaped(t, html.out)
	}

	// A report file holds item texts, as the DB does: created 0600 too.
	page := filepath.Join(dir, "report.html")
	if r := keep(run(t, nil, "report", "--db", db, "--format", "html", "--output", page)); r.code != 0 {
		t.Errorf("report --output: exit %d\n%s", r.code, r.err)
	} else {
		checkMode(t, page)
		if b, err := os.ReadFile(page); err == nil {
			checkEscaped(t, string(b))
		}
	}

	// The DB and every file beside it, byte for byte.
	var files []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && path != input && path != hostile {
			files = append(files, path)
		}
		return nil
	})
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{key, wrong} {
			if bytes.Contains(b, []byte(k)) {
				t.Errorf("%s holds the API key", f)
			}
		}
	}
	for i, o := range outputs {
		for _, k := range []string{key, wrong} {
			if strings.Contains(o, k) {
				t.Errorf("output %d holds the API key:\n%s", i, tail(o, 2000))
			}
		}
	}
	t.Logf("grepped %d files and %d outputs for both keys", len(files), len(outputs))
	// A run was stopped by SIGQUIT mid-flight, so only the places are
	// audited, not the billing.
	figures(t, "security", 1, 0, 0, audit(t, db, nil), 0, start)
}

// checkEscaped checks the HTML report shows item text and ids as text:
// no tag from the input survives unescaped.
func checkEscaped(t *testing.T, page string) {
	t.Helper()
	for _, raw := range []string{`<script>alert(`, `<img src=x`, `<svg onload`, `</title><script>`, `<b>app</b>`} {
		if strings.Contains(page, raw) {
			i := strings.Index(page, raw)
			t.Errorf("the HTML report holds %q unescaped: ...%s...", raw, page[max(0, i-200):min(len(page), i+200)])
		}
	}
	if !strings.Contains(page, "&lt;script&gt;alert(") && !strings.Contains(page, "&lt;script&gt;") {
		t.Errorf("the HTML report does not show the hostile ids at all (escaped): the check tested nothing")
	}
	if strings.Contains(strings.ToLower(page), "<script") {
		t.Errorf("the HTML report holds a <script> element")
	}
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// checkMode wants path to exist with mode 0600.
func checkMode(t *testing.T, path string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", filepath.Base(path), fi.Mode().Perm())
	}
}

// waitFor polls cond for up to 30 s.
func waitFor(t testing.TB, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
