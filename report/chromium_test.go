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
	"strconv"
	"strings"
	"testing"
	"time"
)

// chromium returns the path of a headless-capable Chromium. Without one
// the test is skipped on a developer's machine and fails in CI (CI set),
// whose .ci/run installs Debian's chromium.
func chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not on PATH; CI must install it (apt-get install -y chromium)")
	}
	t.Skip("chromium is not on PATH (apt-get install -y chromium); set CI to make this a failure")
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

// TestHTML_Chromium renders the report of a real demo run in headless
// Chromium: the page loads with no console message (it has no script, so
// any message is an error, e.g. a blocked load), the browser's DOM holds
// the three charts with their points, and the screenshot shows the
// series' colours. Set SAWTOOTH_SCREENSHOT_DIR to keep the screenshot.
func TestHTML_Chromium(t *testing.T) {
	bin := chromium(t)
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	var b bytes.Buffer
	if err := HTML(&b, demoData(t)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(page, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	url := "file://" + page

	dom, logs := runChromium(t, bin, url, "--enable-logging=stderr", "--v=0", "--dump-dom")
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, ":CONSOLE") {
			t.Errorf("console message while loading the report: %s", line)
		}
	}
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

	shotDir := os.Getenv("SAWTOOTH_SCREENSHOT_DIR")
	if shotDir == "" {
		shotDir = dir
	} else if err := os.MkdirAll(shotDir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(shotDir, "report.png")
	runChromium(t, bin, url, "--screenshot="+shot, "--window-size=1280,2000")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if got := img.Bounds().Size(); got.X != 1280 || got.Y != 2000 {
		t.Errorf("screenshot is %v, want 1280x2000", got)
	}
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
	t.Logf("screenshot: %s", shot)
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
