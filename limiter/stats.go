package limiter

import "time"

// Stats is a point-in-time view of an AIMD limiter, for observability.
type Stats struct {
	Limit    int // current limit, calls in flight
	InFlight int // slots held
	Waiting  int // Acquire calls queued for a slot
	// Ceiling is the effective ceiling: Config.Ceiling, or the TPM-derived
	// one when lower.
	Ceiling            int
	MinLimit, MaxLimit int   // lowest and highest limit held so far
	Increases          int64 // additive increases applied
	// Decreases counts congestion events, each answered by one
	// multiplicative decrease (which leaves a limit at Floor unchanged).
	Decreases  int64
	GateUntil  time.Time     // see GateUntil
	AvgTokens  float64       // smoothed billed tokens per success; 0 before the first
	AvgLatency time.Duration // smoothed latency of successes; 0 before the first
}

// Snapshot returns the limiter's current Stats.
func (l *AIMD) Snapshot() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := &l.law
	s := Stats{
		Limit:      w.limit,
		InFlight:   l.inFlight,
		Waiting:    l.queue.Len(),
		Ceiling:    w.cfg.Ceiling,
		MinLimit:   w.minLimit,
		MaxLimit:   w.maxLimit,
		Increases:  w.increases,
		Decreases:  w.decreases,
		GateUntil:  w.gate,
		AvgTokens:  w.avgTokens,
		AvgLatency: time.Duration(w.avgLatency),
	}
	if !w.cfg.Fixed {
		s.Ceiling = w.ceiling()
	}
	return s
}
