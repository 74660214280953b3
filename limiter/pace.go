package limiter

import (
	"context"
	"math"
	"time"

	"golang.org/x/time/rate"
)

// newPacers returns the token buckets that pace call starts to a known
// RPM and TPM (Config.RPM, Config.TPM with PaceTPM), nil for each that is
// off. Each bursts one second's worth: latency varies, so a fixed
// concurrency is not a fixed rate, and pacing holds the rate itself.
func newPacers(cfg Config) (rpm, tpm *rate.Limiter) {
	if cfg.RPM > 0 {
		perSecond := float64(cfg.RPM) / 60
		rpm = rate.NewLimiter(rate.Limit(perSecond), max(1, int(perSecond)))
	}
	if cfg.TPM > 0 && cfg.PaceTPM {
		perSecond := float64(cfg.TPM) / 60
		burst := max(int64(perSecond), cfg.EstimatedTokens)
		tpm = rate.NewLimiter(rate.Limit(perSecond), int(min(burst, math.MaxInt32)))
	}
	return rpm, tpm
}

// pace holds a granted slot until RPM/TPM pacing and the gate allow the
// call of size (0 if unknown, see AcquireWeighted) to start. Without
// pacing the gate was checked when the slot was granted and the call
// starts at once.
func (l *AIMD) pace(ctx context.Context, started time.Time, size int64) (time.Time, error) {
	if l.rpm == nil && l.tpm == nil {
		return started, nil
	}
	now := l.cfg.Now()
	at := now // earliest start pacing allows
	var reserved []*rate.Reservation
	reserve := func(lim *rate.Limiter, n int) {
		if n > lim.Burst() {
			lim.SetBurstAt(now, n)
		}
		r := lim.ReserveN(now, n)
		reserved = append(reserved, r)
		if t := now.Add(r.DelayFrom(now)); t.After(at) {
			at = t
		}
	}
	if l.rpm != nil {
		reserve(l.rpm, 1)
	}
	if l.tpm != nil {
		l.mu.Lock()
		n := l.law.tokensPerCall()
		if est := l.law.estimatedTokens(size); est > 0 {
			n = int(min(math.Ceil(est), math.MaxInt32)) // its own tokens, not the mean
		}
		l.mu.Unlock()
		reserve(l.tpm, n)
	}
	for {
		l.mu.Lock()
		until := at
		if l.law.gate.After(until) {
			until = l.law.gate
		}
		if !now.Before(until) {
			started := l.law.stamp(now)
			l.mu.Unlock()
			return started, nil
		}
		l.mu.Unlock()
		timer, stop := l.newTimer(until.Sub(now))
		select {
		case <-timer:
			now = l.cfg.Now()
		case <-ctx.Done():
			stop()
			now = l.cfg.Now()
			for _, r := range reserved {
				r.CancelAt(now)
			}
			l.mu.Lock()
			l.releaseLocked()
			l.dispatchLocked(now)
			l.mu.Unlock()
			return time.Time{}, ctx.Err()
		}
	}
}
