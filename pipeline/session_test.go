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

// TestFleet_SessionLoss: a worker whose session the store took for dead
// (a beat refused) takes its claims not yet answered as lost at once,
// whatever their lease, cancels their calls and counts them; one that
// could not beat for the heartbeat less a quarter (the store away, maybe
// for every worker) lets its call in flight finish, to a fenced commit.
// Either way it begins a new session, the item is done once, and the
// session is ended with the run.
func TestFleet_SessionLoss(t *testing.T) {
	const lease, heartbeat, call = time.Minute, 10 * time.Second, 30 * time.Second
	tests := []struct {
		name string
		beat func(since time.Duration) error
		// canceledAt is when the first call is canceled, 0 if it is not.
		canceledAt time.Duration
		lost       int64
	}{
		{"the store took the session for dead", func(since time.Duration) error {
			if since >= 5*time.Second && since < 6*time.Second {
				return pipeline.ErrSessionGone
			}
			return nil
		}, 5 * time.Second, 1},
		{"beats unanswered", func(since time.Duration) error {
			if since >= 5*time.Second && since < 20*time.Second {
				return errCutOff
			}
			return nil
		}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
				st := newClaimStore([]string{"only"}, 1, clock.Now)
				var canceledAt []time.Duration
				stage := &funcStage{name: "only", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
					if n == 1 {
						if err := clock.sleep(ctx, call); err != nil {
							canceledAt = append(canceledAt, clock.Since())
							return pipeline.Result{}, err
						}
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
				calls := int64(1)
				if tt.canceledAt > 0 {
					calls = 2
					if len(canceledAt) != 1 || canceledAt[0] != tt.canceledAt {
						t.Errorf("the first call was canceled at %v, want once at +%s", canceledAt, tt.canceledAt)
					}
				} else if len(canceledAt) != 0 {
					t.Errorf("the call in flight was canceled at %v", canceledAt)
				}
				s := sum.Stages["only"]
				if s.LeasesLost != tt.lost || s.Done != 1 || int64(stage.calls["i0000"]) != calls {
					t.Errorf("leases lost %d, done %d, calls %d; want %d, 1, %d", s.LeasesLost, s.Done, stage.calls["i0000"], tt.lost, calls)
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
