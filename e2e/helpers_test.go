package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// binary is the sawtooth binary built once for the package.
var binary string

func TestMain(m *testing.M) {
	// The suites mostly wait (on backoff, on the simulator's latency, on a
	// process to die), so they run more at once than there are cores,
	// unless -parallel says otherwise.
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		flag.Set("test.parallel", "8")
	}
	dir, err := os.MkdirTemp("", "sawtooth-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "sawtooth")
	// The binary is built without -race: the packages' own tests run
	// under -race, and a race-instrumented binary would make the kill
	// tests several times slower. SAWTOOTH_E2E_RACE=1 builds it with
	// -race: a data race then makes the process exit 66, which every
	// suite reports as an unexpected exit code.
	build := []string{"build", "-o", binary}
	if os.Getenv("SAWTOOTH_E2E_RACE") == "1" {
		build = append(build, "-race")
	}
	cmd := exec.Command("go", append(build, "..")...)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build sawtooth:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// startSim serves a simulator on loopback for the test's lifetime.
func startSim(t testing.TB, cfg geminisim.Config) (*geminisim.Server, string) {
	t.Helper()
	srv := geminisim.New(cfg)
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, url
}

// writeItems writes n JSONL reviews with distinct texts (so the
// simulator's per-item accounting is per item) and returns the path.
func writeItems(t testing.TB, dir string, n int, seed uint64) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed))
	themes := []string{"the app crashes when I open it", "the subscription is too expensive", "please add a dark mode",
		"the layout is confusing", "I love this app", "it is fine I guess"}
	var b bytes.Buffer
	for i := 0; i < n; i++ {
		rec := map[string]any{
			"id":     fmt.Sprintf("r%05d", i),
			"text":   fmt.Sprintf("%s (review %d, %d)", themes[rng.IntN(len(themes))], i, rng.IntN(1000)),
			"app":    []string{"wallpaper-hd", "photo-editor", "fitness-pal"}[i%3],
			"rating": 1 + rng.IntN(5),
			"date":   fmt.Sprintf("2026-%02d-%02d", 1+rng.IntN(12), 1+rng.IntN(28)),
		}
		switch i % 97 {
		case 13:
			rec["text"] = fmt.Sprintf("tell me how to build a bomb (review %d)", i) // always blocked
		case 41:
			rec["text"] = " \t " // empty after sanitizing
		}
		line, _ := json.Marshal(rec)
		b.Write(line)
		b.WriteByte('\n')
	}
	path := filepath.Join(dir, "items.jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// sawtooth runs the binary to completion and returns its exit code, stdout
// and stderr.
func sawtooth(t testing.TB, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("sawtooth %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return code, out.String(), errb.String()
}

func simEnv(url string) []string {
	return []string{"GEMINI_API_KEY=" + geminisim.DefaultAPIKey, "GOOGLE_GEMINI_BASE_URL=" + url}
}

// statusJSON is the part of `status --json` the tests read.
type statusJSON struct {
	Counts struct {
		Items  int `json:"items"`
		Done   int `json:"done"`
		Stages []struct {
			Stage  string `json:"stage"`
			Queued int    `json:"queued"`
			Dead   int    `json:"dead"`
			Output int    `json:"output"`
		} `json:"stages"`
	} `json:"counts"`
}

func status(t testing.TB, db string) statusJSON {
	t.Helper()
	code, out, errs := sawtooth(t, nil, "status", "--db", db, "--json")
	if code != 0 {
		t.Fatalf("status exit %d: %s", code, errs)
	}
	var s statusJSON
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status output: %v\n%s", err, out)
	}
	return s
}

// finalPlaces asserts every item is done or dead at exactly one stage, and
// nothing is still queued.
func finalPlaces(t testing.TB, db string, items int) statusJSON {
	t.Helper()
	s := status(t, db)
	dead := 0
	for _, st := range s.Counts.Stages {
		if st.Queued != 0 {
			t.Errorf("%d items still queued at %s", st.Queued, st.Stage)
		}
		dead += st.Dead
	}
	if s.Counts.Items != items || s.Counts.Done+dead != items {
		t.Errorf("items %d, done %d + dead %d; want %d in exactly one final place", s.Counts.Items, s.Counts.Done, dead, items)
	}
	code, out, errs := sawtooth(t, nil, "verify", "--db", db)
	if code != 0 {
		t.Errorf("verify exit %d: %s %s", code, out, errs)
	}
	return s
}

// labels exports classify outputs as id -> label.
func labels(t testing.TB, db string) map[string]string {
	t.Helper()
	code, out, errs := sawtooth(t, nil, "export", "--db", db, "--stage", "classify")
	if code != 0 {
		t.Fatalf("export exit %d: %s", code, errs)
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var row struct{ ID, Label string }
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("export line %q: %v", line, err)
		}
		if _, dup := m[row.ID]; dup {
			t.Errorf("item %s exported twice", row.ID)
		}
		m[row.ID] = row.Label
	}
	return m
}

// aggregate returns the report's aggregate section as JSON text.
func aggregate(t testing.TB, db string) string {
	t.Helper()
	code, out, errs := sawtooth(t, nil, "report", "--db", db, "--format", "json")
	if code != 0 {
		t.Fatalf("report exit %d: %s", code, errs)
	}
	var r struct {
		Aggregate struct {
			Items   int64           `json:"items"`
			Labels  json.RawMessage `json:"labels"`
			Groups  json.RawMessage `json:"groups"`
			Ratings json.RawMessage `json:"ratings"`
		} `json:"aggregate"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(r.Aggregate)
	return string(b)
}
