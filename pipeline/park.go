package pipeline

import (
	"context"
	"errors"
	"fmt"
)

// How a run stops early: fail ends it with a fatal error at once; park
// stops one stage taking work and halt every stage, their calls in flight
// finishing. Run reads what they recorded to word its outcome (see
// parkReason and ParkedError).

// fail stops the run with err (made a *FatalError); the first one wins.
func (r *Runner) fail(err error) {
	r.fatalMu.Lock()
	if r.fatalErr == nil {
		var fe *FatalError
		if !errors.As(err, &fe) {
			err = Fatal(err)
		}
		r.fatalErr = err
		r.log().Error("fatal error: stopping the run", "err", err)
	}
	r.fatalMu.Unlock()
	r.abort()
}

func (r *Runner) fatal() error {
	r.fatalMu.Lock()
	defer r.fatalMu.Unlock()
	return r.fatalErr
}

// park records why a stage stopped taking work; the first reason wins,
// unless a halt comes (see halt).
func (r *Runner) park(reason error) {
	r.parkMu.Lock()
	defer r.parkMu.Unlock()
	if r.parkWhy == nil {
		r.parkWhy = reason
		r.log().Warn("stage parked", "reason", reason.Error())
	}
}

// halt parks every stage at once for reason: the cause refuses every call
// of the run (see HaltError), so no stage takes more work; the calls in
// flight finish and their answers are committed. Its message replaces a
// park's that came first: the account that cannot pay is what the user
// must act on before any run goes on. The first halt wins over later ones.
func (r *Runner) halt(reason error) {
	r.parkMu.Lock()
	if !r.halted {
		r.halted = true
		r.parkWhy = reason
		r.log().Warn("stage parked", "reason", reason.Error(), "halt", true)
	}
	r.parkMu.Unlock()
	r.stopClaims()
}

// parked is why a stage parked or the run halted, nil if none did.
func (r *Runner) parked() error {
	r.parkMu.Lock()
	defer r.parkMu.Unlock()
	return r.parkWhy
}

// outcome is how the run ended, for its record and its caller: failed
// (the fatal error), stopped (the store given up, a park, an interrupt)
// or complete.
func (r *Runner) outcome(ctx context.Context) (status, message string, err error) {
	switch fatal := r.fatal(); {
	case fatal != nil:
		var same *SameFailureError
		if errors.As(fatal, &same) {
			// Say exactly how many items went to the dead letters for
			// the cause: calls that failed the same way before the
			// stop reached them are dead-lettered too.
			c := r.counters[same.stage]
			c.deadMu.Lock()
			same.DeadLettered = c.deadReasons[same.key]
			c.deadMu.Unlock()
			var fe *FatalError
			if errors.As(fatal, &fe) {
				fe.DeadLettered = same.DeadLettered
			}
		}
		return "failed", fatal.Error(), fatal
	case r.lostStore() != nil:
		lost := *r.lostStore()
		for _, c := range r.counters {
			lost.LeasesLost += c.leasesLost.Load()
		}
		return "stopped", lost.Error(), &lost
	case r.parked() != nil:
		reason := r.parkReason()
		return "stopped", reason.Error(), &ParkedError{Reason: reason}
	case ctx.Err() != nil:
		return "stopped", "interrupted", fmt.Errorf("interrupted: %w", ErrStopped)
	}
	return "complete", "", nil
}
