package pipeline_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// sessionView is a claimView whose worker keeps a session: beat decides
// each Beat's answer from the virtual time, and begins and ends count
// the sessions begun and ended.
type sessionView struct {
	*claimView
	beat          func(since time.Duration) error
	since         func() time.Duration
	mu            sync.Mutex
	begins, ends  int
	beganTimeouts []time.Duration
}

var _ pipeline.Sessions = (*sessionView)(nil)

func (s *sessionView) BeginSession(_ context.Context, timeout time.Duration) error {
	if err := s.beat(s.since()); err != nil && !errors.Is(err, pipeline.ErrSessionGone) {
		return err // unreachable: no session either
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.begins++
	s.beganTimeouts = append(s.beganTimeouts, timeout)
	return nil
}

func (s *sessionView) Beat(context.Context) error { return s.beat(s.since()) }

func (s *sessionView) EndSession(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ends++
	return nil
}

// TestFleet_SessionLossCancelsUnansweredCalls: a worker whose session
// the store took for dead (a beat refused), or that could not beat it
// for the heartbeat less a quarter (beats failing since the last one
// answered), takes the claims it has not answered as lost at once,
// whatever their lease: it cancels their calls, counts them, and begins
// a new session. The item is done once, by the call that finished; the
// session is ended with the run.
func TestFleet_SessionLossCancelsUnansweredCalls(t *testing.T) {
	const lease, heartbeat = time.Minute, 10 * time.Second
	tests := []struct {
		name string
		beat func(since time.Duration) error
		// canceledAt is when the first call is canceled: the first beat
		// refused, or the last answered beat + heartbeat * 3/4.
		canceledAt time.Duration
	}{
		{"the store took the session for dead", func(since time.Duration) error {
			if since >= 5*time.Second && since < 6*time.Second {
				return pipeline.ErrSessionGone
			}
			return nil
		}, 5 * time.Second},
		{"beats unanswered", func(since time.Duration) error {
			if since >= 5*time.Second && since < 20*time.Second {
				return errCutOff
			}
			return nil
		}, 2500*time.Millisecond + heartbeat*3/4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
				st := newClaimStore([]string{"only"}, 1, clock.Now)
				var mu sync.Mutex
				var canceledAt []time.Duration
				stage := &funcStage{name: "only", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
					if n == 1 {
						<-ctx.Done()
						mu.Lock()
						canceledAt = append(canceledAt, clock.Since())
						mu.Unlock()
						return pipeline.Result{}, ctx.Err()
					}
					return ok(ctx, it, n)
				}}
				v := &sessionView{claimView: st.view("a"), beat: tt.beat, since: clock.Since}
				r := &pipeline.Runner{Store: v, Clock: clock, Lease: lease, Heartbeat: heartbeat,
					Stages: []pipeline.StageConfig{{Stage: stage, Workers: 1, NewBackOff: noWait}}}
				sum, err := r.Run(context.Background())
				if err != nil {
					t.Fatalf("run: %v", err)
				}
				if len(canceledAt) != 1 || canceledAt[0] != tt.canceledAt {
					t.Errorf("the first call was canceled at %v, want once at +%s", canceledAt, tt.canceledAt)
				}
				s := sum.Stages["only"]
				if s.LeasesLost != 1 || s.Done != 1 || stage.calls["i0000"] != 2 {
					t.Errorf("leases lost %d, done %d, calls %d; want 1, 1, 2", s.LeasesLost, s.Done, stage.calls["i0000"])
				}
				if got := st.places(t); got["done"] != 1 {
					t.Errorf("places = %v", got)
				}
				if v.begins != 2 || v.ends != 1 || v.beganTimeouts[0] != heartbeat {
					t.Errorf("sessions begun %d (timeouts %v), ended %d; want 2 of %s, 1", v.begins, v.beganTimeouts, v.ends, heartbeat)
				}
			})
		})
	}
}

// TestFleet_BeatingSessionKeepsLongCalls: a call several heartbeats long
// is never canceled while the session beats.
func TestFleet_BeatingSessionKeepsLongCalls(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		st := newClaimStore([]string{"only"}, 1, clock.Now)
		stage := &funcStage{name: "only", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			if err := clock.sleep(ctx, 3*time.Minute); err != nil {
				return pipeline.Result{}, err
			}
			return ok(ctx, it, n)
		}}
		v := &sessionView{claimView: st.view("a"), beat: func(time.Duration) error { return nil }, since: clock.Since}
		r := &pipeline.Runner{Store: v, Clock: clock, Lease: time.Minute, Stages: []pipeline.StageConfig{{Stage: stage, Workers: 1}}}
		sum, err := r.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s := sum.Stages["only"]; s.LeasesLost != 0 || s.Done != 1 || stage.calls["i0000"] != 1 {
			t.Errorf("leases lost %d, done %d, calls %d; want 0, 1, 1", s.LeasesLost, s.Done, stage.calls["i0000"])
		}
		if v.begins != 1 || v.ends != 1 || v.beganTimeouts[0] != pipeline.DefaultHeartbeat {
			t.Errorf("sessions begun %d (timeouts %v), ended %d; want 1 of the default heartbeat, 1", v.begins, v.beganTimeouts, v.ends)
		}
	})
}
