package monitor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"go.uber.org/goleak"
)

// syncBuffer is a bytes.Buffer safe for concurrent use: the fake terminal
// the bars draw on, or a captured stderr.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fakeClock steps by one second per call.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { c.t = c.t.Add(time.Second); return c.t }

func testProgressConfig(t testing.TB) Config {
	clock := &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	return Config{
		RunConfig: RunConfig{
			DBPath: filepath.Join(t.TempDir(), "test.db"),
			RunID:  "run-1",
			Stages: []string{"sanitize", "classify", "aggregate"},
			Queued: []int64{100, 20, 0},
			Cost:   func(u pipeline.Usage) float64 { return float64(u.PromptTokens)*1e-6 + float64(u.CandidateTokens)*2e-6 },
		},
		Now: clock.now,
	}
}

// progressAt is the runner's figures after sec seconds of a made-up run:
// sanitize done at once (2 dead), classify at 10 items a second with a
// limit of 8, aggregate right behind it.
func progressAt(sec int64) pipeline.Progress {
	c := min(10*sec, 108)
	return pipeline.Progress{Elapsed: time.Duration(sec) * time.Second, Stages: []pipeline.StageProgress{
		{Name: "sanitize", Done: 98, Dead: 2, Calls: 100},
		{Name: "classify", Done: c, Dead: 1, Calls: c + 11, RateLimited: 10, Transient: 1, Unavailable: 2, Limit: 8, InFlight: 7,
			Usage: pipeline.Usage{PromptTokens: 120 * c, CandidateTokens: 20 * c, TotalTokens: 140 * c}},
		{Name: "aggregate", Done: max(c-2, 0)},
	}}
}

func TestProgressPrinter_BarsOnAFakeTerminal(t *testing.T) {
	term := &syncBuffer{}
	refresh := make(chan any)
	cfg := testProgressConfig(t)
	cfg.Live, cfg.Width, cfg.Refresh = true, 150, refresh
	out := NewSwitchWriter(term)
	log, err := NewLogger(out, "text", "info")
	if err != nil {
		t.Fatal(err)
	}
	p := NewProgress(out, log, cfg)
	for sec := int64(1); sec <= 5; sec++ {
		p.Tick(progressAt(sec))
		refresh <- sec
	}
	log.Warn("stage parked", "reason", "test")
	refresh <- 6
	p.Close()

	screen := term.String()
	if !strings.Contains(screen, "\x1b[") {
		t.Errorf("no cursor movement: the bars were not redrawn in place:\n%q", screen)
	}
	// The last frame is what the user is left with.
	last := screen[strings.LastIndex(screen, "sanitize"):]
	for _, want := range []string{
		"100/100", "2 dead", "done at 0:01", // sanitize: finished in the first second
		"51/118", "10.2/s", "ETA 0:07", // classify: 50 done + 1 dead of 100-2+20, 51 in 5 s
		"48/117",                                     // aggregate: 48 of 118-1
		"limit 8", "in flight 7", "429s 16.4% of 61", // the line under the bars
		"5xx/timeouts 1", "unreachable 2", "tokens 6.0k in / 1.0k out", "est. $0.0080",
	} {
		if !strings.Contains(last, want) {
			t.Errorf("last frame lacks %q:\n%s", want, last)
		}
	}
	if !strings.Contains(screen, "level=WARN msg=\"stage parked\"") {
		t.Errorf("a log record written while the bars were live is missing:\n%s", screen)
	}
	if strings.Contains(screen, "msg=progress") {
		t.Error("progress records were logged although the bars were live")
	}
}

// On a resume the bars count against the whole pipeline: what left each
// stage before the run plus this run's share, and a stage with nothing
// before or now gets no empty 0/0 bar.
func TestProgressPrinter_ResumeCountsWholePipeline(t *testing.T) {
	term := &syncBuffer{}
	refresh := make(chan any)
	cfg := testProgressConfig(t)
	cfg.Before = []int64{200, 180, 150}
	cfg.Live, cfg.Width, cfg.Refresh = true, 150, refresh
	p := NewProgress(NewSwitchWriter(term), nil, cfg)
	for sec := int64(1); sec <= 5; sec++ {
		p.Tick(progressAt(sec))
		refresh <- sec
	}
	p.Close()
	screen := term.String()
	last := screen[strings.LastIndex(screen, "sanitize"):]
	for _, want := range []string{"300/300", "231/298", "198/267"} {
		if !strings.Contains(last, want) {
			t.Errorf("last frame lacks %q:\n%s", want, last)
		}
	}
}

func TestProgressPrinter_NoEmptyBar(t *testing.T) {
	term := &syncBuffer{}
	refresh := make(chan any)
	cfg := testProgressConfig(t)
	cfg.Stages, cfg.Queued, cfg.Before = []string{"sanitize", "classify"}, []int64{0, 0}, []int64{5, 0}
	cfg.Live, cfg.Width, cfg.Refresh = true, 150, refresh
	p := NewProgress(NewSwitchWriter(term), nil, cfg)
	p.Tick(pipeline.Progress{})
	refresh <- 1
	p.Close()
	screen := term.String()
	if !strings.Contains(screen, "5/5") {
		t.Errorf("sanitize's bar lacks 5/5:\n%s", screen)
	}
	if strings.Contains(screen, "classify  │") || strings.Contains(screen, "0/0") {
		t.Errorf("a stage with no items got a bar:\n%s", screen)
	}
}

