package pipeline

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// firstContactOutage bounds the wait for an endpoint that has not answered
// once in this run: most likely a wrong URL or no network, not a blip.
const firstContactOutage = 30 * time.Second

// actionKind is what the runner does with an item after a failed call.
type actionKind int

const (
	// requeue gives the item back: it stays queued for a later run and the
	// attempt is not spent (the run is shutting down).
	requeue actionKind = iota + 1
	// retryAt calls the stage again for the item at action.at.
	retryAt
	// deadLetter moves the item to the stage's dead letters with
	// action.message.
	deadLetter
	// park stops the stage taking work (its items stay queued) and stops
	// the run as ErrStopped with action.message.
	park
	// stop ends the run with a fatal error (action.message); no item is
	// dead-lettered for it.
	stop
	// halt stops every stage taking work (the calls in flight finish,
	// every item stays queued) and the run as ErrStopped with
	// action.message.
	halt
)

func (k actionKind) String() string {
	switch k {
	case requeue:
		return "requeue"
	case retryAt:
		return "retryAt"
	case deadLetter:
		return "deadLetter"
	case park:
		return "park"
	case stop:
		return "stop"
	case halt:
		return "halt"
	}
	return fmt.Sprintf("actionKind(%d)", int(k))
}

// action is decide's answer.
type action struct {
	kind actionKind
	// at is when to call again (retryAt).
	at time.Time
	// message is the dead letter's message (deadLetter) or the error the
	// run fails with (stop).
	message string
	// reason is why the stage parks, or the run halts (park, halt).
	reason error
}

// failure is one failed call as decide sees it: the call's class and error
// and the item's and stage's state after counting this call.
type failure struct {
	class Class
	err   error
	// attempts is how many attempts the item has spent at this stage in
	// this run, this call included when its class spends one.
	attempts int
	// refusedInARow is the stage's 429s with no success between them,
	// this one included; refusedSince is when the first of them came.
	refusedInARow int64
	refusedSince  time.Time
	// outageSince is when the stage's current outage began: the first
	// unreachable call since the endpoint last answered (this call when it
	// starts one).
	outageSince time.Time
	// contacted reports that the endpoint has answered (anything but "no
	// connection") at least once in this run.
	contacted bool
	// overloadedSince is when the server began answering overloaded with
	// no success since (ClassOverloaded); overloadHeld reports that the
	// stage's overload hold covers the retry: every call of the stage
	// waits at it, so the item needs no wait of its own.
	overloadedSince time.Time
	overloadHeld    bool
	// step is the next delay of the item's backoff schedule for this
	// class (jitter included): drawn by the caller, so decide stays pure.
	step time.Duration
}

// spendsAttempt reports whether a call of class c spends one of the item's
// MaxAttempts. Refusals, outages, overloads and shutdowns are not the
// item's fault; fatal errors are nobody's item.
func spendsAttempt(c Class) bool {
	switch c {
	case ClassRateLimited, ClassUnavailable, ClassOverloaded, ClassCanceled, ClassFatal, ClassShed:
		return false
	}
	return true
}

// decide is the retry policy: what to do with an item whose call at stage
// cfg failed as f, at instant now. It is a pure function of its arguments
// (no clock, no randomness, no shared state), in the manner of river's
// NextRetry, so every branch is table-tested with explicit instants.
// cfg must have its defaults set.
func decide(f failure, cfg *StageConfig, now time.Time) action {
	name := cfg.Stage.Name()
	switch f.class {
	case ClassCanceled:
		return action{kind: requeue}
	case ClassFatal:
		return decideFatal(f, name)
	case ClassRateLimited:
		return decideRateLimited(f, cfg, name, now)
	case ClassUnavailable:
		return decideUnavailable(f, cfg, name, now)
	case ClassOverloaded:
		return decideOverloaded(f, cfg, name, now)
	case ClassShed:
		return decideShed(f, now)
	case ClassTransient:
		if f.attempts < cfg.MaxAttempts {
			return action{kind: retryAt, at: now.Add(f.step)}
		}
		return action{kind: deadLetter, message: fmt.Sprintf("gave up after %d attempts: %v", f.attempts, f.err)}
	default: // ClassPermanent
		return action{kind: deadLetter, message: f.err.Error()}
	}
}

// decideFatal stops the run: a HaltError (the account's, not the item's)
// halts it with its cause; anything else stops it.
func decideFatal(f failure, name string) action {
	var he *HaltError
	if errors.As(f.err, &he) {
		// The cause alone: it is the account's, not the item's
		// the stage may have named around it.
		msg := he.Error()
		if !strings.HasPrefix(msg, name+": ") {
			msg = name + ": " + msg
		}
		return action{kind: halt, reason: errors.New(msg)}
	}
	return action{kind: stop, message: fmt.Sprintf("%s: %v", name, f.err)}
}

