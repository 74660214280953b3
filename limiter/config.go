package limiter

import "time"

// Defaults for the zero fields of Config.
const (
	DefaultStart           = 8               // calls in flight before any feedback
	DefaultFloor           = 1               // lowest limit, calls in flight
	DefaultCeiling         = 64              // highest limit, calls in flight
	DefaultIncrease        = 1               // calls added per streak of successes
	DefaultDecreaseFactor  = 0.5             // limit multiplier on a congestion event
	DefaultCooldown        = 4 * time.Second // no growth this long after a decrease
	DefaultEstimatedTokens = 500             // tokens per call before any is measured
)

// How the limiter reads the quota once it has measured round trips (see
// AIMD). They are tuned on a sliding-window quota whose window spans about
// eight round trips, the shape of a per-minute quota with second-long
// calls; limiter's quota simulation test exercises them end to end.
const (
	// slowStartShare: with no Start given, the limit doubles each round
	// trip up to Ceiling/slowStartShare. A quota counted over a window
	// shows nothing until the window is full, so slow start cannot find
	// the quota, only overshoot it; it stops well short of the ceiling.
	slowStartShare = 3
	// lagRoundTrips is how far back an edge 429 looks for the limit to
	// return to: a window-counted quota reports an overshoot only once
	// the window is full, several round trips after it began.
	lagRoundTrips = 5
	// edgeBackoff is the least an edge 429 takes off the limit.
	edgeBackoff = 0.97
	// cooldownRoundTrips caps Config.Cooldown once latency is measured.
	cooldownRoundTrips = 5
	// probeStreaks and probeSteps: from the level of the last edge 429
	// up, the limit grows by one per probeStreaks streaks instead of one,
	// for probeSteps steps; then, no 429 having come, the quota has grown
	// and the limit grows per streak again.
	probeStreaks = 3
	probeSteps   = 3
	// historyLen bounds the limit history kept for edge 429s.
	historyLen = 64
)

// ewmaWeight is the weight of each new sample in the smoothed token and
// latency averages: 1/8, the weight TCP gives each RTT sample (RFC 6298).
// Heavy enough to follow a change of prompt size within a few dozen calls,
// light enough that one huge answer does not swing the derived ceiling.
const ewmaWeight = 1.0 / 8

// Config configures an AIMD limiter. Every field is optional: a zero field
// takes the matching Default constant, so Config{} is a sound limiter.
type Config struct {
	// Start is the limit, in calls in flight, before any feedback arrives.
	// Zero means DefaultStart with slow start: the limit doubles each round
	// trip up to Ceiling/3 or the first 429 (see AIMD). It is clamped to
	// [Floor, Ceiling].
	Start int
	// Floor is the lowest the limit goes, in calls in flight. Values below 1
	// mean DefaultFloor (1): a limit of zero would stall the work for good.
	Floor int
	// Ceiling is the highest the limit goes, in calls in flight. Zero means
	// DefaultCeiling; a Ceiling below Floor is raised to Floor.
	Ceiling int
	// Increase is added to the limit after each streak of successes (see
	// AIMD). Values below 1 mean DefaultIncrease.
	Increase int
	// DecreaseFactor multiplies the limit on a congestion event: the new
	// limit is max(Floor, floor(limit*DecreaseFactor)). Values outside the
	// open interval (0, 1) mean DefaultDecreaseFactor.
	DecreaseFactor float64
	// Cooldown is how long after a decrease the limit does not grow:
	// successes completing within it do not count toward a streak. Once
	// round trips are measured it lasts at most five of them, counted from
	// when the retry-after gate opens. Zero means DefaultCooldown; a
	// negative value means no cooldown.
	Cooldown time.Duration
	// Fixed turns adaptation off: the limit stays at Start (or wherever
	// SetLimit puts it), 429s do not decrease it, successes do not grow it,
	// and the TPM-derived ceiling is not applied. The retry-after gate and
	// RPM/TPM pacing still hold.
	Fixed bool
	// TPM is the token budget per minute (input plus output tokens, as
	// billed). Zero means none. When positive, the limit never exceeds the
	// ceiling Little's law derives from it (see AIMD).
	TPM int64
	// PaceTPM, with TPM > 0, also paces call starts with a token bucket
	// filling at TPM/60 tokens per second, its burst one second's worth
	// (or one call's reservation, if larger). Each call reserves the
	// measured average tokens per call (EstimatedTokens until one is
	// measured): the billed count is only known afterwards.
	PaceTPM bool
	// RPM paces call starts to at most RPM per minute (a token bucket with a
	// burst of one second's worth). Zero means no request pacing.
	RPM int
	// EstimatedTokens is the assumed tokens per call before any success has
	// been measured, used only for TPM pacing. Values below 1 mean
	// DefaultEstimatedTokens.
	EstimatedTokens int64
	// Now is the limiter's clock. Nil means time.Now.
	Now func() time.Time
}

// withDefaults returns c with zero and out-of-range fields replaced.
func (c Config) withDefaults() Config {
	if c.Floor < 1 {
		c.Floor = DefaultFloor
	}
	if c.Ceiling == 0 {
		c.Ceiling = DefaultCeiling
	}
	c.Ceiling = max(c.Ceiling, c.Floor)
	if c.Start == 0 {
		c.Start = DefaultStart
	}
	c.Start = min(max(c.Start, c.Floor), c.Ceiling)
	if c.Increase < 1 {
		c.Increase = DefaultIncrease
	}
	if !(c.DecreaseFactor > 0 && c.DecreaseFactor < 1) {
		c.DecreaseFactor = DefaultDecreaseFactor
	}
	switch {
	case c.Cooldown == 0:
		c.Cooldown = DefaultCooldown
	case c.Cooldown < 0:
		c.Cooldown = 0
	}
	if c.EstimatedTokens < 1 {
		c.EstimatedTokens = DefaultEstimatedTokens
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}
