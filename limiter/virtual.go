package limiter

import "time"

// Virtual is the law with no lock, no queue and no clock: each method
// takes the instant it happens at, so a simulation drives it through
// virtual time (internal/quotasim, `sawtooth bench --matrix --random`).
// It decides exactly as an AIMD with the same Config would, for one
// waiter at the head of the line; RPM and TPM pacing (Config.RPM,
// PaceTPM) are not applied. Not safe for concurrent use.
type Virtual struct {
	w law
}

// NewVirtual returns the law an AIMD configured by cfg runs.
func NewVirtual(cfg Config) *Virtual {
	slowStart := cfg.slowStarts()
	cfg = cfg.withDefaults()
	return &Virtual{w: newLaw(cfg, slowStart)}
}

// Ready reports whether a call of size may start at t with inFlight calls
// in flight; when not, wake is when it may (zero: when an outcome comes).
func (v *Virtual) Ready(t time.Time, inFlight int, size int64) (ok bool, wake time.Time) {
	v.w.nextSize = size
	if v.w.mayStart(t, inFlight) {
		return true, time.Time{}
	}
	if hold := v.w.hold(t); inFlight < v.w.limit && !v.w.awaitingProbe() && hold.After(t) {
		return false, hold
	}
	return false, time.Time{}
}

// Start records a call of size starting at t and returns its start stamp,
// to pass back with its outcome.
func (v *Virtual) Start(t time.Time, inFlight int, size int64) time.Time {
	return v.w.startSized(t, inFlight, size)
}

// Succeeded reports an answer at t billing tokens.
func (v *Virtual) Succeeded(t, started time.Time, tokens int64, inFlight int) {
	v.w.onSuccess(t, started, tokens, inFlight)
}

// RateLimited reports a 429 at t with its retry delay and the per-minute
// budgets it named (0 for none).
func (v *Virtual) RateLimited(t, started time.Time, retryAfter time.Duration, rpm, tpm int64, inFlight int) {
	if rpm > 0 || tpm > 0 {
		v.w.nameQuotaAt(started, rpm, tpm)
	}
	v.w.onRateLimited(t, started, retryAfter, inFlight)
}

// MostInFlight is the most calls the law lets be in flight (Ceiling).
func (v *Virtual) MostInFlight() int { return v.w.cfg.Ceiling }
