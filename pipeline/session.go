package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// DefaultHeartbeat is Runner.Heartbeat's default: a dead worker's claims
// return to the queue about this long after its death (beaten every
// quarter of it), whatever the lease.
const DefaultHeartbeat = 10 * time.Second

// ErrSessionGone is what Sessions.Beat returns when the store already
// takes the session for dead (not beaten within its timeout, or ended):
// other workers may hold its claims now, and it never comes back.
var ErrSessionGone = errors.New("the worker's session has ended: the store took the worker for dead")

// Sessions is what a Claimer implements when it notices a dead worker by
// a heartbeat shorter than the call lease. A worker registers one session
// and beats it every timeout/4; every claim records the session, and an
// entry whose session has not beaten within its timeout (on the store's
// clock) is claimable by others even though its lease runs on: a lease
// must outlast the longest call, a heartbeat only a pause of the worker.
// A session the store took for dead never beats again (Beat returns
// ErrSessionGone): the worker drops what it held and begins a new one,
// so a claim is held only while its session beat without a gap. Fencing
// is the claim's Attempt, as without sessions: a worker taken for dead
// cannot commit an entry another worker claimed since.
type Sessions interface {
	// BeginSession registers a new session, dead once not beaten for
	// timeout; the claims made from now on record it.
	BeginSession(ctx context.Context, timeout time.Duration) error
	// Beat tells the store the session's worker is alive.
	Beat(ctx context.Context) error
	// EndSession deletes the session (clean shutdown): what it still
	// holds is claimable at once.
	EndSession(ctx context.Context) error
}

// session is a fleet worker's heartbeat: it keeps the store's session
// alive, and when it cannot, other workers may claim its entries now, so
// it begins a new session and drops what the old one held. A beat
// refused (the store took the worker for dead) loses every claim not yet
// answered and cancels its calls. Beats unanswered for a heartbeat less
// a margin on the runner's clock lose the claims whose calls have not
// started; calls in flight go on, their answers fenced at commit as
// before: the store may be down for every worker (a restart counts as a
// beat), and a call canceled then may be paid again for nothing.
type session struct {
	r *Runner
	s Sessions
	// validUntil is the last answered beat's sent + Heartbeat - margin;
	// zero while no session is begun.
	mu         sync.Mutex
	validUntil time.Time
}

func (r *Runner) heartbeatMargin() time.Duration { return r.Heartbeat / 4 }

// begin registers a new session, sent at the clock's now.
func (s *session) begin(ctx context.Context) error {
	sent := s.r.clock().Now()
	bctx, cancel := context.WithTimeout(ctx, s.r.Heartbeat/4)
	defer cancel()
	if err := s.s.BeginSession(bctx, s.r.Heartbeat); err != nil {
		return err
	}
	s.mu.Lock()
	s.validUntil = sent.Add(s.r.Heartbeat - s.r.heartbeatMargin())
	s.mu.Unlock()
	return nil
}

// run beats the session every Heartbeat/4 (at once when the store
// answers again after failing) until stop closes.
func (s *session) run(stop <-chan struct{}) {
	clock := s.r.clock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()
	for {
		wait := s.r.Heartbeat / 4
		s.mu.Lock()
		until := s.validUntil
		s.mu.Unlock()
		if !until.IsZero() {
			wait = min(wait, until.Sub(clock.Now()))
		}
		t := clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-s.r.storeGate.down():
		case <-ctx.Done():
			t.Stop()
			return
		}
		t.Stop()
		if ctx.Err() != nil || s.r.lostStore() != nil {
			// Given up: the claims end with their leases or session.
			return
		}
		s.beat(ctx)
	}
}

// beat beats the session once, or begins one when there is none, and
// drops every claim when the session is gone.
func (s *session) beat(ctx context.Context) {
	clock := s.r.clock()
	s.mu.Lock()
	until := s.validUntil
	s.mu.Unlock()
	if until.IsZero() {
		if err := s.begin(ctx); err != nil {
			if ctx.Err() == nil {
				s.r.storeGate.failed()
				s.r.log().Warn("could not begin a worker session; trying again (claims meanwhile hold for their lease)", "err", err)
			}
			return
		}
		s.r.storeGate.answered()
		return
	}
	sent := clock.Now()
	bctx, cancel := context.WithTimeout(ctx, s.r.Heartbeat/4)
	err := s.s.Beat(bctx)
	cancel()
	switch {
	case err == nil:
		s.mu.Lock()
		s.validUntil = sent.Add(s.r.Heartbeat - s.r.heartbeatMargin())
		s.mu.Unlock()
		s.r.storeGate.answered()
		return
	case ctx.Err() != nil:
		return
	case errors.Is(err, ErrSessionGone):
		s.drop(true, "the store took this worker for dead (its session was not beaten for "+s.r.Heartbeat.String()+")")
	case !clock.Now().Before(until):
		s.drop(false, fmt.Sprintf("its session could not be beaten for %s (last error: %v)", s.r.Heartbeat-s.r.heartbeatMargin(), err))
	default:
		s.r.storeGate.failed()
		s.r.log().Warn("could not beat the worker session; trying again", "err", err)
		return
	}
	s.mu.Lock()
	s.validUntil = time.Time{}
	s.mu.Unlock()
	s.beat(ctx) // begins the next session
}

// drop takes the claims of this process not yet answered as lost (with
// started false, only those whose call has not started).
func (s *session) drop(started bool, why string) {
	for _, b := range s.r.books {
		if b != nil {
			b.loseUnsent(started, why)
		}
	}
}

// end deletes the session once the worker is done.
func (s *session) end() {
	if s.r.lostStore() != nil {
		return // given up: the session ends on its own
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.r.Heartbeat/4)
	defer cancel()
	if err := s.s.EndSession(ctx); err != nil {
		s.r.log().Warn("could not end the worker session; it ends on its own", "err", err)
	}
}

// beginSession begins the worker's session when Store implements
// Claimer and Sessions, and starts beating it; the function it returns
// stops the beats and ends the session (the run is over: nothing is
// held any more).
func (r *Runner) beginSession() func() {
	ss, ok := r.Store.(Sessions)
	if _, claims := r.Store.(Claimer); !ok || !claims {
		return func() {}
	}
	s := &session{r: r, s: ss}
	if err := s.begin(context.Background()); err != nil {
		r.log().Warn("could not begin a worker session; trying again (claims meanwhile hold for their lease)", "err", err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); s.run(stop) }()
	return func() {
		close(stop)
		<-done
		s.end()
	}
}
