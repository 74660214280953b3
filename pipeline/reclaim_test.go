package pipeline_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// lateCommitView is a claimView whose first CommitFenced is slow, and
// during which the store gives the entries up (as PostgreSQL does once
// the worker's session is taken for dead): the worker may claim them
// again before that commit comes back fenced.
type lateCommitView struct {
	*claimView
	clock *virtualClock
	once  sync.Once
}

func (v *lateCommitView) CommitFenced(ctx context.Context, ts []pipeline.FencedTransition) ([]uint64, error) {
	first := false
	v.once.Do(func() { first = true })
	if first {
		v.mu.Lock()
		for _, t := range ts {
			v.until[t.Seq] = v.now()
		}
		v.mu.Unlock()
		if err := v.clock.sleep(ctx, 5*time.Second); err != nil {
			return nil, err
		}
	}
	return v.claimView.CommitFenced(ctx, ts)
}

// TestFleet_ReclaimedWhileItsAnswerCommits: a worker claims again an
// entry whose earlier claim's answer is still on its way to the store.
// The old answer is fenced off; the new claim's answer must land. It
// used to be lost with the old one (the lease book is by sequence), and
// the entry stayed claimed by a live worker for its lease: an item
// queued for good in the fleet chaos test, whose lease is an hour.
func TestFleet_ReclaimedWhileItsAnswerCommits(t *testing.T) {
	const lease = time.Hour
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		st := newClaimStore([]string{"only"}, 1, clock.Now)
		stage := &funcStage{name: "only", fn: ok}
		v := &lateCommitView{claimView: st.view("a"), clock: clock}
		r := &pipeline.Runner{Store: v, Clock: clock, Lease: lease,
			Stages: []pipeline.StageConfig{{Stage: stage, Workers: 1, NewBackOff: noWait}}}
		sum, err := r.Run(context.Background())
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		if got := st.places(t); got["done"] != 1 {
			t.Fatalf("places = %v, want the item done", got)
		}
		if took := clock.Since(); took >= lease {
			t.Errorf("the run took %s: the second claim's answer was dropped and the entry waited out its lease", took)
		}
		s := sum.Stages["only"]
		if calls := stage.calls["i0000"]; calls != 2 || s.LeasesLost != 1 || st.fenced != 1 {
			t.Errorf("calls %d, leases lost %d, fenced %d; want 2, 1 (the first claim), 1", calls, s.LeasesLost, st.fenced)
		}
	})
}
