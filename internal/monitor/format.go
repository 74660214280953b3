package monitor

import (
	"fmt"
	"strings"
	"time"
)

// Formatting helpers for the live figures.

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)).Round(time.Second) }

func round1(x float64) float64 { return float64(int64(x*10+0.5)) / 10 }
func round4(x float64) float64 { return float64(int64(x*1e4+0.5)) / 1e4 }

// etaString formats an ETA in seconds as m:ss or h:mm:ss; "?" when unknown.
func etaString(s float64) string {
	if s < 0 {
		return "?"
	}
	return clockString(s)
}

func clockString(s float64) string {
	t := int64(s + 0.5)
	if t >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", t/3600, t/60%60, t%60)
	}
	return fmt.Sprintf("%d:%02d", t/60, t%60)
}

// fmtCount formats n with thousands separators.
func fmtCount(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + fmtCount(-n)
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// fmtCompact formats a token count: 52310 -> "52.3k".
func fmtCompact(n int64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	default:
		return fmt.Sprint(n)
	}
}
