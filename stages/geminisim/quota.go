package geminisim

import (
	"fmt"
	"math"
	"time"
)

// unlimited stands for a quota that is not configured: no count or token
// sum ever reaches it, so the checks need no special case.
const unlimited = math.MaxInt

// limits are the effective quotas at one instant.
type limits struct{ rpm, tpm, rpd int }

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

// admitted is one admitted request in a window log.
type admitted struct {
	at     time.Time
	tokens int
}

// quota is the exact sliding-window log of one model's admitted requests:
// an entry admitted at t counts against the window while t+window is after
// now, so at t+window exactly it no longer counts. Not safe for concurrent
// use; the Server guards it.
type quota struct {
	window, day time.Duration
	trackWin    bool // RPM or TPM configured
	trackDay    bool // RPD configured

	win       []admitted  // within the last window, oldest first
	winTokens int         // sum of win[i].tokens
	days      []time.Time // within the last day, oldest first
}

// prune drops the entries that no longer count at now.
func (q *quota) prune(now time.Time) {
	i := 0
	for i < len(q.win) && !q.win[i].at.Add(q.window).After(now) {
		q.winTokens -= q.win[i].tokens
		i++
	}
	q.win = q.win[i:]
	j := 0
	for j < len(q.days) && !q.days[j].Add(q.day).After(now) {
		j++
	}
	q.days = q.days[j:]
}

// violations lists the quotas a request of n input tokens would exceed now.
// Call prune(now) first.
func (q *quota) violations(n int, lim limits) []violation {
	var vs []violation
	if len(q.win) >= lim.rpm {
		vs = append(vs, violation{kindRPM, lim.rpm})
	}
	if q.winTokens+n > lim.tpm {
		vs = append(vs, violation{kindTPM, lim.tpm})
	}
	if len(q.days) >= lim.rpd {
		vs = append(vs, violation{kindRPD, lim.rpd})
	}
	return vs
}

// admit records a request of n input tokens admitted at now.
func (q *quota) admit(now time.Time, n int) {
	if q.trackWin {
		q.win = append(q.win, admitted{now, n})
		q.winTokens += n
	}
	if q.trackDay {
		q.days = append(q.days, now)
	}
}

// wait is how long after t a request of n tokens must wait until the log,
// with no further admissions and limits fixed at lim, lets it in. ok is false
// when lim can never admit it (a zero limit, or n above the TPM). t must not
// be before the last prune.
func (q *quota) wait(t time.Time, n int, lim limits) (d time.Duration, ok bool) {
	i := 0
	for i < len(q.win) && !q.win[i].at.Add(q.window).After(t) {
		i++
	}
	active := q.win[i:]
	if c := len(active); c >= lim.rpm {
		if lim.rpm <= 0 {
			return 0, false
		}
		d = max(d, active[c-lim.rpm].at.Add(q.window).Sub(t))
	}
	sum := 0
	for _, e := range active {
		sum += e.tokens
	}
	if excess := sum + n - lim.tpm; excess > 0 {
		if n > lim.tpm {
			return 0, false
		}
		acc := 0
		for _, e := range active {
			acc += e.tokens
			if acc >= excess {
				d = max(d, e.at.Add(q.window).Sub(t))
				break
			}
		}
	}
	j := 0
	for j < len(q.days) && !q.days[j].Add(q.day).After(t) {
		j++
	}
	if c := len(q.days) - j; c >= lim.rpd {
		if lim.rpd <= 0 {
			return 0, false
		}
		d = max(d, q.days[j+c-lim.rpd].Add(q.day).Sub(t))
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
