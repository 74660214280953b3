package bench

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

func TestRun_Smoke(t *testing.T) {
	const items = 200
	cfg := DefaultConfig(items)
	cfg.Sim.RPM, cfg.Sim.Window = 40, 200*time.Millisecond // 200 a second
	cfg.Sim.Schedule = HalfForAThird(items, cfg.Sim.RPM, cfg.Sim.Window)
	cfg.Sim.Latency = geminisim.Latency{Base: 20 * time.Millisecond, Jitter: 10 * time.Millisecond}
	cfg.RefusalLatency = 5 * time.Millisecond
	cfg.SampleEvery = 20 * time.Millisecond
	cfg.Dir = t.TempDir()
	strategies, err := Lookup([]string{AIMD, Fixed8})
	if err != nil {
		t.Fatal(err)
	}
	results, err := Run(t.Context(), cfg, strategies)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("%d results, want 2", len(results))
	}
	for _, r := range results {
		t.Logf("%s: %s in %v, goodput %.2f, 429s %.3f, calls/item %.3f, conc %.1f (%d-%d), lost %d",
			r.Strategy, r.Status, r.Wall, r.Goodput, r.Share429, r.CallsPerItem, r.ConcMean, r.ConcP5, r.ConcP95, r.Lost)
		if r.Status != "complete" || r.Lost != 0 || r.Items != items {
			t.Errorf("%s: status %s, %d of %d items lost", r.Strategy, r.Status, r.Lost, r.Items)
		}
		if r.Done+r.Dead != items || r.Answered < r.ToClassify-r.Dead || r.Answered > r.ToClassify {
			t.Errorf("%s: done %d + dead %d, answered %d of %d sent to classify", r.Strategy, r.Done, r.Dead, r.Answered, r.ToClassify)
		}
		if r.CallsPerItem < 1 || r.Calls != int64(math.Round(r.CallsPerItem*float64(r.ToClassify))) {
			t.Errorf("%s: %d calls, %.3f per item", r.Strategy, r.Calls, r.CallsPerItem)
		}
		if r.Share429 < 0 || r.Share429 >= 1 || r.RateLimited > r.Calls {
			t.Errorf("%s: %d 429s of %d calls", r.Strategy, r.RateLimited, r.Calls)
		}
		if r.Capacity <= 0 || r.Goodput <= 0 || r.Goodput > 1.5 {
			t.Errorf("%s: goodput %.2f of capacity %.0f", r.Strategy, r.Goodput, r.Capacity)
		}
		if r.ConcMean <= 0 || r.ConcMax < r.ConcP95 || r.ConcP95 < r.ConcP5 || len(r.Series) == 0 {
			t.Errorf("%s: concurrency mean %.1f, p5 %d, p95 %d, max %d, %d samples", r.Strategy, r.ConcMean, r.ConcP5, r.ConcP95, r.ConcMax, len(r.Series))
		}
	}
	if f := results[1]; f.ConcMax > 8 || f.LimitMin != 8 || f.LimitMax != 8 {
		t.Errorf("fixed-8: concurrency up to %d, limit %d-%d", f.ConcMax, f.LimitMin, f.LimitMax)
	}
	var svg bytes.Buffer
	if err := WriteSVG(&svg, cfg, results); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, svg.Bytes(), len(results))
}

// checkSVG parses an SVG and counts its polylines: at least the in-flight
// and quota lines of each panel.
func checkSVG(t *testing.T, b []byte, panels int) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	lines := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			lines++
		}
	}
	if lines < 2*panels {
		t.Errorf("SVG has %d polylines, want at least %d", lines, 2*panels)
	}
}