// decideRateLimited parks the stage on a per-day quota, a delay longer
// than MaxWait or refusals past MaxRefused; otherwise the call is tried
// again, held by the limiter or after a backoff.
func decideRateLimited(f failure, cfg *StageConfig, name string, now time.Time) action {
	var rl *RateLimitedError
	if !errors.As(f.err, &rl) {
		rl = &RateLimitedError{Err: f.err}
	}
	switch {
	case rl.Daily:
		// A per-day quota resets at midnight Pacific whatever
		// retryDelay says: one refusal is enough.
		return action{kind: park, reason: &QuotaStop{Stage: name, Cause: DailyQuota, ResumeAt: nextPacificMidnight(now), Last: f.err}}
	case rl.RetryAfter > cfg.MaxWait:
		return action{kind: park, reason: &QuotaStop{Stage: name, Cause: WaitTooLong, Wait: rl.RetryAfter, MaxWait: cfg.MaxWait, ResumeAt: now.Add(rl.RetryAfter), Last: f.err}}
	case cfg.MaxRefused > 0 && f.refusedInARow >= int64(cfg.MaxRateLimited):
		return action{kind: park, reason: &QuotaStop{Stage: name, Cause: RefusedInARow, InARow: f.refusedInARow, Since: f.refusedSince, For: now.Sub(f.refusedSince), Last: f.err}}
	case cfg.MaxRefused > 0 && f.refusedInARow >= minRefusedToPark && !f.refusedSince.IsZero() && now.Sub(f.refusedSince) >= cfg.MaxRefused:
		return action{kind: park, reason: &QuotaStop{Stage: name, Cause: RefusedTooLong, InARow: f.refusedInARow, Since: f.refusedSince,
			For: now.Sub(f.refusedSince), MaxRefused: cfg.MaxRefused, ResumeAt: nextPacificMidnight(now), Last: f.err}}
	case rl.RetryAfter > 0 && cfg.Limiter != nil, holdsRefusals(cfg.Limiter):
		// The limiter was told the delay and holds every call of the
		// stage until it has passed, or it backs off a bare 429
		// itself, for the whole stage.
		return action{kind: retryAt, at: now}
	default:
		// A bare 429 says nothing about when: back off with jitter,
		// so the workers do not hammer the quota.
		return action{kind: retryAt, at: now.Add(max(rl.RetryAfter, f.step))}
	}
}

// decideUnavailable parks the stage once the server has been unreachable
// for MaxOutage (less before it ever answered); otherwise it backs off.
func decideUnavailable(f failure, cfg *StageConfig, name string, now time.Time) action {
	limit, before := cfg.MaxOutage, false
	if !f.contacted && firstContactOutage < limit {
		limit, before = firstContactOutage, true
	}
	if down := now.Sub(f.outageSince); down >= limit {
		return action{kind: park, reason: &OutageStop{Stage: name, Since: f.outageSince, For: down, Limit: limit, BeforeAnswer: before, Last: f.err}}
	}
	return action{kind: retryAt, at: now.Add(f.step)}
}

// decideOverloaded handles a 503: the server short of capacity, not the
// item's fault (it is never dead-lettered for it) and not the quota. It
// passes; only an overload that outlasts MaxOutage stops the stage, its
// items still queued.
func decideOverloaded(f failure, cfg *StageConfig, name string, now time.Time) action {
	if down := now.Sub(f.overloadedSince); !f.overloadedSince.IsZero() && down >= cfg.MaxOutage {
		return action{kind: park, reason: &OutageStop{Stage: name, Overloaded: true, Since: f.overloadedSince, For: down, Limit: cfg.MaxOutage, Last: f.err}}
	}
	if f.overloadHeld {
		return action{kind: retryAt, at: now}
	}
	return action{kind: retryAt, at: now.Add(f.step)}
}

// decideShed waits for the tier to have room: a shed is never the item's
// fault, never a dead letter; the stage picks the tier of the next call.
func decideShed(f failure, now time.Time) action {
	var se *ShedError
	after := f.step
	if errors.As(f.err, &se) {
		after = max(after, se.RetryAfter)
		if se.WaitAtMost > 0 {
			after = min(after, se.WaitAtMost)
		}
		if se.Moved {
			after = 0
		}
	}
	return action{kind: retryAt, at: now.Add(after)}
}

// minRefusedToPark is the fewest 429s in a row that park a stage for
// lasting MaxRefused: two refusals minutes apart (a machine asleep between
// them) show nothing about the quota.
const minRefusedToPark = 5

// holdsRefusals reports whether lim backs off bare 429s itself (see
// RefusalHolder).
func holdsRefusals(lim Limiter) bool {
	h, ok := lim.(RefusalHolder)
	return ok && h.HoldsRefusals()
}

// nextPacificMidnight is when Gemini's per-day quotas reset.
func nextPacificMidnight(now time.Time) time.Time {
	loc, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		loc = time.FixedZone("PST", -8*3600)
	}
	t := now.In(loc)
	return time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, loc)
}
