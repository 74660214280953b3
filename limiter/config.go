package limiter

import "time"

// Defaults for the zero fields of Config.
const (
	DefaultStart           = 8               // calls in flight before any feedback
	DefaultFloor           = 1               // lowest limit, calls in flight
	DefaultCeiling         = 5000            // highest limit, calls in flight (see Config.Ceiling)
	DefaultIncrease        = 1               // calls added per success in slow start
	DefaultDecreaseFactor  = 0.5             // the most one congestion event takes off
	DefaultCooldown        = 4 * time.Second // no cap growth this long after an event
	DefaultEstimatedTokens = 500             // tokens per call before any is measured
)

// How the law paces a rate once it has measured round trips (see AIMD).
// Round trips are the smoothed latency of successes. The values are tuned
// on the quota simulation (quota_sim_test.go), across every quota shape
// at once.
const (
	// rateHeadroom: while pacing a rate r, the limit on calls in flight is
	// r × latency × rateHeadroom (Little's law with room for latency's
	// spread); the rate, not the limit, holds a quota.
	rateHeadroom = 1.5
	// eventBackoff multiplies the rate at a congestion event when no safe
	// rate is known; each further 429 of a call already started then
	// takes one call per round trip off it.
	eventBackoff = 0.97
	// probeStairRoundTrips: a rate held this many round trips with no 429
	// is safe (see answerLag).
	probeStairRoundTrips = 8
	// probeStair: with no refused rate known, the rate climbs in stairs
	// from the safe one, the first probeStair times it, each next stair's
	// rise twice the last.
	probeStair = 1.05
	// topShare: slow start's stairs climb toward this share of the rate
	// its last round trip before its first 429 was admitted at: the
	// rate of the round trip before (the ramp doubles each).
	topShare = 0.5
	// peakStairs: below the rate the quota admitted before it fell, the
	// stairs start this many doublings higher (20%, not 5%).
	peakStairs = 2
	// firstClimbRoundTrips: until a 429 comes at a paced rate (only
	// slow start's burst was refused), a stair is held this many round
	// trips.
	firstClimbRoundTrips = 2
	// fellShare: a 429 after the quota admitted less than this share of
	// the safe rate over its window means the quota fell. (What it
	// admitted reads low when calls idled for a gate in that span.)
	fellShare = 0.85
	// reopenLags bounds the span between two reopenings of a spent
	// quota that the law reads a rate from (see law.reopened), in
	// answer lags.
	reopenLags = 4
	// latticeShare: instants the quota opens at lie on one lattice when
	// each span is within this share of a whole number of the shortest
	// (see law.resetAt).
	latticeShare = 0.01
	// latticeDelays: a lattice spaced more than this many times the
	// longest retry delay seen is read as chance (see law.resetAt).
	latticeDelays = 4
	// slowStartBrake: slow start doubles the limit each round trip up
	// to this many calls in flight, holds it brakeRoundTrips round trips
	// and brakeHold (the longest of the time-scaled windows quotas are
	// tested on) of calls that fill it, then doubles on (see
	// law.slowGrow).
	slowStartBrake  = 64
	brakeRoundTrips = 2
	brakeHold       = 4 * time.Second
	brakeGrowEvery  = 1
	// bisectShare: the bisection between the safe rate and the refused one
	// stops when they are within this share, and the rate stays at the
	// safe one for reprobeLags answer lags before it looks for more.
	bisectShare = 0.03
	reprobeLags = 1
	// maxCalm bounds the doubling of the wait between stairs that find
	// nothing (see law.calm): 2^4 answer lags.
	maxCalm = 4
	// cycleMinSuccesses: the admitted rate since the last congestion event
	// is read only over at least this many successes.
	cycleMinSuccesses = 10
	// capGrowRoundTrips: from the level of the last congestion event it
	// answered up, the cap on calls in flight grows by one per this many
	// round trips while it holds calls back.
	capGrowRoundTrips = 4
	// lookShare is the share of calls that looks above the estimate (a
	// cap on calls in progress found again, see law.mayLook) may spend in
	// 429s: half the 1% a run may refuse, the rest left to the quota's
	// edges and drifts.
	lookShare = 0.005
	// capShare: a refused call that started beside more than capShare
	// times the calls in flight the rate carries on average met a cap on
	// calls in progress, not a rate. (A heavy latency tail puts the calls
	// in flight well above the average now and then.)
	capShare = 1.5
	// capEqualShare: the last events refused at the same level of calls
	// in flight read as a cap only above this share of what the rate
	// carries: a paced rate holds the calls in flight steady, so a rate's
	// refusals too come at one level now and then.
	capEqualShare = 1.1
	// namedShare: with a budget a 429 named (see AIMD.RateLimitedQuota),
	// the rate is paced at this share of it, room for a window's edges
	// and for input tokens that vary from call to call.
	namedShare = 0.97
	// namedContradicted: a 429's per-minute budget is not believed when
	// the quota admitted more than this many times it in the minute
	// before (see law.contradicted).
	namedContradicted = 2.0
	// tokensSlack: a token budget is contradicted by this much more,
	// since the tokens admitted are estimates.
	tokensSlack = 1.1
	// namedHoldLags: the rate held at a named budget this many answer
	// lags (twice as many after each look that found nothing, see
	// maxCalm) with no 429 stops capping the stairs.
	namedHoldLags = 32
	// namedMovedHoldLags replaces namedHoldLags once 429s have named
	// different budgets: a live quota's named level is soon stale.
	namedMovedHoldLags = 2
	// cooldownRoundTrips caps Config.Cooldown once latency is measured.
	cooldownRoundTrips = 4
	// paceBurst is the pacing tolerance, in starts: how far ahead of the
	// paced schedule a start may run.
	paceBurst = 2
	// backoffGrowth multiplies the wait after uncertain 429s per one more
	// since the last success: a quota spent until a window's end is found
	// open again within half a wait of it.
	backoffGrowth = 1.5
	// backoffMaxRoundTrips caps the wait after uncertain 429s.
	backoffMaxRoundTrips = 64
	// sentRing bounds the starts kept to measure the sent rate and the
	// admitted one: several times DefaultCeiling, so that a window's
	// starts and every call still in flight are there to be read.
	sentRing = 16384
	// capLookback: the round trips before a refusal over which a call
	// admitted beside as many calls rules out a cap (see
	// law.admittedBeside).
	capLookback = 4
	// sentSpanCalls: the sent rate is read over the time the paced
	// rate takes to send this many calls at least (see law.sentSpan).
	sentSpanCalls = 4
	// lowestRate is the slowest the law paces, in calls per second (see
	// law.rateFloor): a call a minute.
	lowestRate = 1.0 / 60
	// maxWindow bounds the quota window a retry delay is read as: a
	// per-minute quota's, with room.
	maxWindow = 2 * time.Minute
)

