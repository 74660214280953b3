package cli

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDemo_TierPrices: `demo --tier flex` and `--tier auto` print their
// cost beside a standard run's on the same reviews (flex half of it, the
// simulator's faults off so both runs pay the same calls); the default
// demo prints no comparison and succeeds as before.
func TestDemo_TierPrices(t *testing.T) {
	quick := []string{"--items", "60", "--quiet", "--sim-flex-latency", "5ms", "--sim-flex-jitter", "5ms",
		"--fault-500", "0", "--fault-503", "0", "--fault-hang", "0", "--fault-malformed", "0", "--fault-block-prompt", "0", "--fault-block-candidate", "0", "--fault-max-tokens", "0"}
	price := regexp.MustCompile(`price of the same reviews: standard \$([0-9.]+) \((\d+) calls, [^)]*\); (\w+) \$([0-9.]+) \((\d+) calls`)
	for _, tc := range []struct {
		name string
		args []string
		tier string // "" for no comparison
	}{
		{"default", nil, ""},
		{"flex", []string{"--tier", "flex"}, "flex"},
		{"auto", []string{"--tier", "auto", "--flex-deadline", "1s"}, "auto"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut syncBuffer
			args := append(append([]string{"sawtooth", "demo", "--db", t.TempDir() + "/demo.db"}, quick...), tc.args...)
			if err := NewApp(Config{Stdout: &out, Stderr: &errOut, DemoReviews: testReviews(t)}).Run(args); err != nil {
				t.Fatalf("demo: %v\n%s", err, errOut.String())
			}
			m := price.FindStringSubmatch(out.String())
			if tc.tier == "" {
				if m != nil || strings.Contains(errOut.String(), "standard tier") {
					t.Errorf("the default demo compares prices:\n%s", out.String())
				}
				return
			}
			if m == nil || m[3] != tc.tier {
				t.Fatalf("demo --tier %s prints no price beside standard's:\n%s", tc.tier, out.String())
			}
			std, _ := strconv.ParseFloat(m[1], 64)
			got, _ := strconv.ParseFloat(m[4], 64)
			if m[2] != m[5] || std == 0 {
				t.Errorf("standard paid %s calls, %s %s: want the same calls", m[2], tc.tier, m[5])
			}
			// Flex bills half; auto at most standard.
			if tc.tier == "flex" && (got < std/2-0.0001 || got > std/2+0.0001) || got > std+0.0001 {
				t.Errorf("%s $%v against standard $%v", tc.tier, got, std)
			}
		})
	}
}
