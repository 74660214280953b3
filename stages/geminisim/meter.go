package geminisim

import (
	"math"
	"time"
)

// QuotaModel names how the per-window quotas (RPM and TPM) are counted.
// Real quota systems use all three; a client that reads only one of them
// leaves capacity unused or is refused on the others.
type QuotaModel string

const (
	// SlidingLog (the default) admits a request when, over the last
	// Window, fewer than RPM requests and at most TPM tokens (this
	// request's included) were counted. retryDelay is exact: when the
	// oldest entries that block the request leave the window.
	SlidingLog QuotaModel = "sliding"
	// FixedWindow counts per window [start+k×Window, start+(k+1)×Window)
	// and resets both counters at each boundary, so a full window refuses
	// everything until the boundary and then admits a burst. retryDelay
	// is the time to the boundary.
	FixedWindow QuotaModel = "fixed"
	// TokenBucket refills RPM requests and TPM tokens per Window
	// continuously, up to a burst (Config.BurstRequests, BurstTokens). A
	// request takes one request token and its input tokens. retryDelay
	// is the refill time of what is missing.
	TokenBucket QuotaModel = "bucket"
)

// QuotaModels lists the quota models, for flag help and validation.
var QuotaModels = []QuotaModel{SlidingLog, FixedWindow, TokenBucket}

// windowMeter counts the per-window quotas (RPM, TPM) of one model under
// one QuotaModel. Times passed to it never go backwards. Not safe for
// concurrent use.
type windowMeter interface {
	// violations lists the per-window quotas a request of n tokens would
	// exceed at now under lim.
	violations(now time.Time, n int, lim limits) []violation
	// count charges a request of n tokens at now (admitted, or refused
	// when refusals count).
	count(now time.Time, n int, lim limits)
	// wait is how long after t a request of n tokens must wait until the
	// meter, charged with nothing more and limits fixed at lim, admits it;
	// ok is false when lim never admits it.
	wait(t time.Time, n int, lim limits) (d time.Duration, ok bool)
}

// admitted is one counted request in a sliding log.
type admitted struct {
	at     time.Time
	tokens int
}

// slidingLog is the exact sliding-window log: an entry counted at t counts
// while t+window is after now, so at t+window exactly it no longer counts.
type slidingLog struct {
	window    time.Duration
	win       []admitted // within the last window, oldest first
	winTokens int        // sum of win[i].tokens
}

func (q *slidingLog) prune(now time.Time) {
	i := 0
	for i < len(q.win) && !q.win[i].at.Add(q.window).After(now) {
		q.winTokens -= q.win[i].tokens
		i++
	}
	q.win = q.win[i:]
}

func (q *slidingLog) violations(now time.Time, n int, lim limits) []violation {
	q.prune(now)
	var vs []violation
	if len(q.win) >= lim.rpm {
		vs = append(vs, violation{kindRPM, lim.rpm})
	}
	if q.winTokens+n > lim.tpm {
		vs = append(vs, violation{kindTPM, lim.tpm})
	}
	return vs
}

func (q *slidingLog) count(now time.Time, n int, lim limits) {
	if lim.rpm == unlimited && lim.tpm == unlimited {
		return
	}
	q.prune(now)
	q.win = append(q.win, admitted{now, n})
	q.winTokens += n
}

func (q *slidingLog) wait(t time.Time, n int, lim limits) (d time.Duration, ok bool) {
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
	return d, true
}

// fixedWindow counts requests and tokens per window aligned on start.
type fixedWindow struct {
	start         time.Time
	window        time.Duration
	index         int64 // the window the counters are for
	calls, tokens int
}

func (f *fixedWindow) indexAt(t time.Time) int64 {
	e := t.Sub(f.start)
	if e < 0 {
		return -1
	}
	return int64(e / f.window)
}

// at is the counters as they stand at t (zero in a later window).
func (f *fixedWindow) at(t time.Time) (calls, tokens int) {
	if f.indexAt(t) != f.index {
		return 0, 0
	}
	return f.calls, f.tokens
}

