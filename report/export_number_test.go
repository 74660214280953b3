package report

import (
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// TestCanonicalNumber: a number canonicalNumber passes is exactly what
// numberText gives (so the export may copy it), on named cases and on
// random literals of every shape JSON allows; the named cases that are
// not canonical must not pass.
func TestCanonicalNumber(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want bool
	}{
		{"0", true}, {"7", true}, {"-3", true}, {"145", true}, {"123456789012345678", true},
		{"0.65", true}, {"-0.5", true}, {"0.05", true}, {"12.25", true}, {"0.000001", true}, {"123456.123456", true},
		{"-0", false}, {"1234567890123456789", false}, {"0.8300000000000001", false}, {"0.50", false}, {"1.0", false},
		{"1e3", false}, {"1E-2", false}, {"0.1234567890123", false}, {"1234567.1234567", false},
		{"01", false}, {"-", false}, {"", false}, {"1.", false}, {".5", false}, {"1.5.2", false}, {"--1", false},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			if got := canonicalNumber([]byte(tc.raw)); got != tc.want {
				t.Errorf("canonicalNumber(%q) = %v, want %v", tc.raw, got, tc.want)
			}
			if tc.want && numberText(json.Number(tc.raw)) != tc.raw {
				t.Errorf("numberText(%q) = %q: a case marked canonical is not", tc.raw, numberText(json.Number(tc.raw)))
			}
		})
	}
	r := rand.New(rand.NewPCG(31, 1))
	digits := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteByte(byte('0' + r.IntN(10)))
		}
		return b.String()
	}
	passed := 0
	for range 250_000 {
		var s string
		switch r.IntN(5) {
		case 0:
			s = strconv.FormatInt(r.Int64N(1<<62)>>r.IntN(62), 10)
		case 1:
			s = strconv.FormatFloat(r.Float64()*float64(int64(1)<<r.IntN(40)), 'f', -1, 64)
		case 2:
			s = strconv.FormatInt(int64(r.IntN(1000)), 10) + "." + digits(1+r.IntN(14))
		case 4:
			// Near float64's smallest: it keeps fewer digits there, and
			// below it a number reads as 0.
			s = "0." + strings.Repeat("0", 290+r.IntN(40)) + digits(1+r.IntN(14))
		default:
			s = "0." + strings.Repeat("0", r.IntN(8)) + digits(1+r.IntN(14))
		}
		if r.IntN(2) == 0 {
			s = "-" + s
		}
		if canonicalNumber([]byte(s)) {
			passed++
			if got := numberText(json.Number(s)); got != s {
				t.Fatalf("canonicalNumber(%q) is true, but numberText gives %q", s, got)
			}
		}
	}
	if passed < 50_000 {
		t.Errorf("only %d of 250,000 random literals were canonical: the sweep tests little", passed)
	}
}

// TestCanonicalNumber_tiny: a decimal too small for float64 to keep its
// digits, or to keep at all, is not canonical (numberText gives other
// digits, or 0); one just within the range of normal floats is.
func TestCanonicalNumber_tiny(t *testing.T) {
	for _, tc := range []struct {
		name  string
		zeros int
		digs  string
		want  bool
	}{
		{"1e-300", 299, "1", true},
		{"1.23456789012e-300", 299, "123456789012", true},
		{"1e-301, past the cap", 300, "1", false},
		{"1.23456789012e-313, subnormal", 312, "123456789012", false},
		{"1e-324, reads as 0", 323, "1", false},
		{"5e-401, reads as 0", 400, "5", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, sign := range []string{"", "-"} {
				raw := sign + "0." + strings.Repeat("0", tc.zeros) + tc.digs
				if got := canonicalNumber([]byte(raw)); got != tc.want {
					t.Errorf("canonicalNumber(%s%s) = %v, want %v (numberText gives %.30s)", sign, tc.name, got, tc.want, numberText(json.Number(raw)))
				}
				if tc.want && numberText(json.Number(raw)) != raw {
					t.Errorf("numberText(%s%s) is not itself: a case marked canonical is not", sign, tc.name)
				}
			}
		})
	}
}
