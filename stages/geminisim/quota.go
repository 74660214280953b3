package geminisim

import (
	"fmt"
	"math"
	"time"
)

// unlimited stands for a quota that is not configured: no count or token
// sum ever reaches it, so the checks need no special case.
const unlimited = math.MaxInt

// limits are the effective quotas at one instant; pct is the schedule's
// percent they were scaled by.
type limits struct{ rpm, tpm, rpd, pct int }

// quotaKind names one of the three quotas.
type quotaKind int

const (
	kindRPM quotaKind = iota
	kindTPM
	kindRPD
)

// violation is one exceeded quota and its effective limit.
type violation struct {
	kind  quotaKind
	limit int
}

// Quota is one model's quota exactly as a Server enforces it, without
// HTTP: the per-window meter of cfg.QuotaModel, the per-day sliding log
// and the schedule. The Server keeps one per model; a benchmark uses one
// to compute what a perfect client could get (ask Wait, then Count at
// that instant). Not safe for concurrent use.
type Quota struct {
	cfg      Config
	start    time.Time
	win      windowMeter
	trackWin bool // RPM or TPM configured
	days     []time.Time
}

// NewQuota returns an empty quota for cfg (its zero fields defaulted as
// New does) whose schedule and fixed windows count from start.
func NewQuota(cfg Config, start time.Time) *Quota {
	cfg = cfg.withDefaults()
	q := &Quota{cfg: cfg, start: start, trackWin: cfg.RPM > 0 || cfg.TPM > 0}
	switch cfg.QuotaModel {
	case FixedWindow:
		q.win = &fixedWindow{start: start, window: cfg.Window, index: -1}
	case TokenBucket:
		q.win = &tokenBucket{window: cfg.Window, burstReq: cfg.BurstRequests, burstTok: cfg.BurstTokens}
	default:
		q.win = &slidingLog{window: cfg.Window}
	}
	return q
}

// limitsAt are the effective quotas at t, the schedule applied.
func (q *Quota) limitsAt(t time.Time) limits {
	pct := percentAt(q.cfg.Schedule, t.Sub(q.start))
	return limits{
		rpm: scale(q.cfg.RPM, pct),
		tpm: scale(q.cfg.TPM, pct),
		rpd: scale(q.cfg.RPD, 100),
		pct: pct,
	}
}

func (q *Quota) pruneDays(now time.Time) {
	j := 0
	for j < len(q.days) && !q.days[j].Add(q.cfg.Day).After(now) {
		j++
	}
	q.days = q.days[j:]
}

// violations lists the quotas a request of n input tokens would exceed at
// now, per-window ones first.
func (q *Quota) violations(now time.Time, n int) []violation {
	lim := q.limitsAt(now)
	var vs []violation
	if q.trackWin {
		vs = q.win.violations(now, n, lim)
	}
	q.pruneDays(now)
	if len(q.days) >= lim.rpd {
		vs = append(vs, violation{kindRPD, lim.rpd})
	}
	return vs
}

// Admits reports whether a request of n input tokens would be admitted at
// now.
func (q *Quota) Admits(now time.Time, n int) bool { return len(q.violations(now, n)) == 0 }

// Count charges a request of n input tokens at now: an admitted one, or a
// refused one when refusals count (Config.CountRefused).
func (q *Quota) Count(now time.Time, n int) {
	if q.trackWin {
		q.win.count(now, n, q.limitsAt(now))
	}
	if q.cfg.RPD > 0 {
		q.pruneDays(now)
		q.days = append(q.days, now)
	}
}

// Wait is the exact time from now until a request of n input tokens would
// be admitted if nothing else were counted, following the schedule's
// changes. ok is false when no future instant admits it (a zero quota with
// no later step, or a prompt above the TPM).
func (q *Quota) Wait(now time.Time, n int) (d time.Duration, ok bool) {
	for t := now; ; {
		lim := q.limitsAt(t)
		d, ok := q.waitAt(t, n, lim)
		next, more := nextStepAfter(q.cfg.Schedule, t.Sub(q.start))
		nextAt := q.start.Add(next)
		if ok && (!more || t.Add(d).Before(nextAt)) {
			return t.Add(d).Sub(now), true
		}
		if !more {
			return 0, false
		}
		t = nextAt
	}
}

// waitAt is Wait with the limits fixed at lim.
func (q *Quota) waitAt(t time.Time, n int, lim limits) (d time.Duration, ok bool) {
	if q.trackWin {
		if d, ok = q.win.wait(t, n, lim); !ok {
			return 0, false
		}
	}
	j := 0
	for j < len(q.days) && !q.days[j].Add(q.cfg.Day).After(t) {
		j++
	}
	if c := len(q.days) - j; c >= lim.rpd {
		if lim.rpd <= 0 {
			return 0, false
		}
		d = max(d, q.days[j+c-lim.rpd].Add(q.cfg.Day).Sub(t))
	}
	return d, true
}

// scale is configured*pct/100 rounded down; an unset quota stays unlimited.
func scale(configured, pct int) int {
	if configured <= 0 {
		return unlimited
	}
	return int(int64(configured) * int64(pct) / 100)
}

// formatDuration formats d as a protobuf JSON duration, the way the API
// writes RetryInfo.retryDelay: decimal seconds with 0, 3, 6 or 9 fractional
// digits and an "s" suffix ("26s", "0.412345s", "45.837906927s").
func formatDuration(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	secs, nanos := int64(d/time.Second), int64(d%time.Second)
	switch {
	case nanos == 0:
		return fmt.Sprintf("%s%ds", sign, secs)
	case nanos%1e6 == 0:
		return fmt.Sprintf("%s%d.%03ds", sign, secs, nanos/1e6)
	case nanos%1e3 == 0:
		return fmt.Sprintf("%s%d.%06ds", sign, secs, nanos/1e3)
	}
	return fmt.Sprintf("%s%d.%09ds", sign, secs, nanos)
}
