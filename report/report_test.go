package report

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// demoData is the report of a real `sawtooth demo --items 1500` run, as
// `sawtooth report --format json` printed it.
func demoData(t testing.TB) *Data {
	t.Helper()
	b, err := os.ReadFile("testdata/demo-report.json")
	if err != nil {
		t.Fatal(err)
	}
	var d Data
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// hostileData has item text, labels, ids and group values that would
// break the page if they were not escaped.
func hostileData() *Data {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var samples []pipeline.Sample
	limit := 4
	for i := 1; i <= 30; i++ {
		s := pipeline.Sample{At: start.Add(time.Duration(i) * time.Second), Stage: "classify", Limit: limit, InFlight: limit, Successes: int64(limit)}
		if i%10 == 0 {
			s.RateLimited = 2
			limit /= 2
		} else {
			limit++
		}
		samples = append(samples, s, pipeline.Sample{At: s.At, Stage: "sanitize", Successes: 3})
	}
	evil := `<script>alert("x")</script>`
	return &Data{
		DB:        "/tmp/<b>evil</b>.db",
		Generated: start,
		Stages:    []string{"sanitize", "classify"},
		Counts: store.Counts{Items: 90, Done: 80, Stages: []store.StageCounts{
			{Stage: "sanitize", Dead: 1}, {Stage: "classify", Dead: 9},
		}},
		Tally: pipeline.Tally{
			Items:    80,
			Labels:   map[string]int64{"bug": 50, `<img src=x onerror=alert(1)>`: 30},
			Groups:   map[string]map[string]map[string]int64{"app": {`a|b"><svg onload=alert(2)>`: {"bug": 50, `<img src=x onerror=alert(1)>`: 30}}},
			Examples: map[string][]string{"bug": {`id"><script>alert(3)</script>`}},
		},
		Dead: map[string][]DeadReason{"classify": {{Reason: "permanent: item text " + evil, Count: 9, IDs: []string{"</td><script>x</script>"}}}},
		LastRun: &pipeline.RunSummary{ID: "run-1", Started: start, Ended: start.Add(31 * time.Second), Status: "complete", Message: evil,
			Stages: map[string]*pipeline.StageStats{
				"sanitize": {Done: 90, Calls: 90, Attempts: 90},
				"classify": {Done: 80, Dead: 9, Calls: 100, RateLimited: 6, Transient: 2, Unavailable: 3, LimitMin: 2, LimitMax: 13, LimitEnd: 6,
					Usage: pipeline.Usage{PromptTokens: 9000, CandidateTokens: 1000, TotalTokens: 10000}, CostUSD: 0.0123},
			}},
		Samples: samples,
	}
}

func TestHTML_EscapesEverythingFromTheData(t *testing.T) {
	var b bytes.Buffer
	if err := HTML(&b, hostileData()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, bad := range []string{"<script>alert", "<img src=x", "<svg onload", "<b>evil</b>", "</td><script>"} {
		if strings.Contains(out, bad) {
			t.Errorf("output contains unescaped %q", bad)
		}
	}
	if n := strings.Count(out, "<script"); n != 0 {
		t.Errorf("%d <script> elements; the page must run no script", n)
	}
	for _, want := range []string{"&lt;script&gt;alert(", "&lt;img src=x onerror=alert(1)&gt;", "&lt;b&gt;evil&lt;/b&gt;"} {
		if !strings.Contains(out, want) {
			t.Errorf("escaped %q missing", want)
		}
	}
	if !strings.Contains(out, `Content-Security-Policy" content="default-src 'none'`) {
		t.Error("no Content-Security-Policy forbidding loads")
	}
}

// chartPoints returns, per chart id, the data-points of each series.
func chartPoints(t testing.TB, html string) map[string]map[string]int {
	t.Helper()
	charts := map[string]map[string]int{}
	svgRe := regexp.MustCompile(`(?s)<svg class="chart" id="([^"]+)".*?</svg>`)
	seriesRe := regexp.MustCompile(`class="(?:series|marks)" data-series="([^"]*)" data-points="(\d+)"`)
	for _, m := range svgRe.FindAllStringSubmatch(html, -1) {
		charts[m[1]] = map[string]int{}
		for _, s := range seriesRe.FindAllStringSubmatch(m[0], -1) {
			n, _ := strconv.Atoi(s[2])
			charts[m[1]][s[1]] = n
		}
	}
	return charts
}

func TestHTML_ChartsFromSamples(t *testing.T) {
	d := demoData(t)
	var b bytes.Buffer
	if err := HTML(&b, d); err != nil {
		t.Fatal(err)
	}
	charts := chartPoints(t, b.String())
	perStage := len(d.Samples) / len(d.Stages) // one sample per stage per second
	want := map[string]map[string]int{
		"chart-limit": {"concurrency limit": perStage, "calls in flight": perStage},
		"chart-calls": {"succeeded": perStage, "429 rate-limited": perStage, "5xx / timeout": perStage, "unreachable": perStage},
		"chart-items": {"sanitize": perStage + 1, "classify": perStage + 1, "aggregate": perStage + 1},
	}
	for id, series := range want {
		got, ok := charts[id]
		if !ok {
			t.Errorf("chart %s missing; have %v", id, charts)
			continue
		}
		for name, n := range series {
			if got[name] != n {
				t.Errorf("chart %s series %q: %d points, want %d", id, name, got[name], n)
			}
		}
	}
	if charts["chart-limit"]["second with a 429"] == 0 {
		t.Error("chart-limit marks no second with a 429, though the run had 429s")
	}
}

func TestHTML_LongRunIsBucketed(t *testing.T) {
	d := hostileData()
	start := d.LastRun.Started
	d.Samples = nil
	for i := 1; i <= 3*maxPoints; i++ {
		d.Samples = append(d.Samples, pipeline.Sample{At: start.Add(time.Duration(i) * time.Second), Stage: "classify", Limit: 1 + i%7, Successes: 1})
	}
	d.LastRun.Ended = start.Add(time.Duration(3*maxPoints) * time.Second)
	var b bytes.Buffer
	if err := HTML(&b, d); err != nil {
		t.Fatal(err)
	}
	charts := chartPoints(t, b.String())
	if n := charts["chart-limit"]["concurrency limit"]; n != maxPoints {
		t.Errorf("limit series has %d points, want %d (bucketed)", n, maxPoints)
	}
	if !strings.Contains(b.String(), ">50:00<") {
		t.Error("x axis of a 3048 s run has no 50:00 tick")
	}
}

func TestHTML_NoRunYet(t *testing.T) {
	d := &Data{DB: "new.db", Counts: store.Counts{Items: 3, Stages: []store.StageCounts{{Stage: "sanitize", Queued: 3}}}}
	var b bytes.Buffer
	if err := HTML(&b, d); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"No run recorded yet", "No item has been aggregated yet", "None."} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q", want)
		}
	}
	if strings.Contains(b.String(), `<svg class="chart"`) {
		t.Error("a chart without samples")
	}
}

func TestMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := Markdown(&b, hostileData()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"## sawtooth report:",
		"| stage | done | dead | attempts | calls | 429s | 5xx/timeouts | unreachable | tokens in | tokens out | est. cost |",
		"| classify | 80 | 9 | 0 | 100 | 6 | 2 | 3 | 9,000 | 1,000 | $0.0123 |",
		"concurrency limit 2–13, ended at 6",
		"### Label by app",
		`a\|b&quot;&gt;&lt;svg onload=alert\(2\)&gt;`, // a pipe must not split the cell, nor a tag open
		"### Dead letters",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
	// Every table row has as many cells as its header.
	var cols int
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "|") {
			cols = 0
			continue
		}
		n := strings.Count(strings.ReplaceAll(line, `\|`, ""), "|")
		if cols == 0 {
			cols = n
		} else if n != cols {
			t.Errorf("row with %d separators under a header with %d: %s", n, cols, line)
		}
	}
}

func TestText(t *testing.T) {
	var b bytes.Buffer
	if err := Text(&b, demoData(t)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1,500 items: 1,483 done, 17 dead letters, 0 queued", "Last run\n========", "Label by month", "classify: 1,542 calls, 429 share 1.10%"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}

func TestNiceTicks(t *testing.T) {
	tests := []struct {
		name string
		max  float64
		want []float64
	}{
		{"zero", 0, []float64{0, 1}},
		{"small", 3, []float64{0, 1, 2, 3}},
		{"limit", 24, []float64{0, 5, 10, 15, 20, 25}},
		{"items", 1483, []float64{0, 500, 1000, 1500}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := niceTicks(tt.max, 5)
			if len(got) != len(tt.want) {
				t.Fatalf("niceTicks(%v) = %v, want %v", tt.max, got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("niceTicks(%v) = %v, want %v", tt.max, got, tt.want)
				}
			}
		})
	}
}

func TestFormat(t *testing.T) {
	if got := num(1234567); got != "1,234,567" {
		t.Errorf("num = %q", got)
	}
	if got := num(-1234); got != "-1,234" {
		t.Errorf("num = %q", got)
	}
	if got := clock(3725); got != "1:02:05" {
		t.Errorf("clock = %q", got)
	}
	if got := dur(54*time.Second + 780*time.Millisecond); got != "54.8s" {
		t.Errorf("dur = %q", got)
	}
}

// TestHTML_ItemsCompletedStagesDistinguishable: in the fixed run the three
// stages finish the same items each second, so their cumulative lines
// coincide; each must still have its own dash pattern and marker shape,
// drawn on the line and in the legend.
func TestHTML_ItemsCompletedStagesDistinguishable(t *testing.T) {
	var b bytes.Buffer
	if err := HTML(&b, fixtureData(t)); err != nil {
		t.Fatal(err)
	}
	svg := regexp.MustCompile(`(?s)<svg class="chart" id="chart-items".*?</svg>`).FindString(b.String())
	if svg == "" {
		t.Fatal("no chart-items")
	}
	lines := regexp.MustCompile(`<polyline class="series" data-series="([^"]+)"[^>]*?stroke-width="([^"]+)"(?: stroke-dasharray="([^"]+)")?/><g class="markers" data-marker="([^"]+)">`).FindAllStringSubmatch(svg, -1)
	if len(lines) != 3 {
		t.Fatalf("%d stage lines with markers, want 3 (sanitize, classify, aggregate)", len(lines))
	}
	seen := map[string]string{}
	for _, l := range lines {
		style := "dash " + l[3] + " marker " + l[4]
		if other, dup := seen[style]; dup {
			t.Errorf("stages %s and %s share the style %q: overlapping lines cannot be told apart", other, l[1], style)
		}
		seen[style] = l[1]
		if n := strings.Count(svg, `data-marker="`+l[4]+`"`); n < 1 {
			t.Errorf("stage %s: no markers drawn", l[1])
		}
	}
	legend := svg[strings.LastIndex(svg, `</g>`):]
	for _, l := range lines {
		if !strings.Contains(legend, `>`+l[1]+`</text>`) {
			t.Errorf("legend lacks stage %s", l[1])
		}
	}
	if strings.Count(legend, `stroke-dasharray=`) < 2 || strings.Count(legend, `stroke="#fff"`) < 3 {
		t.Error("the legend does not show each stage's dash pattern and marker")
	}
}
