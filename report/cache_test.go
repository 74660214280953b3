package report

import (
	"bytes"
	"strings"
	"testing"
)

// TestCachedAnswersShown: a run whose API stage reused answers says how
// many, and what they saved, in the text and the HTML report; a run
// without any says nothing about a cache.
func TestCachedAnswersShown(t *testing.T) {
	tests := []struct {
		name             string
		cached           int64
		saved            float64
		wantText, wantHT string
	}{
		{"cached answers", 661, 0.1234, "classify: 110 paid calls, 661 cached answers (no call), $0.0021 spent, $0.1234 saved by the cache", "cached answers"},
		{"no cache hits", 0, 0, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := fixtureData(t)
			d.LastRun.Stages["classify"].Cached, d.LastRun.Stages["classify"].SavedUSD = tc.cached, tc.saved
			d.LastRun.Stages["classify"].Paid = 110
			var text, html bytes.Buffer
			if err := Text(&text, d); err != nil {
				t.Fatal(err)
			}
			if err := HTML(&html, d); err != nil {
				t.Fatal(err)
			}
			if tc.wantText == "" {
				if strings.Contains(text.String(), "cached") || strings.Contains(html.String(), "cached answers") {
					t.Errorf("a run without cache hits mentions them:\n%s", text.String())
				}
				return
			}
			if !strings.Contains(text.String(), tc.wantText) {
				t.Errorf("text lacks %q:\n%s", tc.wantText, text.String())
			}
			if !strings.Contains(html.String(), tc.wantHT) || !strings.Contains(html.String(), "$0.1234 saved") {
				t.Errorf("HTML lacks the cached answers card")
			}
		})
	}
}
