package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestShapes checks in virtual time that every shape is what the matrix
// needs: distinct names, a valid simulator, and a perfect client that
// needs 25 to 40 s (the per-minute shape: just over a minute; the
// thinking model, with as many workers as it needs: 30 to 60 s), so a shape spans
// many windows and the start costs a few percent.
func TestShapes(t *testing.T) {
	seen := map[string]bool{}
	for _, sh := range Shapes(true) {
		t.Run(sh.Name, func(t *testing.T) {
			if seen[sh.Name] || sh.Description == "" || sh.Items <= 0 {
				t.Fatalf("shape %+v: duplicate name, or no description or items", sh)
			}
			seen[sh.Name] = true
			if err := sh.Sim.Validate(); err != nil {
				t.Fatal(err)
			}
			cfg := shapeConfig(sh, MatrixOptions{})
			mean := meanPromptTokens(DistinctReviews(sh.Items, DefaultItemSeed))
			reqs := make([]Request, sh.Items)
			for i := range reqs {
				reqs[i] = Request{Tokens: int(mean)}
			}
			workers := perfectWorkers
			lo, hi := 25*time.Second, 40*time.Second
			switch {
			case cfg.Sim.Window >= time.Minute:
				lo, hi = 60*time.Second, 70*time.Second
			case cfg.Sim.Latency.Mean(0, 0) >= time.Second:
				// Calls of seconds: the runner keeps hundreds in flight,
				// and the perfect client is held to as many.
				workers, lo, hi = 0, 30*time.Second, 60*time.Second
			}
			d, ok := Perfect(cfg.Sim, reqs, workers)
			if !ok || d < lo || d > hi {
				t.Errorf("perfect client %v (ok %v), want %v..%v", d, ok, lo, hi)
			}
			if w := cfg.Sim.Window; w != 0 && (w < time.Second || w > 4*time.Second) && w != time.Minute {
				t.Errorf("window %v: want 1-4 s, or a real minute", w)
			}
		})
	}
	if n := len(Shapes(false)); n != len(Shapes(true))-2 {
		t.Errorf("--long should add exactly two shapes: %d and %d", n, len(Shapes(true)))
	}
}