func TestCapacity(t *testing.T) {
	cfg := geminisim.Config{RPM: 200, Window: time.Second,
		Schedule: []geminisim.Step{{At: 6 * time.Second, Percent: 50}, {At: 12 * time.Second, Percent: 100}}}
	tests := []struct {
		name     string
		cfg      geminisim.Config
		from, to time.Duration
		want     float64
	}{
		{"full", cfg, 0, 6 * time.Second, 1200},
		{"across the halving", cfg, 5 * time.Second, 7 * time.Second, 300},
		{"whole schedule", cfg, 0, 18 * time.Second, 3000},
		{"empty span", cfg, 3 * time.Second, 3 * time.Second, 0},
		{"per-minute window", geminisim.Config{RPM: 60}, 0, time.Minute, 60},
		{"no request quota", geminisim.Config{TPM: 1000}, 0, time.Minute, 0},
		{"rounded down like the simulator", geminisim.Config{RPM: 3, Window: time.Second, Schedule: []geminisim.Step{{At: 0, Percent: 50}}}, 0, 10 * time.Second, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Capacity(tt.cfg, tt.from, tt.to); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("Capacity = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMinimum(t *testing.T) {
	cfg := geminisim.Config{RPM: 200, Window: time.Second,
		Schedule: []geminisim.Step{{At: 6 * time.Second, Percent: 50}, {At: 12 * time.Second, Percent: 100}}}
	tests := []struct {
		name   string
		cfg    geminisim.Config
		n      int64
		want   time.Duration
		wantOK bool
	}{
		{"within the first step", cfg, 400, 2 * time.Second, true},
		{"in the halved third", cfg, 1300, 7 * time.Second, true},
		{"after it", cfg, 3000, 18 * time.Second, true},
		{"nothing to do", cfg, 0, 0, true},
		{"no quota", geminisim.Config{}, 10, 0, false},
		{"ends at zero", geminisim.Config{RPM: 10, Window: time.Second, Schedule: []geminisim.Step{{At: time.Second, Percent: 0}}}, 20, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Minimum(tt.cfg, tt.n)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Minimum = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestHalfForAThird(t *testing.T) {
	// 3000 calls at 200/s with a third at half: T = 6*3000/(5*200) = 18s.
	got := HalfForAThird(3000, 200, time.Second)
	want := []geminisim.Step{{At: 6 * time.Second, Percent: 50}, {At: 12 * time.Second, Percent: 100}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("HalfForAThird = %v, want %v", got, want)
	}
	cfg := geminisim.Config{RPM: 200, Window: time.Second, Schedule: got}
	if d, _ := Minimum(cfg, 3000); d != 18*time.Second {
		t.Errorf("an ideal client needs %v for the 3000 calls, want 18s", d)
	}
	if HalfForAThird(0, 200, time.Second) != nil || HalfForAThird(10, 0, time.Second) != nil {
		t.Error("want no schedule without calls or a quota")
	}
}

func TestDistinctReviews(t *testing.T) {
	recs := DistinctReviews(500, 1)
	seen := map[string]bool{}
	for i, r := range recs {
		if r.ID == "" || r.Fields["app"] == "" || r.Line != i+1 {
			t.Fatalf("record %d = %+v", i, r)
		}
		if seen[r.ID] {
			t.Fatalf("id %s twice", r.ID)
		}
		seen[r.ID] = true
	}
	if len(recs) != 500 || recs[0].ID != "r000001" {
		t.Fatalf("%d records, first %q", len(recs), recs[0].ID)
	}
}

func TestLookup(t *testing.T) {
	all, err := Lookup(nil)
	if err != nil || len(all) != 5 || all[0].Name != AIMD {
		t.Fatalf("Lookup(nil) = %d strategies, %v", len(all), err)
	}
	two, err := Lookup([]string{Backoff100, AIMD})
	if err != nil || len(two) != 2 || two[0].Name != Backoff100 {
		t.Fatalf("Lookup = %v, %v", two, err)
	}
	if _, err := Lookup([]string{"fixed-9"}); err == nil || !strings.Contains(err.Error(), "aimd") {
		t.Fatalf("Lookup(unknown) error = %v, want one listing the known names", err)
	}
	for _, s := range all {
		sc := s.Classify(&InstantClassify{})
		if sc.Stage == nil || sc.Workers <= 0 {
			t.Errorf("%s: stage config %+v", s.Name, sc)
		}
	}
}

// The seed's limiter, step by step: +1 per success outside the cooldown,
// x0.5 on every 429, and a semaphore that never shrinks.
func TestSeedAIMD(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSeedAIMD()
		ctx := t.Context()
		acquire := func() time.Time {
			t.Helper()
			s, err := l.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		var held []time.Time
		for range 8 {
			held = append(held, acquire())
		}
		// Eight permits: the ninth waits.
		waited := make(chan time.Time, 1)
		go func() { s, _ := l.Acquire(ctx); waited <- s }()
		synctest.Wait()
		if len(waited) != 0 {
			t.Fatal("a ninth call started with 8 permits")
		}
		l.Succeeded(held[0], 100) // limit 9: one more permit, then release
		synctest.Wait()
		if len(waited) != 1 || l.Limit() != 9 || l.Permits() != 9 {
			t.Fatalf("after a success: waiter started %v, limit %d, permits %d", len(waited) == 1, l.Limit(), l.Permits())
		}
		held = append(held[1:], <-waited)
		// Every 429 halves: three 429s take 9 to the floor of 2...
		for _, s := range held[:3] {
			l.RateLimited(s, time.Minute)
		}
		if l.Limit() != 2 {
			t.Fatalf("Limit() = %d after three 429s, want 2 (9 -> 4.5 -> 2.25 -> floor 2)", l.Limit())
		}
		// ...but the semaphore keeps every permit: 9 calls still fit.
		for range 4 {
			held = append(held, acquire())
		}
		if l.InFlight() != 9 || l.Permits() != 9 {
			t.Fatalf("InFlight() = %d, Permits() = %d after the halvings, want 9 and 9", l.InFlight(), l.Permits())
		}
		// Within the 4s cooldown successes do not grow the limit.
		time.Sleep(time.Second)
		l.Succeeded(held[3], 100)
		if l.Limit() != 2 {
			t.Fatalf("Limit() = %d within the cooldown, want 2", l.Limit())
		}
		// After it each success adds one, and every +1 adds a permit.
		time.Sleep(4 * time.Second)
		l.Succeeded(held[4], 100)
		l.Succeeded(held[5], 100)
		if l.Limit() != 4 || l.Permits() != 11 {
			t.Fatalf("Limit() = %d, Permits() = %d, want 4 and 11", l.Limit(), l.Permits())
		}
		for _, s := range held[6:] {
			l.Failed(s)
		}
		if l.InFlight() != 0 {
			t.Fatalf("InFlight() = %d, want 0", l.InFlight())
		}
	})
}

func TestSeedAIMD_Acquire_cancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewSeedAIMD()
		for range 8 {
			if _, err := l.Acquire(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { _, err := l.Acquire(ctx); errc <- err }()
		synctest.Wait()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire after cancel = %v", err)
		}
		l.Failed(time.Now())
		if l.InFlight() != 7 || l.Permits() != 8 {
			t.Fatalf("InFlight() = %d, Permits() = %d, want 7 and 8", l.InFlight(), l.Permits())
		}
	})
}

// flaky fails with err the first fails calls.
type flaky struct {
	fails int
	err   error
	calls atomic.Int64
}

func (f *flaky) Name() string { return "classify" }
func (f *flaky) Process(context.Context, pipeline.Item) (pipeline.Result, error) {
	if int(f.calls.Add(1)) <= f.fails {
		return pipeline.Result{}, f.err
	}
	return pipeline.Result{Output: []byte(`{}`)}, nil
}

func TestSeedBackoff(t *testing.T) {
	rateLimited := pipeline.RateLimited(errors.New("429"), time.Second, false)
	tests := []struct {
		name      string
		stage     *flaky
		wantCalls int64
		wantErr   pipeline.Class
		gaveUp    int64
		minWait   time.Duration
	}{
		{"succeeds after four 429s", &flaky{fails: 4, err: rateLimited}, 5, "", 0, (1 + 2 + 4 + 8 + 4*0.5) * time.Second},
		{"gives up after five", &flaky{fails: 5, err: rateLimited}, 5, pipeline.ClassPermanent, 1, 0},
		{"retries transient errors alike", &flaky{fails: 2, err: errors.New("503")}, 3, "", 0, 0},
		{"a permanent error at once", &flaky{fails: 1, err: pipeline.Permanentf("bad")}, 1, pipeline.ClassPermanent, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &SeedBackoff{Stage: tt.stage, Base: time.Second, MaxAttempts: 5}
				start := time.Now()
				_, err := s.Process(t.Context(), pipeline.Item{})
				if got := pipeline.ClassOf(t.Context(), err); got != tt.wantErr {
					t.Fatalf("error %v of class %q, want %q", err, got, tt.wantErr)
				}
				if got := tt.stage.calls.Load(); got != tt.wantCalls {
					t.Errorf("%d calls, want %d", got, tt.wantCalls)
				}
				if s.GaveUp() != tt.gaveUp {
					t.Errorf("GaveUp() = %d, want %d", s.GaveUp(), tt.gaveUp)
				}
				if waited := time.Since(start); waited < tt.minWait {
					t.Errorf("waited %v, want at least %v (the seed's delays)", waited, tt.minWait)
				}
			})
		})
	}
}

// TestRun_MaxWall checks that a run cut by MaxWall reports a timeout and
// counts what it did not finish as lost, rather than failing the bench.
func TestRun_MaxWall(t *testing.T) {
	cfg := DefaultConfig(100)
	cfg.Sim = geminisim.Config{Latency: geminisim.Latency{Base: time.Hour}}
	cfg.Timeout = 2 * time.Hour
	cfg.MaxWall = 300 * time.Millisecond
	cfg.Dir = t.TempDir()
	strategies, err := Lookup([]string{Fixed8})
	if err != nil {
		t.Fatal(err)
	}
	results, err := Run(t.Context(), cfg, strategies)
	if err != nil || len(results) != 1 {
		t.Fatalf("results %v, err %v", results, err)
	}
	r := results[0]
	if r.Status != "timeout" || r.Lost != 100-r.Dead || r.Done != 0 {
		t.Errorf("status %s, done %d, dead %d, lost %d: want a timeout with every item not dead lost", r.Status, r.Done, r.Dead, r.Lost)
	}
}
