package pipeline

import (
	"fmt"
	"sync"
	"time"
)

// endpointHealth is what one stage's calls have shown about its endpoint in
// this run. One mutex makes each update and the figures read from it one
// step: a success resetting the outage can never fall between a failure
// starting the outage clock and reading it back.
type endpointHealth struct {
	mu sync.Mutex
	// refusedInARow counts 429s since the last success; refusedSince is
	// when the first of them came, zero when none; refusedWarned: the
	// warning that they last was logged.
	refusedInARow int64
	refusedSince  time.Time
	refusedWarned bool
	// outageSince is the first unreachable call since the endpoint last
	// answered; zero when it is answering.
	outageSince time.Time
	// contacted: the endpoint has answered at least once.
	contacted bool
	// worked: a call succeeded, or an answer showed the request works.
	worked bool
}

// succeeded records a call that the endpoint answered usefully.
func (h *endpointHealth) succeeded() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refusedInARow, h.outageSince, h.contacted, h.worked = 0, time.Time{}, true, true
	h.refusedSince, h.refusedWarned = time.Time{}, false
}

// failed records a failed call of class at now and returns the stage's
// figures for decide. Any answer (a 429, a 5xx, a rejection) ends an
// outage; only "no connection" starts or extends one; only a success ends
// a run of refusals.
func (h *endpointHealth) failed(class Class, now time.Time) (refusedInARow int64, refusedSince, outageSince time.Time, contacted bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch class {
	case ClassUnavailable:
		if h.outageSince.IsZero() {
			h.outageSince = now
		}
	case ClassCanceled, ClassFatal:
	default:
		h.outageSince, h.contacted = time.Time{}, true
		if class == ClassRateLimited {
			h.refusedInARow++
			if h.refusedSince.IsZero() {
				h.refusedSince = now
			}
		}
	}
	return h.refusedInARow, h.refusedSince, h.outageSince, h.contacted
}

// warnRefused reports, once per run of refusals, that it has lasted at
// least after at now (and counts minRefusedToPark).
func (h *endpointHealth) warnRefused(now time.Time, after time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refusedWarned || h.refusedSince.IsZero() || h.refusedInARow < minRefusedToPark || now.Sub(h.refusedSince) < after {
		return false
	}
	h.refusedWarned = true
	return true
}

func (h *endpointHealth) hasWorked() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.worked
}

// samePermanentLimit is how many permanent failures with one and the same
// cause, before any success, make an API stage's run fatal.
const samePermanentLimit = 25

// SameFailureError is the fatal error of the "first calls all failed the
// same way" stop: the facts, which the CLI words with the command that
// re-queues the items once the cause is fixed. DeadLettered starts as the
// dead letters sent; Run sets it to those committed, once every worker
// and the committer are done.
type SameFailureError struct {
	// Stage is the stage whose calls failed.
	Stage string
	// Calls is how many calls failed the same way before the stop.
	Calls int
	// Cause is the first dead letter's message.
	Cause string
	// DeadLettered is how many items went to the stage's dead letters
	// for the cause.
	DeadLettered int

	stage int    // index of Stage
	key   string // ReasonKey of the dead letters
}

// Error says what failed, how often, and how many items it dead-lettered.
func (e *SameFailureError) Error() string {
	items := fmt.Sprintf("%d items were", e.DeadLettered)
	if e.DeadLettered == 1 {
		items = "1 item was"
	}
	return fmt.Sprintf("%s: the first %d calls all failed the same way and none succeeded (%s): that is the request or the account, not the items; %s dead-lettered for it",
		e.Stage, e.Calls, e.Cause, items)
}

// checkSamePermanent stops the run when an API stage's calls have all
// failed permanently for the same reason and none has succeeded: that is
// a request or account problem (a 400 on our own request, say), and
// going on would dead-letter the whole night's input one item at a time.
// Verdicts on items (safety blocks, billed answers) never get here.
func (r *Runner) checkSamePermanent(i int, dl DeadLetter) {
	c := r.counters[i]
	if c.health.hasWorked() {
		return
	}
	key := ReasonKey(dl)
	c.deadMu.Lock()
	if key == c.samePermKey {
		c.samePermN++
	} else {
		c.samePermKey, c.samePermN = key, 1
	}
	n := c.samePermN
	c.deadMu.Unlock()
	if n == samePermanentLimit {
		name := r.Stages[i].Stage.Name()
		r.fail(&FatalError{Err: &SameFailureError{Stage: name, Calls: samePermanentLimit, Cause: dl.Message, DeadLettered: n, stage: i, key: key}, DeadLettered: n})
	}
}
