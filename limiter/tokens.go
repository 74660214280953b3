package limiter

import (
	"math"
	"time"
)

// Pacing in tokens. A per-minute token budget (TPM) counts the input
// tokens of the calls a window holds, and prompts differ in length (a
// coefficient of variation of about 0.6 on reviews): paced at a rate of
// requests at the mean, a run of long prompts overruns the budget and a
// run of short ones leaves it unused. A caller that knows a call's size
// before it starts (AIMD.AcquireWeighted: the prompt's runes, say) lets
// the law pace call starts in tokens instead: the call first in line
// waits for room for its own estimated tokens in the paced schedule, and
// its start moves the schedule on by them, so the tokens a window holds
// stay even whatever the mix of prompts.
//
// The law never knows the server's tokenizer: it learns the tokens per
// unit of size from what the successes were billed (Succeeded's tokens
// over the sizes their starts carried), so any unit of size works.

// sizeReading is what the law has learned of calls' sizes against the
// tokens they were billed.
type sizeReading struct {
	// size and tokens are the mean size and billed input tokens of the
	// successes whose start carried a size (the plain mean, then a slow
	// average, see sizeWeight); n counts them.
	size, tokens float64
	n            int64
	// unit is the tokens of one call in the rate's count once starts
	// are paced in tokens (see law.callTokens); 0 before.
	unit float64
}

// sizeMinSuccesses: the tokens per unit of size are read only from at
// least this many successes.
const sizeMinSuccesses = 8

const (
	// sizeWeight is the least weight of a success in the means of
	// sizes and tokens: slow, so that the rate they scale holds still
	// (tokens vary far more call to call than over a run).
	sizeWeight = 1.0 / 1024
	// minWeight and maxWeight bound a call's weight in mean calls (see
	// law.weight), against a size far off what its tokens turn out to be.
	minWeight = 0.1
	maxWeight = 10
	// tpmNearShare: Config.TPM binds once the paced rate is this near
	// its rate (see law.tokensBind).
	tpmNearShare = 0.9
	// namedTokenShare: paced in tokens, the share of a named token budget
	// paced (namedShare when calls count one each). Tuned on the virtual
	// tpm-counted shape (TestLaw_matrixShapes): 0.97 gave 0.942 of the
	// perfect client's goodput, 0.985 gives 0.956 at 0.33% 429s; in real
	// time it reads a window's edges and calls reaching the server a few
	// milliseconds later or sooner than they started.
	namedTokenShare = 0.985
)

// learnSize folds in a success of a call that started with size, billed
// tokens input tokens.
func (w *law) learnSize(size, tokens int64) {
	if size <= 0 || tokens <= 0 {
		return
	}
	w.sizes.n++
	a := max(1/float64(w.sizes.n), sizeWeight)
	w.sizes.size += a * (float64(size) - w.sizes.size)
	w.sizes.tokens += a * (float64(tokens) - w.sizes.tokens)
}

// sized reports whether the law has learned enough of calls' sizes to
// pace them in tokens.
func (w *law) sized() bool { return w.sizes.n >= sizeMinSuccesses && w.sizes.size > 0 }

// callTokens is the mean input tokens per call that a rate in calls per
// second is counted in against a token budget: the slow mean of the
// sized successes once known (the faster average swings by a tenth on
// prompts that vary, and the rate with it), else the measured average.
//
// Once starts are paced in tokens, that mean is frozen as the unit the
// rate counts calls in: a call then counts its tokens over the unit (see
// law.weight), and a rate times the unit is a rate of tokens, exact
// whatever the mean does next.
func (w *law) callTokens() float64 {
	switch {
	case w.sizes.unit > 0:
		return w.sizes.unit
	case w.sized():
		return w.sizes.tokens
	}
	return w.avgTokens
}

// estimatedTokens is the input tokens a call of size is expected to be
// billed, 0 if the law cannot tell yet.
func (w *law) estimatedTokens(size int64) float64 {
	if size <= 0 || !w.sized() {
		return 0
	}
	return float64(size) * w.sizes.tokens / w.sizes.size
}

