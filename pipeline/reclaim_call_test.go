package pipeline_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// outputView is a claimView that records the output of every transition
// CommitFenced applies.
type outputView struct {
	*claimView
	mu      sync.Mutex
	applied []string
}

func (v *outputView) CommitFenced(ctx context.Context, ts []pipeline.FencedTransition) ([]uint64, error) {
	v.claimView.mu.Lock()
	var current []string
	for _, t := range ts {
		if v.attempt[t.Seq] == t.Attempt && t.Outcome == pipeline.Succeeded {
			current = append(current, string(t.Result.Output))
		}
	}
	v.claimView.mu.Unlock()
	rejected, err := v.claimView.CommitFenced(ctx, ts)
	if err == nil {
		v.mu.Lock()
		v.applied = append(v.applied, current...)
		v.mu.Unlock()
	}
	return rejected, err
}

// giveUp makes the store give the entries up now, as PostgreSQL does
// once their worker's session is taken for dead.
func (s *claimStore) giveUp() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for seq := range s.until {
		s.until[seq] = s.now()
	}
}

func callAnswer(call int) pipeline.Result {
	out, _ := json.Marshal(map[string]int{"call": call})
	return pipeline.Result{Output: out, Usage: pipeline.Usage{TotalTokens: 10}}
}

// TestFleet_ReclaimedWhileItsCallRuns: the store gives an entry up while
// this worker's call for it runs, and the worker claims it again. The
// old call's lease is gone: its call is canceled and its answer, if it
// comes, never committed with the new claim's token; the new claim's
// answer is the one committed. (The book, by sequence, once took the
// old call's answer for the new claim's: the old answer was committed
// and the new call canceled.)
func TestFleet_ReclaimedWhileItsCallRuns(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		st := newClaimStore([]string{"only"}, 1, clock.Now)
		stage := &funcStage{name: "only", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			if n == 1 {
				st.giveUp()
				// A call that does not heed its context in time.
				if err := clock.sleep(context.Background(), 5*time.Second); err != nil {
					return pipeline.Result{}, err
				}
				return callAnswer(n), nil
			}
			if err := clock.sleep(ctx, 10*time.Second); err != nil {
				return pipeline.Result{}, err
			}
			return callAnswer(n), nil
		}}
		v := &outputView{claimView: st.view("a")}
		r := &pipeline.Runner{Store: v, Clock: clock, Lease: time.Hour,
			Stages: []pipeline.StageConfig{{Stage: stage, Workers: 2, NewBackOff: noWait}}}
		sum, err := r.Run(context.Background())
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		if got := st.places(t); got["done"] != 1 {
			t.Fatalf("places = %v, want the item done", got)
		}
		if lost := sum.Stages["only"].LeasesLost; lost != 1 {
			t.Errorf("leases lost %d, want 1 (the first claim, counted once)", lost)
		}
		want := string(callAnswer(2).Output)
		if len(v.applied) != 1 || v.applied[0] != want {
			t.Errorf("answers committed %v, want the second claim's %s only", v.applied, want)
		}
		if calls := stage.calls["i0000"]; calls != 2 {
			t.Errorf("calls %d, want 2", calls)
		}
	})
}

// TestFleet_SessionLostCallEndsAfterReclaim: the worker's session is
// taken for dead; its call is canceled but takes a while to return, and
// meanwhile the worker claims the entry again and starts a new call. The
// old call's end must leave the new claim alone: it once took the new
// claim's entry out of the book, canceled the new call and released its
// lease, so the item was called a third time.
func TestFleet_SessionLostCallEndsAfterReclaim(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		st := newClaimStore([]string{"only"}, 1, clock.Now)
		stage := &funcStage{name: "only", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			if n == 1 {
				err := clock.sleep(ctx, time.Minute)
				// The canceled call takes 3s to return.
				_ = clock.sleep(context.Background(), 3*time.Second)
				return pipeline.Result{}, err
			}
			if err := clock.sleep(ctx, 10*time.Second); err != nil {
				return pipeline.Result{}, err
			}
			return callAnswer(n), nil
		}}
		var once sync.Once
		v := &sessionView{claimView: st.view("a"), since: clock.Since, beat: func(since time.Duration) error {
			if since >= 5*time.Second && since < 6*time.Second {
				gone := false
				once.Do(func() { gone = true; st.giveUp() })
				if gone {
					return pipeline.ErrSessionGone
				}
			}
			return nil
		}}
		r := &pipeline.Runner{Store: v, Clock: clock, Lease: time.Hour, Heartbeat: 4 * time.Second,
			Stages: []pipeline.StageConfig{{Stage: stage, Workers: 2, NewBackOff: noWait}}}
		sum, err := r.Run(context.Background())
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		if got := st.places(t); got["done"] != 1 {
			t.Fatalf("places = %v, want the item done", got)
		}
		if calls, lost := stage.calls["i0000"], sum.Stages["only"].LeasesLost; calls != 2 || lost != 1 {
			t.Errorf("calls %d, leases lost %d; want 2, 1", calls, lost)
		}
	})
}
