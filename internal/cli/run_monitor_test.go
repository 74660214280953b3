package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/internal/monitor"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// startTestSim serves a simulator whose quota makes a few hundred items
// take several seconds, with some 429s and 503s on the way.
func startTestSim(t testing.TB) string {
	t.Helper()
	sim := geminisim.New(geminisim.Config{
		RPM: 40, TPM: 10_000_000, Window: 500 * time.Millisecond,
		Latency: geminisim.Latency{Base: 40 * time.Millisecond, Jitter: 40 * time.Millisecond},
		Faults:  geminisim.Faults{Err503: 0.02}, Seed: 7,
	})
	url, err := sim.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	t.Setenv("GEMINI_API_KEY", geminisim.DefaultAPIKey)
	return url
}

// metricValue returns the value of the sample whose name and labels
// (as Prometheus prints them, labels sorted) start line, or -1.
func metricValue(body, series string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func scrape(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// gatedSim serves sim through a gate: once after calls have passed,
// every further call waits until release is called, so a test can look at
// a run that is certainly still running, however fast or slow the machine.
func gatedSim(t testing.TB, after int64) (url string, release func()) {
	t.Helper()
	simURL := startTestSim(t)
	target, err := neturl.Parse(simURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	gate := make(chan struct{})
	var once sync.Once
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, ":generateContent") && calls.Add(1) > after {
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(func() { release(); srv.Close() })
	return srv.URL, release
}

// TestRun_MetricsStatusAndReport drives a real run in-process against the
// simulator and, while it runs, scrapes its metrics, asks `status` and
// watches it; then checks the summary and renders the report.
func TestRun_MetricsStatusAndReport(t *testing.T) {
	// The gate holds calls after the first 60 until the live checks are
	// done, so none of them can be skipped because the run finished.
	url, release := gatedSim(t, 60)
	dir := t.TempDir()
	db, input := filepath.Join(dir, "run.db"), filepath.Join(dir, "items.jsonl")
	if _, err := writeFirstLines(input, testReviews(t), 400); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	exit := make(chan error, 1)
	go func() {
		exit <- runApp([]string{"sawtooth", "run", "--db", db, "--input", input, "--base-url", url, "--timeout", "60s", "--start", "4",
			"--metrics-addr", "127.0.0.1:0", "--log-format", "json"}, &stdout, &stderr)
	}()
	running := func() bool {
		select {
		case err := <-exit:
			exit <- err
			return false
		default:
			return true
		}
	}

	// The run publishes its live status, metrics address included, at once.
	var live monitor.LiveStatus
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(monitor.LiveStatusPath(db))
		if err == nil && json.Unmarshal(b, &live) == nil && live.MetricsURL != "" {
			break
		}
		if time.Now().After(deadline) || !running() {
			t.Fatalf("no live status with a metrics URL (running %v); stderr:\n%s", running(), stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Scrape until classify has committed items, while the run lasts.
	var body string
	for {
		body = scrape(t, live.MetricsURL)
		if metricValue(body, `sawtooth_calls_total{outcome="ok",stage="classify"}`) > 0 &&
			metricValue(body, `sawtooth_items_total{stage="classify",state="done"}`) > 0 {
			break
		}
		if time.Now().After(deadline) || !running() {
			t.Fatalf("no successful classify call in the metrics during the run (running %v):\n%s", running(), body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, series := range []string{
		`sawtooth_items_total{stage="classify",state="done"}`,
		`sawtooth_items_total{stage="sanitize",state="dead"}`,
		`sawtooth_items_queued{stage="classify"}`,
		`sawtooth_items_expected{stage="aggregate"}`,
		`sawtooth_calls_total{outcome="rate_limited",stage="classify"}`,
		`sawtooth_calls_total{outcome="transient",stage="classify"}`,
		`sawtooth_concurrency_limit{stage="classify"}`,
		`sawtooth_in_flight{stage="classify"}`,
		`sawtooth_tokens_total{direction="input",stage="classify"}`,
		`sawtooth_tokens_total{direction="output",stage="classify"}`,
		`sawtooth_cost_usd_total{stage="classify"}`,
		`sawtooth_items_per_second{stage="classify"}`,
	} {
		if metricValue(body, series) < 0 {
			t.Errorf("metrics lack %s", series)
		}
	}
	if v := metricValue(body, `sawtooth_concurrency_limit{stage="classify"}`); v < 1 {
		t.Errorf("concurrency limit %v during the run", v)
	}
	if !strings.Contains(body, "go_goroutines") {
		t.Error("metrics lack the Go runtime's")
	}

	// status answers from the live figures while the run holds the DB.
	var out syncBuffer
	if err := runApp([]string{"sawtooth", "status", "--db", db}, &out, &out); err != nil {
		t.Fatalf("status during the run: %v: %s", err, out.String())
	}
	if !running() {
		t.Fatal("the run ended while its calls were held at the gate")
	}
	for _, want := range []string{"a run is in progress", "classify", "concurrency limit", "metrics: http://"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status during the run lacks %q:\n%s", want, out.String())
		}
	}
	// and --watch keeps answering: it is stopped once it has drawn two
	// live frames (no wall-clock bound on how fast it draws them).
	var watched syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	watchDone := make(chan error, 1)
	go func() {
		watchDone <- runStatus(ctx, &statusOptions{DB: db, Watch: true, Every: 50 * time.Millisecond, Out: &watched})
	}()
	for strings.Count(watched.String(), "a run is in progress") < 2 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-watchDone; err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(watched.String(), "a run is in progress"); n < 2 {
		t.Errorf("watch drew %d live frames in a minute:\n%s", n, watched.String())
	}
	release()

	var runErr error
	select {
	case runErr = <-exit:
	case <-time.After(2 * time.Minute):
		t.Fatal("the run did not finish")
	}
	if runErr != nil {
		t.Fatalf("run: %v\nstdout:\n%s\nstderr:\n%s", runErr, stdout.String(), stderr.String())
	}
	if _, err := os.Stat(monitor.LiveStatusPath(db)); !os.IsNotExist(err) {
		t.Errorf("live status file left after the run: %v", err)
	}
	for _, want := range []string{"complete in", "5xx/timeouts", "tokens in", "classify: 429 share", "concurrency limit ranged", "total"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout.String())
		}
	}
	if strings.Contains(stdout.String(), `"level"`) {
		t.Errorf("log records on stdout:\n%s", stdout.String())
	}
	sawMetricsRecord := false
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		var rec map[string]any
		if !strings.HasPrefix(line, "{") {
			continue // plain notices such as the ingest line
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("--log-format json wrote a line that is not JSON: %q", line)
		}
		sawMetricsRecord = sawMetricsRecord || rec["msg"] == "serving metrics"
	}
	if !sawMetricsRecord {
		t.Errorf("no 'serving metrics' record on stderr:\n%s", stderr.String())
	}

	// The report of that run: charts with points, and Markdown.
	page := filepath.Join(dir, "report.html")
	if err := runApp([]string{"sawtooth", "report", "--db", db, "--format", "html", "-o", page}, &out, &out); err != nil {
		t.Fatalf("report: %v: %s", err, out.String())
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"chart-limit", "chart-calls", "chart-items"} {
		if !strings.Contains(string(html), `id="`+id+`"`) {
			t.Errorf("report lacks chart %s", id)
		}
	}
	points := regexp.MustCompile(`data-points="(\d+)"`).FindAllStringSubmatch(string(html), -1)
	if len(points) < 7 {
		t.Errorf("%d series in the report's charts, want at least 7", len(points))
	}
	for _, p := range points {
		if p[1] == "0" {
			t.Errorf("a chart series with no points")
		}
	}
	var md syncBuffer
	if err := runApp([]string{"sawtooth", "report", "--db", db, "--format", "markdown"}, &md, &md); err != nil {
		t.Fatalf("report markdown: %v: %s", err, md.String())
	}
	if !strings.Contains(md.String(), "| classify |") || !strings.Contains(md.String(), "### Label by month") {
		t.Errorf("markdown report:\n%s", md.String())
	}

	// A run with nothing left to do still summarises, as JSON with --json.
	var js syncBuffer
	if err := runApp([]string{"sawtooth", "run", "--db", db, "--base-url", url, "--json", "--no-progress"}, &js, io.Discard); err != nil {
		t.Fatalf("second run: %v: %s", err, js.String())
	}
	var sum struct {
		Status      string   `json:"status"`
		WallSeconds *float64 `json:"wall_seconds"`
		Totals      *struct {
			Calls int64 `json:"calls"`
		} `json:"totals"`
	}
	if err := json.Unmarshal([]byte(js.String()), &sum); err != nil || sum.Status != "complete" || sum.WallSeconds == nil || sum.Totals == nil {
		t.Errorf("--json summary = %+v (%v):\n%s", sum, err, js.String())
	}
}
