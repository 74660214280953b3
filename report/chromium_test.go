package report

import (
	"bytes"
	"context"
	"image"
	"image/draw"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// chromium returns the path of a headless-capable Chromium: the one
// SAWTOOTH_CHROMIUM names, else the first of the usual names on PATH.
// The browser tests run whenever one is found; without one they skip on a
// developer's machine and fail in CI (CI set), whose .ci/run installs
// Debian's chromium.
func chromium(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("SAWTOOTH_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("SAWTOOTH_CHROMIUM=%s: %v", p, err)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" || os.Getenv("SAWTOOTH_REQUIRE_CHROMIUM") != "" {
		t.Fatal("chromium is not on PATH; CI must install it (apt-get install -y chromium)")
	}
	t.Skip("skipping the browser test: no chromium on PATH (apt-get install -y chromium, or set SAWTOOTH_CHROMIUM to its path); it runs whenever one is found")
	return ""
}

// runChromium runs headless Chromium on url with args and returns its
// stdout and stderr.
func runChromium(t testing.TB, bin, url string, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, bin, append(append(base, args...), url)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, errb.String())
	}
	return out.String(), errb.String()
}

// writePage renders d as report.html in a temporary directory and
// returns its file URL.
func writePage(t *testing.T, d *Data) string {
	t.Helper()
	page := filepath.Join(t.TempDir(), "report.html")
	var b bytes.Buffer
	if err := HTML(&b, d); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return "file://" + page
}

// loadPage loads url in headless Chromium and returns the browser's DOM,
// failing on any console message (the page has no script, so any message
// is an error, e.g. a load the CSP blocked).
func loadPage(t *testing.T, bin, url string) string {
	t.Helper()
	dom, logs := runChromium(t, bin, url, "--enable-logging=stderr", "--v=0", "--dump-dom")
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, ":CONSOLE") {
			t.Errorf("console message while loading the report: %s", line)
		}
	}
	return dom
}