// ewmaWeight is the weight of each new sample in the smoothed latency:
// 1/8, the weight TCP gives each RTT sample (RFC 6298).
const ewmaWeight = 1.0 / 8

// slowLatencyWeight is the weight of each success's latency in the slow
// average the limit on calls in flight is fitted with (see
// law.limitLatency): 1/64, a few hundred calls' memory.
const slowLatencyWeight = 1.0 / 64

// tokenWeight is the weight of a success's input tokens in their average
// once more than 1/tokenWeight have come (before, the plain mean): slow,
// as tokens vary call to call (see observe).
const tokenWeight = 1.0 / 64

// Config configures an AIMD limiter. Every field is optional: a zero field
// takes the matching Default constant, so Config{} is a sound limiter.
type Config struct {
	// Start is the limit, in calls in flight, before any feedback arrives.
	// Zero means DefaultStart with slow start: the limit doubles each round
	// trip until the first 429, up to 64, held there two round trips and
	// 4 s, then on up to Ceiling (see AIMD). A positive Start (a
	// limit learned by an earlier run) is paced from the first round trip
	// as the rate it carries. It is clamped to [Floor, Ceiling].
	Start int
	// StartRate, with a positive Start, is the rate an earlier run found
	// the quota admits (see AIMD.Rate), in call starts per second: 97% of
	// it is paced from the first start, instead of the rate Start carries
	// paced from the first round trip. Zero means none; it is ignored
	// without a Start.
	StartRate float64
	// SlowStart, with a positive Start and no StartRate, climbs from Start
	// as slow start does (see Start) instead of pacing the rate Start
	// carries: for a limit an earlier run reached with the quota never
	// bounding it (AIMD.Rate was 0), which says how many calls that run
	// needed in flight, not how many the quota admits.
	SlowStart bool
	// Floor is the lowest the limit goes, in calls in flight. Values below 1
	// mean DefaultFloor (1): a limit of zero would stall the work for good.
	Floor int
	// Ceiling is the highest the limit goes, in calls in flight. Zero means
	// DefaultCeiling; a Ceiling below Floor is raised to Floor. The limit
	// carries the paced rate at the measured round trip (Little's law),
	// so the ceiling binds only when that needs more calls in flight: a
	// thinking model answering in 10 s on a quota of 2,000 a minute
	// needs about 330, a quota of 600 a second with calls of 2-3 s
	// 1,500. The default is there for a server that never refuses.
	Ceiling int
	// Increase is added to the limit per success in slow start (see AIMD).
	// Values below 1 mean DefaultIncrease.
	Increase int
	// DecreaseFactor bounds one congestion event's decrease: the paced
	// rate never falls below DecreaseFactor of where the event put it, and
	// before any round trip is measured the limit is multiplied by it.
	// Values outside the open interval (0, 1) mean DefaultDecreaseFactor.
	DecreaseFactor float64
	// Cooldown is how long after a congestion event the cap on calls in
	// flight does not grow (see AIMD). Once round trips are measured it
	// lasts at most four of them, counted from when the retry-after gate
	// opens. Zero means DefaultCooldown; a negative value means none.
	Cooldown time.Duration
	// Fixed turns adaptation off: the limit stays at Start (or wherever
	// SetLimit puts it), no rate is paced, 429s do not decrease it,
	// successes do not grow it, and the TPM-derived ceiling is not
	// applied. The retry-after gate and RPM/TPM pacing still hold.
	Fixed bool
	// TPM is the input-token budget per minute (what Gemini's per-minute
	// token quota counts; Succeeded reports input tokens). Zero means none.
	// When positive, the limit never exceeds the ceiling Little's law
	// derives from it, nor the paced rate TPM over the tokens per call
	// (see AIMD).
	TPM int64
	// PaceTPM, with TPM > 0, also paces call starts with a token bucket
	// filling at TPM/60 tokens per second, its burst one second's worth
	// (or one call's reservation, if larger). Each call reserves its own
	// estimated tokens when it was acquired with its size (see
	// AIMD.AcquireWeighted), else the measured average tokens per call
	// (EstimatedTokens until one is measured): the billed count is only
	// known afterwards.
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

// slowStarts reports whether a limiter configured by c (before defaults)
// starts in slow start: no Start given, or one given to climb from.
func (c Config) slowStarts() bool {
	return c.Start == 0 || c.SlowStart && c.StartRate <= 0
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
