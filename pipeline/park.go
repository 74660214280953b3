package pipeline

import "errors"

// How a run stops early: fail ends it with a fatal error at once; park
// stops one stage taking work and halt every stage, their calls in flight
// finishing. Run reads what they recorded to word its outcome (see
// parkMessage and parkError).

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
func (r *Runner) park(msg string) {
	r.parkMu.Lock()
	defer r.parkMu.Unlock()
	if r.parkMsg == "" {
		r.parkMsg = msg
		r.log().Warn("stage parked", "reason", msg)
	}
}

// halt parks every stage at once with msg: the cause refuses every call
// of the run (see HaltError), so no stage takes more work; the calls in
// flight finish and their answers are committed. Its message replaces a
// park's that came first: the account that cannot pay is what the user
// must act on before any run goes on. The first halt wins over later ones.
func (r *Runner) halt(msg string) {
	r.parkMu.Lock()
	if !r.halted {
		r.halted = true
		r.parkMsg = msg
		r.log().Warn("stage parked", "reason", msg, "halt", true)
	}
	r.parkMu.Unlock()
	r.stopClaims()
}

func (r *Runner) parked() string {
	r.parkMu.Lock()
	defer r.parkMu.Unlock()
	return r.parkMsg
}