func (f *fixedWindow) violations(now time.Time, n int, lim limits) []violation {
	calls, tokens := f.at(now)
	var vs []violation
	if calls >= lim.rpm {
		vs = append(vs, violation{kindRPM, lim.rpm})
	}
	if tokens+n > lim.tpm {
		vs = append(vs, violation{kindTPM, lim.tpm})
	}
	return vs
}

func (f *fixedWindow) count(now time.Time, n int, _ limits) {
	if k := f.indexAt(now); k != f.index {
		f.index, f.calls, f.tokens = k, 0, 0
	}
	f.calls++
	f.tokens += n
}

func (f *fixedWindow) wait(t time.Time, n int, lim limits) (time.Duration, bool) {
	if lim.rpm <= 0 || n > lim.tpm {
		return 0, false
	}
	calls, tokens := f.at(t)
	if calls < lim.rpm && tokens+n <= lim.tpm {
		return 0, true
	}
	next := f.start.Add(time.Duration(f.indexAt(t)+1) * f.window)
	return next.Sub(t), true
}

// levelSlack absorbs the rounding of float refills, so that a request
// retried exactly after its retryDelay is admitted.
const levelSlack = 1e-9

// tokenBucket holds a request bucket and a token bucket, each refilled at
// its per-window limit per window up to its burst. A bucket may go below
// zero when refused calls are counted: the debt is refilled first.
type tokenBucket struct {
	window             time.Duration
	burstReq, burstTok int // configured bursts; 0: one window's limit
	last               time.Time
	req, tok           float64 // levels at last
	started            bool
}

// capacities are the bursts under lim (scaled with the schedule).
func (b *tokenBucket) capacities(lim limits) (req, tok float64) {
	req, tok = float64(lim.rpm), float64(lim.tpm)
	if b.burstReq > 0 {
		req = float64(scale(b.burstReq, lim.pct))
	}
	if b.burstTok > 0 {
		tok = float64(scale(b.burstTok, lim.pct))
	}
	return req, tok
}

// levels are the bucket levels at t under lim, refilled since last.
func (b *tokenBucket) levels(t time.Time, lim limits) (req, tok float64) {
	capReq, capTok := b.capacities(lim)
	if !b.started {
		return capReq, capTok
	}
	dt := t.Sub(b.last).Seconds() / b.window.Seconds()
	refill := func(level, perWindow, capacity float64) float64 {
		if perWindow >= unlimited {
			return capacity
		}
		return math.Min(capacity, level+perWindow*dt)
	}
	return refill(b.req, float64(lim.rpm), capReq), refill(b.tok, float64(lim.tpm), capTok)
}

func (b *tokenBucket) violations(now time.Time, n int, lim limits) []violation {
	req, tok := b.levels(now, lim)
	var vs []violation
	if lim.rpm != unlimited && req < 1-levelSlack {
		vs = append(vs, violation{kindRPM, lim.rpm})
	}
	if lim.tpm != unlimited && tok < float64(n)-levelSlack {
		vs = append(vs, violation{kindTPM, lim.tpm})
	}
	return vs
}

func (b *tokenBucket) count(now time.Time, n int, lim limits) {
	b.req, b.tok = b.levels(now, lim)
	b.last, b.started = now, true
	b.req--
	b.tok -= float64(n)
}

func (b *tokenBucket) wait(t time.Time, n int, lim limits) (d time.Duration, ok bool) {
	req, tok := b.levels(t, lim)
	capReq, capTok := b.capacities(lim)
	need := func(level, want, perWindow, capacity float64) (time.Duration, bool) {
		if perWindow >= unlimited || level >= want {
			return 0, true
		}
		if perWindow <= 0 || capacity < want {
			return 0, false
		}
		return time.Duration(math.Ceil((want - level) / perWindow * float64(b.window))), true
	}
	dr, okr := need(req, 1, float64(lim.rpm), capReq)
	dtk, okt := need(tok, float64(n), float64(lim.tpm), capTok)
	return max(dr, dtk), okr && okt
}
