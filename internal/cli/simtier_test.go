package cli

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
	"github.com/sawtooth-dev/sawtooth/store"
)

// parseSim parses args as the simulator's flags over their defaults.
func parseSim(t *testing.T, args ...string) (*simOptions, error) {
	t.Helper()
	var o simOptions
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	for _, f := range simFlags(&o, simOptions{Window: time.Minute, Day: 24 * time.Hour}) {
		if err := f.Apply(fs); err != nil {
			t.Fatal(err)
		}
	}
	return &o, fs.Parse(args)
}

func TestSimOptions_Tiers(t *testing.T) {
	o, err := parseSim(t, "--sim-flex-latency", "2s", "--sim-flex-capacity", "50", "--sim-flex-shed", "0.33",
		"--sim-flex-shed-answer", "429-details", "--sim-priority-as-standard", "0.25", "--sim-cache-min-tokens", "2048")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.config()
	if err != nil {
		t.Fatal(err)
	}
	want := geminisim.TierConfig{FlexLatency: geminisim.Latency{Base: 2 * time.Second}, FlexCapacity: 50, FlexShed: 0.33,
		ShedAnswer: geminisim.Shed429Details, PriorityAsStandard: 0.25}
	if cfg.Tiers != want || cfg.Cache.MinTokens != 2048 || cfg.Cache.Off {
		t.Errorf("tiers %+v cache %+v", cfg.Tiers, cfg.Cache)
	}
	for _, bad := range [][]string{{"--sim-flex-shed-answer", "418"}, {"--sim-flex-shed", "2"}} {
		o, err := parseSim(t, bad...)
		if err != nil {
			t.Fatal(err)
		}
		var ue *UsageError
		if _, err := o.config(); !errors.As(err, &ue) {
			t.Errorf("%v: want a usage error, got %v", bad, err)
		}
	}
}

// tierSim starts a simulator with cfg and sets the key for the run.
func tierSim(t *testing.T, cfg geminisim.Config) (*geminisim.Server, string) {
	t.Helper()
	sim := geminisim.New(cfg)
	url, err := sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	t.Setenv("GEMINI_API_KEY", geminisim.DefaultAPIKey)
	return sim, url
}

// TestRun_TierAuto: --tier auto asks flex first; every item is answered
// once, on flex or, past its deadline, on standard; the summary shows
// the tiers.
func TestRun_TierAuto(t *testing.T) {
	sim, url := tierSim(t, geminisim.Config{Seed: 5, Tiers: geminisim.TierConfig{FlexShed: 0.3, ShedAnswer: geminisim.Shed429}})
	dir := t.TempDir()
	db, input := filepath.Join(dir, "t.db"), filepath.Join(dir, "items.jsonl")
	n, err := writeFirstLines(input, testReviews(t), 40)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	if err := runApp([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--tier", "auto", "--flex-deadline", "1500ms"}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	st := sim.Stats()
	flex := st.Tiers[geminisim.TierFlex]
	std := st.Tiers[geminisim.TierStandard]
	if flex.Served+std.Served != int64(n) || flex.Shed == 0 || flex.Served == 0 || std.Asked != std.Served {
		t.Fatalf("simulator tiers %+v, want %d items served once each, on flex after some sheds or on standard", st.Tiers, n)
	}
	for _, w := range []string{fmt.Sprintf("classify: flex tier: %d calls, %d shed", flex.Served, flex.Shed), "less than on standard"} {
		if !strings.Contains(stderr.String()+stdout.String(), w) {
			t.Errorf("summary lacks %q:\n%s%s", w, stdout.String(), stderr.String())
		}
	}
}

func TestRun_TierUsageErrors(t *testing.T) {
	_, url := tierSim(t, geminisim.Config{})
	dir := t.TempDir()
	input := filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 3); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tier", "cheap"}, `--tier: tier "cheap": use one of standard, flex, priority, auto`},
		{[]string{"--tier", "standard", "--flex-deadline", "10m"}, "--tier/--flex-deadline: a flex deadline of 10m0s needs tier flex or auto"},
		{[]string{"--tier", "priority", "--flex-deadline", "10m"}, "--tier/--flex-deadline: a flex deadline of 10m0s needs tier flex or auto"},
		{[]string{"--tier", "flex", "--flex-deadline", "-1m"}, "--tier/--flex-deadline: flex deadline -1m0s: use a positive duration"},
	} {
		db := filepath.Join(dir, strings.Join(tc.args, "")+".db")
		var stdout, stderr syncBuffer
		err := runApp(append([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url}, tc.args...), &stdout, &stderr)
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want a usage error saying %q", tc.args, err, tc.want)
		}
		if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%v: the database was created", tc.args)
		}
	}
}

// TestRunJob_Tier: a job file's tier: reaches its stage's calls; --tier
// beside a job file is refused (the job file says it).
func TestRunJob_Tier(t *testing.T) {
	sim, url := tierSim(t, geminisim.Config{Seed: 2})
	dir := t.TempDir()
	input := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(input, []byte(`{"id":"a","text":"Great app!"}`+"\n"+`{"id":"b","text":"It crashes"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	jobFile := filepath.Join(dir, "job.yaml")
	body := "db: job.db\ninput: {path: " + input + "}\nbase_url: " + url + "\nstages:\n" +
		"  - llm:\n      name: classify\n      tier: flex\n      output: {label: [bug, praise, other]}\n"
	if err := os.WriteFile(jobFile, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	err := runApp([]string{"sawtooth", "run", "-f", jobFile, "--quiet", "--tier", "priority"}, &stdout, &stderr)
	var ue *UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--tier") {
		t.Errorf("--tier with a job file: %v, want a usage error naming it", err)
	}
	if err := runApp([]string{"sawtooth", "run", "-f", jobFile, "--quiet"}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	st := sim.Stats()
	if st.Tiers[geminisim.TierFlex].Served != 2 || st.Tiers[geminisim.TierStandard].Asked != 0 {
		t.Errorf("simulator tiers %+v, want both items on flex", st.Tiers)
	}
	// The ledger (what budgets and status read) holds the flex price the
	// simulator billed, not the standard one.
	path := filepath.Join(dir, "job.db")
	defs, err := store.ReadDefinition(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(path, store.Options{Stages: defs, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ledgers, err := db.Ledgers()
	if err != nil {
		t.Fatal(err)
	}
	spent, bill := ledgers["classify"].SpentUSD, float64(st.BillNanoUSD())/1e9
	if bill == 0 || math.Abs(spent-bill) > 1e-8 {
		t.Errorf("ledger spent $%.9f, simulator billed $%.9f", spent, bill)
	}
}