func TestProgressPrinter_LogRecordsWhenNotATerminal(t *testing.T) {
	var stderr syncBuffer
	cfg := testProgressConfig(t)
	out := NewSwitchWriter(&stderr)
	log, err := NewLogger(out, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	p := NewProgress(out, log, cfg)
	for sec := int64(1); sec <= 11; sec++ {
		p.Tick(progressAt(sec))
	}
	p.Close()

	var records []map[string]any
	sc := bufio.NewScanner(strings.NewReader(stderr.String()))
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("not a JSON record: %q: %v", sc.Text(), err)
		}
		records = append(records, r)
	}
	if len(records) != 2 {
		t.Fatalf("%d records in 11 s at one per 5 s, want 2:\n%s", len(records), stderr.String())
	}
	r := records[1]
	if r["msg"] != "progress" || r["level"] != "INFO" || r["elapsed"] != "10s" {
		t.Errorf("record = %v", r)
	}
	cl, _ := r["classify"].(map[string]any)
	want := map[string]any{"done": 100.0, "dead": 1.0, "total": 118.0, "rate": 10.1, "eta": "0:02", "limit": 8.0,
		"in_flight": 7.0, "calls": 111.0, "r429_pct": 9.0, "tokens_in": 12000.0, "tokens_out": 2000.0, "cost_usd": 0.016}
	for k, v := range want {
		if cl[k] != v {
			t.Errorf("classify.%s = %v, want %v (record %v)", k, cl[k], v, cl)
		}
	}
}

func TestProgressPrinter_QuietAtWarnLevel(t *testing.T) {
	var stderr syncBuffer
	out := NewSwitchWriter(&stderr)
	log, err := NewLogger(out, "text", "warn")
	if err != nil {
		t.Fatal(err)
	}
	p := NewProgress(out, log, testProgressConfig(t))
	for sec := int64(1); sec <= 11; sec++ {
		p.Tick(progressAt(sec))
	}
	p.Close()
	if stderr.String() != "" {
		t.Errorf("--log-level warn printed %q", stderr.String())
	}
}

func TestProgressPrinter_StatusFile(t *testing.T) {
	cfg := testProgressConfig(t)
	p := NewProgress(NewSwitchWriter(&syncBuffer{}), nil, cfg)
	p.setMetricsURL("http://127.0.0.1:1/metrics")
	p.Tick(progressAt(3))
	b, err := os.ReadFile(LiveStatusPath(cfg.DBPath))
	if err != nil {
		t.Fatal(err)
	}
	var live LiveStatus
	if err := json.Unmarshal(b, &live); err != nil {
		t.Fatal(err)
	}
	if live.PID != os.Getpid() || live.RunID != "run-1" || live.MetricsURL == "" || len(live.Stages) != 3 {
		t.Fatalf("status = %+v", live)
	}
	cl := live.Stages[1]
	if cl.Total != 118 || cl.Done != 30 || cl.Queued != 98+20-31 || cl.Limit != 8 || cl.TokensIn != 3600 {
		t.Errorf("classify = %+v", cl)
	}
	if a := live.api(); a == nil || a.Name != "classify" {
		t.Errorf("api stage = %v", a)
	}
	p.Close()
	if _, err := os.Stat(LiveStatusPath(cfg.DBPath)); !os.IsNotExist(err) {
		t.Errorf("status file left after close: %v", err)
	}
	p.Tick(progressAt(4)) // ignored after close
	if _, err := os.Stat(LiveStatusPath(cfg.DBPath)); !os.IsNotExist(err) {
		t.Errorf("a tick after close wrote the status file: %v", err)
	}
}

func TestRateWindow(t *testing.T) {
	var w rateWindow
	t0 := time.Unix(0, 0)
	if r := w.add(t0, 0); r != 0 {
		t.Errorf("first rate = %v", r)
	}
	for s := 1; s <= 20; s++ {
		n := int64(5 * s)
		if s > 10 {
			n = 50 + int64(20*(s-10)) // faster from 10 s on
		}
		w.add(t0.Add(time.Duration(s)*time.Second), n)
	}
	if r := w.add(t0.Add(21*time.Second), 50+20*11); r != 20 {
		t.Errorf("rate over the last 10 s = %v, want 20", r)
	}
}

func TestNewLogger(t *testing.T) {
	tests := []struct {
		name, format, level string
		wantErr             bool
	}{
		{"defaults", "", "", false},
		{"json debug", "json", "debug", false},
		{"text warn", "TEXT", "WARN", false},
		{"bad format", "yaml", "info", true},
		{"bad level", "text", "loud", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewLogger(&bytes.Buffer{}, tt.format, tt.level)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err != nil && !strings.Contains(err.Error(), "--log-") {
				t.Errorf("error %q does not name the option", err)
			}
		})
	}
}

func TestStartMetrics_BadAddress(t *testing.T) {
	p := NewProgress(NewSwitchWriter(io.Discard), nil, testProgressConfig(t))
	defer p.Close()
	_, err := startMetrics("256.0.0.1:bad", p, p.log)
	if err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
		t.Fatalf("err = %v, want an error naming --metrics-addr", err)
	}
}

func TestStart_BadOptions(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"log format", Options{LogFormat: "yaml"}, "--log-format"},
		{"log level", Options{LogLevel: "loud"}, "--log-level"},
		{"metrics address", Options{MetricsAddr: "256.0.0.1:bad"}, "--metrics-addr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "x.db")
			_, err := Start(io.Discard, tt.opts, RunConfig{DBPath: db, Stages: []string{"a"}, Queued: []int64{1}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one naming %s", err, tt.want)
			}
			if _, err := os.Stat(LiveStatusPath(db)); !os.IsNotExist(err) {
				t.Errorf("a failed start left a status file: %v", err)
			}
		})
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