// tokensBind reports whether call starts are paced in tokens: sizes are
// learned and a token budget binds, one a 429 named (tighter than the
// requests it named, if any; the last named while the law looks above
// them) or Config.TPM once the rate is near it.
func (w *law) tokensBind() bool {
	if !w.sized() || w.sizes.tokens <= 0 {
		return false
	}
	byTokens := func(tpm int64) float64 { return float64(tpm) / 60 / w.callTokens() }
	// The budgets last named: while the law looks above a named budget
	// (see grow) it is not a cap, but still what the quota counts.
	rpm, tpm := w.namedRPM, w.namedTPM
	if rpm == 0 && tpm == 0 {
		rpm, tpm = w.lastRPM, w.lastTPM
	}
	if tpm > 0 && (rpm <= 0 || byTokens(tpm) < float64(rpm)/60) {
		return true
	}
	return w.cfg.TPM > 0 && w.rate >= tpmNearShare*byTokens(w.cfg.TPM)
}

// weight is how many mean calls' tokens a call of size is expected to
// bill, within [minWeight, maxWeight]: 1 when starts are not paced in
// tokens or its size is unknown.
func (w *law) weight(size int64) float64 {
	if !w.tokensBind() {
		return 1
	}
	est := w.estimatedTokens(size)
	if est <= 0 {
		return 1
	}
	unit := w.sizes.unit
	if unit == 0 {
		unit = w.sizes.tokens // frozen at the first start (see startWeight)
	}
	return min(max(est/unit, minWeight), maxWeight)
}

// startWeight is weight for a call starting now: the first start paced in
// tokens freezes the mean call as the rate's unit (see callTokens).
func (w *law) startWeight(size int64) float64 {
	if w.sizes.unit == 0 && w.tokensBind() {
		w.sizes.unit = w.sizes.tokens
	}
	return w.weight(size)
}

// paceStep is how far a start of a call of the given weight moves the
// paced schedule on: the paced interval, weighted.
func (w *law) paceStep(weight float64) time.Duration {
	return time.Duration(float64(w.interval()) * weight)
}

// headStep is how much later than a mean call the call first in line
// (of size nextSize) may start: a call waits until the paced schedule
// has room for its own tokens, not only for the mean call's. (Charged
// only after it started, a call of many times the mean tokens would
// start at the schedule's edge and overrun the window by all of them.)
// Negative for a call below the mean; 0 when starts are not paced in
// tokens.
func (w *law) headStep() time.Duration {
	return w.paceStep(w.weight(w.nextSize)) - w.interval()
}

// requestInterval is the least time between starts that a named budget
// of requests allows while starts are paced in tokens (short prompts
// come faster than the mean); 0 when none applies.
func (w *law) requestInterval() time.Duration {
	if w.lastRPM <= 0 || !w.tokensBind() {
		return 0
	}
	return time.Duration(float64(time.Minute) / (float64(w.lastRPM) * namedShare))
}

// requestHold is the time before which the requests budget holds the
// next start (see requestInterval); zero when it holds none.
func (w *law) requestHold() time.Time {
	iv := w.requestInterval()
	if iv <= 0 {
		return time.Time{}
	}
	return w.reqTat.Add(-iv * paceBurst)
}

// advanceRequests moves the requests schedule on past a start at t.
func (w *law) advanceRequests(t time.Time) {
	iv := w.requestInterval()
	if iv <= 0 {
		return
	}
	if w.reqTat.Before(t) {
		w.reqTat = t
	}
	w.reqTat = w.reqTat.Add(iv)
}

// tokenRoom is what a named token budget's rate is divided by for calls
// that bill more than the mean: one standard deviation of the mean tokens
// of an answer lag's calls. Paced in tokens, the calls' own sizes take
// care of that: the tokens a window holds are even, and the rate needs
// room only for a window's edges and calls reaching the server later or
// sooner than they started, so namedShare of it is namedTokenShare of the
// budget.
func (w *law) tokenRoom(byTokens float64) float64 {
	if w.sized() {
		return namedShare / namedTokenShare
	}
	if w.nTokens <= 1 || w.avgTokens <= 0 {
		return 1
	}
	n := max(byTokens*w.answerLag().Seconds(), 1)
	return 1 + math.Sqrt(w.varTokens)/w.avgTokens/math.Sqrt(n)
}