func TestLookupShapes(t *testing.T) {
	tests := []struct {
		name  string
		names []string
		long  bool
		want  []string
		err   string
	}{
		{name: "all", want: []string{"sliding-drift"}},
		{name: "picked in order", names: []string{"fixed-exact", "cap-bare429"}, want: []string{"fixed-exact", "cap-bare429"}},
		{name: "long shape needs long", names: []string{"minute-ample"}, err: "need --long"},
		{name: "long shape with long", names: []string{"minute-ample"}, long: true, want: []string{"minute-ample"}},
		{name: "unknown", names: []string{"fixd-exact"}, err: `unknown shape "fixd-exact"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LookupShapes(tt.names, tt.long)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || len(got) < len(tt.want) {
				t.Fatalf("got %d shapes, err %v", len(got), err)
			}
			for i, n := range tt.want {
				if got[i].Name != n {
					t.Errorf("shape %d is %s, want %s", i, got[i].Name, n)
				}
			}
		})
	}
}

func TestMedian(t *testing.T) {
	rs := []Result{
		{Status: "complete", VsPerfect: 0.9, Share429: 0.01, CallsPerItem: 1.01, ConcMean: 10, ConcP95: 20, Lost: 0, Wall: 3 * time.Second},
		{Status: "timeout", VsPerfect: 0.5, Share429: 0.03, CallsPerItem: 1.05, ConcMean: 30, ConcP95: 40, Lost: 5, Wall: 9 * time.Second},
		{Status: "complete", VsPerfect: 0.8, Share429: 0.02, CallsPerItem: 1.02, ConcMean: 20, ConcP95: 30, Lost: 1, Wall: 4 * time.Second},
	}
	c := median("aimd", rs)
	want := Cell{Strategy: "aimd", VsPerfect: 0.8, Share429: 0.02, CallsPerItem: 1.02, ConcMean: 20, ConcP95: 30, Lost: 1, Wall: 4 * time.Second, Incomplete: 1}
	c.Results = nil
	if !reflect.DeepEqual(c, want) {
		t.Errorf("median %+v, want %+v", c, want)
	}
	even := median("x", rs[:2])
	if even.VsPerfect != 0.7 || even.Wall != 6*time.Second {
		t.Errorf("even median: %.2f %v", even.VsPerfect, even.Wall)
	}
}

// TestRunMatrix runs one small shape end to end with two strategies and
// checks the table, the JSON and the plot.
func TestRunMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("drains items against the simulator for a few seconds")
	}
	strategies, err := Lookup([]string{Fixed8, AIMD})
	if err != nil {
		t.Fatal(err)
	}
	plots := t.TempDir()
	opts := MatrixOptions{Shapes: []string{"bucket-burst"}, Strategies: strategies, Items: 150, Runs: 1,
		RefusalLatency: 5 * time.Millisecond, PlotDir: plots, Dir: t.TempDir()}
	var table bytes.Buffer
	rep, err := RunMatrix(t.Context(), opts, &table)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Shapes) != 1 || len(rep.Shapes[0].Cells) != 2 {
		t.Fatalf("report %+v", rep)
	}
	sr := rep.Shapes[0]
	// 150 items at 200/s with a burst of 10: the perfect client's last
	// admission is at 0.7 s, its answer ~125 ms later.
	if sr.Perfect < 700*time.Millisecond || sr.Perfect > time.Second {
		t.Errorf("perfect %v, want 0.7-1 s", sr.Perfect)
	}
	// fixed-8 (64 calls a second) never meets the quota: it completes
	// below the perfect client. aimd's figures are the limiter's business;
	// only their consistency is checked.
	for _, c := range sr.Cells {
		r := c.Results[0]
		if c.Strategy == Fixed8 && (c.VsPerfect <= 0.1 || c.VsPerfect > 1 || c.Lost != 0 || c.CallsPerItem != 1 || c.Incomplete != 0) {
			t.Errorf("%s: %+v", c.Strategy, c)
		}
		if r.Perfect != sr.Perfect || (r.Status == "complete") != (r.VsPerfect > 0) || c.CallsPerItem < 1 {
			t.Errorf("%s: status %s, vs perfect %.2f, perfect %v of %v", c.Strategy, r.Status, r.VsPerfect, r.Perfect, sr.Perfect)
		}
	}
	out := table.String()
	for _, want := range []string{"bucket-burst", "fixed-8", "aimd", "vs perfect", "medians of 1 run"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(plots, "matrix-bucket-burst.svg")); err != nil {
		t.Errorf("plot: %v", err)
	}

	opts.JSON, opts.PlotDir, opts.Strategies, opts.Unnamed = true, "", strategies[:1], true
	var js bytes.Buffer
	if _, err := RunMatrix(t.Context(), opts, &js); err != nil {
		t.Fatal(err)
	}
	var back MatrixReport
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Shapes) != 1 || back.Shapes[0].Cells[0].Strategy != Fixed8 {
		t.Errorf("json: %v %s", err, js.String())
	}
	if !back.Unnamed || !strings.HasSuffix(back.Shapes[0].Description, "429s name no budget") {
		t.Errorf("json of an unnamed matrix: unnamed %v, description %q", back.Unnamed, back.Shapes[0].Description)
	}
}

// TestShape_unnamed: --unnamed strips quotaValue from the shapes whose
// 429s carry a QuotaFailure, and leaves the others' refusals as they are.
func TestShape_unnamed(t *testing.T) {
	tests := []struct {
		name       string
		rpm        int
		from, want geminisim.QuotaFailureMode
	}{
		{"default", 200, "", geminisim.QuotaFailureNoValue},
		{"full", 200, geminisim.QuotaFailureFull, geminisim.QuotaFailureNoValue},
		{"no value already", 200, geminisim.QuotaFailureNoValue, geminisim.QuotaFailureNoValue},
		{"Vertex's: none", 200, geminisim.QuotaFailureAbsent, geminisim.QuotaFailureAbsent},
		{"no quota: a cap's bare 429s", 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sh := Shape{Name: "s", Description: "d", Sim: geminisim.Config{RPM: tt.rpm, QuotaFailure: tt.from}}
			got := sh.unnamed()
			if got.Sim.QuotaFailure != tt.want {
				t.Errorf("QuotaFailure %q, want %q", got.Sim.QuotaFailure, tt.want)
			}
			if renamed := got.Description != sh.Description; renamed != (tt.from != tt.want) {
				t.Errorf("description %q from %q", got.Description, sh.Description)
			}
		})
	}
}