// screenshot saves a screenshot of url as name in SAWTOOTH_SCREENSHOT_DIR
// (a temporary directory when unset) and decodes it.
func screenshot(t *testing.T, bin, url, name string, w, h int) image.Image {
	t.Helper()
	dir := os.Getenv("SAWTOOTH_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, name)
	runChromium(t, bin, url, "--screenshot="+shot, "--window-size="+strconv.Itoa(w)+","+strconv.Itoa(h))
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if got := img.Bounds().Size(); got.X != w || got.Y != h {
		t.Errorf("screenshot is %v, want %dx%d", got, w, h)
	}
	t.Logf("screenshot: %s", shot)
	return img
}

// TestHTML_Chromium_Readers renders the fixed dataset's report (hostile
// app names and reviews included) in headless Chromium: it loads with no
// console message, the browser's DOM holds a trend chart per label with a
// point per month and three quotes per label, the hostile text arrives as
// text (no element from it), and the screenshot shows the trend lines.
func TestHTML_Chromium_Readers(t *testing.T) {
	bin := chromium(t)
	d := fixtureData(t)
	url := writePage(t, d)
	dom := loadPage(t, bin, url)

	trends := regexp.MustCompile(`<svg class="trend" data-label="([^"]*)" data-points="(\d+)"`).FindAllStringSubmatch(dom, -1)
	if len(trends) != len(d.Pivot.Labels) {
		t.Errorf("%d trend charts in the DOM, want one per label (%d)", len(trends), len(d.Pivot.Labels))
	}
	for _, m := range trends {
		if m[2] != "3" {
			t.Errorf("trend of %s has %s points, want 3 (one per month)", m[1], m[2])
		}
	}
	quotes := regexp.MustCompile(`(?s)<div class="quotes" id="quotes">.*?</div>`).FindString(dom)
	groups := regexp.MustCompile(`(?s)<section class="quote-group" data-label="([^"]*)"><h3>[^<]*</h3>(.*?)</section>`).FindAllStringSubmatch(quotes, -1)
	if len(groups) != len(d.Pivot.Labels) {
		t.Fatalf("%d groups of quotes in the DOM, want one per label (%d)", len(groups), len(d.Pivot.Labels))
	}
	for _, g := range groups {
		if n := strings.Count(g[2], `<blockquote class="quote">`); n != DefaultQuotes {
			t.Errorf("label %s has %d quotes, want %d", g[1], n, DefaultQuotes)
		}
	}
	for _, bad := range []string{"<script", "<img", "onerror=alert(1)>"} {
		if strings.Contains(dom, bad) {
			t.Errorf("the browser's DOM holds %q: hostile text became markup", bad)
		}
	}
	if !strings.Contains(dom, "&lt;script&gt;alert") || !strings.Contains(dom, "Export fails") {
		t.Error("the hostile app name or review is not shown as text")
	}
	if !strings.Contains(dom, `<details class="ops">`) {
		t.Error("the operations section is not collapsed under <details>")
	}

	img := screenshot(t, bin, url, "report.png", 1280, 2400)
	var hexes []string
	for i := range d.Pivot.Labels {
		hexes = append(hexes, stageColors[i%len(stageColors)])
	}
	for i, n := range countColors(img, hexes) {
		if n < 150 {
			t.Errorf("screenshot has %d pixels of the %s trend (%s), want at least 150", n, d.Pivot.Labels[i], hexes[i])
		}
	}
}

// TestHTML_Chromium renders the report of a real demo run (no cube, so
// the operations section is open) in headless Chromium: no console
// message, the DOM holds the three charts with their points, and the
// screenshot shows the series' colours.
func TestHTML_Chromium(t *testing.T) {
	bin := chromium(t)
	url := writePage(t, demoData(t))
	dom := loadPage(t, bin, url)
	charts := chartPoints(t, dom)
	for _, id := range []string{"chart-limit", "chart-calls", "chart-items"} {
		series := charts[id]
		if len(series) == 0 {
			t.Errorf("the browser's DOM has no chart %s (charts: %v)", id, charts)
		}
		for name, n := range series {
			if n == 0 {
				t.Errorf("chart %s series %q has no points", id, name)
			}
		}
	}
	if !strings.Contains(dom, "Label by month") || !strings.Contains(dom, "Dead letters (17)") {
		t.Error("the browser's DOM lacks the aggregate or dead-letter sections")
	}
	img := screenshot(t, bin, url, "report-operations.png", 1280, 2600)
	// Each series is drawn in its own colour; enough pixels of each mean
	// the lines and bars were painted, not just declared.
	want := []struct {
		name    string
		hex     string
		atLeast int
	}{
		{"concurrency limit", colorLimit, 1000},
		{"succeeded", colorOK, 600},
		{"429s", color429, 50},
		{"5xx", color5xx, 50},
	}
	var hexes []string
	for _, c := range want {
		hexes = append(hexes, c.hex)
	}
	counts := countColors(img, hexes)
	for i, c := range want {
		if counts[i] < c.atLeast {
			t.Errorf("screenshot has %d pixels of %s (%s), want at least %d", counts[i], c.name, c.hex, c.atLeast)
		}
	}
}

// countColors counts, for each colour, the pixels within a small
// distance of it.
func countColors(img image.Image, hexes []string) []int {
	want := make([][3]int, len(hexes))
	for k, hex := range hexes {
		for i := range want[k] {
			v, _ := strconv.ParseUint(hex[1+2*i:3+2*i], 16, 8)
			want[k][i] = int(v)
		}
	}
	rgba := image.NewRGBA(img.Bounds())
	draw.Draw(rgba, rgba.Bounds(), img, img.Bounds().Min, draw.Src)
	counts := make([]int, len(hexes))
	for p := 0; p+3 < len(rgba.Pix); p += 4 {
		r, g, b := int(rgba.Pix[p]), int(rgba.Pix[p+1]), int(rgba.Pix[p+2])
		for k, w := range want {
			if abs(r-w[0])+abs(g-w[1])+abs(b-w[2]) <= 24 {
				counts[k]++
			}
		}
	}
	return counts
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
