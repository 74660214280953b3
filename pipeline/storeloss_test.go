package pipeline_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// outage cuts a view off from the store from from on, until to (zero: for
// good), on the store's clock.
func outage(clock *virtualClock, from, to time.Duration) func() bool {
	return func() bool {
		at := clock.Since()
		return at >= from && (to == 0 || at < to)
	}
}

// callLog is a stage of calls that take d each and records how many
// ended canceled.
type callLog struct {
	mu       sync.Mutex
	canceled int
}

func (l *callLog) stage(clock *virtualClock, d time.Duration) *funcStage {
	return &funcStage{name: "only", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		if err := clock.sleep(ctx, d); err != nil {
			l.mu.Lock()
			l.canceled++
			l.mu.Unlock()
			return pipeline.Result{}, err
		}
		return ok(ctx, it, n)
	}}
}

// TestFleet_StoreLostWindsDownWithinALease: the database goes away at
// +30 s, with calls of 20 s in flight, and does not come back. The worker
// retries for StoreRetry, then stops claiming; its calls in flight
// finish; their results are tried until their leases end and never at
// or after that end, then dropped and counted as lost leases; Run
// returns a StoreLostError (a resumable stop) within StoreRetry + a
// lease of the loss. Once the database is back and the leases have
// ended, a worker started again does the rest: every item done once,
// and called twice only when a lease was counted lost.
func TestFleet_StoreLostWindsDownWithinALease(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		const (
			n      = 40
			lease  = time.Minute
			cut    = 30 * time.Second
			retry  = pipeline.DefaultStoreRetry
			callsD = 20 * time.Second
		)
		st := newClaimStore([]string{"only"}, n, clock.Now)
		a := st.view("a")
		a.cutOff = outage(clock, cut, 0)
		var log callLog
		stage := log.stage(clock, callsD)
		r := &pipeline.Runner{Store: a, Clock: clock, Lease: lease, Stages: []pipeline.StageConfig{{Stage: stage, Workers: 4}}}
		sum, err := r.Run(context.Background())
		ended := clock.Since()

		var lost *pipeline.StoreLostError
		var fe *pipeline.FatalError
		if !errors.As(err, &lost) || !errors.Is(err, pipeline.ErrStopped) || errors.As(err, &fe) {
			t.Fatalf("Run = %v, want a StoreLostError that is a resumable stop", err)
		}
		if !errors.Is(err, errCutOff) || !strings.Contains(err.Error(), "stopped claiming") {
			t.Errorf("the error %q does not carry the store's last failure and what the worker did", err)
		}
		if sum.Status != "stopped" || sum.Message != err.Error() {
			t.Errorf("summary status %q, message %q; want stopped, with the error", sum.Status, sum.Message)
		}
		if bound := cut + retry + time.Second + lease; ended > bound {
			t.Errorf("the worker stopped at +%s, more than StoreRetry + a poll + a lease after the loss (+%s)", ended, bound)
		}
		if st.late != 0 {
			t.Errorf("%d results were sent for commit at or after their lease's end", st.late)
		}
		if first, last := st.failedClaims[0], st.failedClaims[len(st.failedClaims)-1]; last.Sub(first) > retry+time.Second {
			t.Errorf("claims were tried from +%s to +%s, longer than StoreRetry (%s) and a poll", first.Sub(epoch), last.Sub(epoch), retry)
		}
		if log.canceled != 0 {
			t.Errorf("%d calls in flight were canceled, though each could finish before its lease ended", log.canceled)
		}
		s := sum.Stages["only"]
		if s.Done == 0 || s.LeasesLost == 0 || s.Calls != s.Done+s.LeasesLost || lost.LeasesLost != s.LeasesLost {
			t.Errorf("done %d, leases lost %d (error: %d), calls %d; want every call before the loss committed and every call after it counted lost",
				s.Done, s.LeasesLost, lost.LeasesLost, s.Calls)
		}

		// Back: a worker started again once the leases have ended.
		b := &pipeline.Runner{Store: st.view("b"), Clock: clock, Lease: lease, Stages: []pipeline.StageConfig{{Stage: stage, Workers: 4}}}
		if _, err := b.Run(context.Background()); err != nil {
			t.Fatalf("the worker started again: %v", err)
		}
		if got := st.places(t); got["done"] != n || len(got) != 1 {
			t.Errorf("places = %v, want %d done", got, n)
		}
		twice := 0
		for id, c := range stage.calls {
			if c > 1 {
				twice += c - 1
			}
			if c > 2 {
				t.Errorf("%s called %d times", id, c)
			}
		}
		if int64(twice) != s.LeasesLost {
			t.Errorf("%d calls beyond one per item, %d leases counted lost", twice, s.LeasesLost)
		}
	})
}

// TestFleet_StoreBlipIsRiddenOut: the database is away for less than
// StoreRetry: the worker retries, goes on, and finishes the run with
// nothing lost and nothing called twice.
func TestFleet_StoreBlipIsRiddenOut(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		const n = 40
		st := newClaimStore([]string{"only"}, n, clock.Now)
		a := st.view("a")
		a.cutOff = outage(clock, 39*time.Second, 39*time.Second+pipeline.DefaultStoreRetry-time.Second)
		var log callLog
		stage := log.stage(clock, 20*time.Second)
		r := &pipeline.Runner{Store: a, Clock: clock, Lease: time.Minute, Stages: []pipeline.StageConfig{{Stage: stage, Workers: 4}}}
		sum, err := r.Run(context.Background())
		if err != nil {
			t.Fatalf("Run = %v, want the blip ridden out", err)
		}
		if len(st.failedClaims) == 0 {
			t.Fatal("no claim was refused: the test did not cut the worker off")
		}
		if s := sum.Stages["only"]; s.Done != n || s.LeasesLost != 0 || s.Calls != n || log.canceled != 0 {
			t.Errorf("done %d, leases lost %d, calls %d, canceled %d; want %d, 0, %d, 0", s.Done, s.LeasesLost, s.Calls, log.canceled, n, n)
		}
		if got := st.places(t); got["done"] != n {
			t.Errorf("places = %v", got)
		}
	})
}

// TestFleet_AnswersOutliveAStoreOutage: the database goes away at +31 s
// (a second after a renewal) and comes back at +86 s, with calls of 20 s
// in flight and a lease of a minute. The worker starts no call once a
// request to the store has failed, gives it up after StoreRetry (no more claims or renewals),
// and keeps the answers of its calls in flight until their leases end
// as the database has them (+90 s), not as a call must assume them
// (+80 s): it commits them when the database is back. Then a worker
// started again does the rest, and no item is called twice.
func TestFleet_AnswersOutliveAStoreOutage(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		const (
			n     = 40
			lease = time.Minute
		)
		st := newClaimStore([]string{"only"}, n, clock.Now)
		a := st.view("a")
		away := outage(clock, 31*time.Second, 86*time.Second)
		// The worker learns the store is away from a request that fails:
		// a call started at a later instant (the virtual clock moves only
		// once every goroutine waits) was started knowing it.
		var mu sync.Mutex
		var firstFailure time.Time
		a.cutOff = func() bool {
			cut := away()
			mu.Lock()
			if cut && firstFailure.IsZero() {
				firstFailure = clock.Now()
			}
			mu.Unlock()
			return cut
		}
		calledAway := 0
		stage := &funcStage{name: "only", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			mu.Lock()
			if away() && !firstFailure.IsZero() && clock.Now().After(firstFailure) {
				calledAway++
			}
			mu.Unlock()
			if err := clock.sleep(ctx, 20*time.Second); err != nil {
				return pipeline.Result{}, err
			}
			return ok(ctx, it, n)
		}}
		r := &pipeline.Runner{Store: a, Clock: clock, Lease: lease, Stages: []pipeline.StageConfig{{Stage: stage, Workers: 4}}}
		sum, err := r.Run(context.Background())
		var lost *pipeline.StoreLostError
		if !errors.As(err, &lost) {
			t.Fatalf("Run = %v, want a StoreLostError (the outage outlasts StoreRetry)", err)
		}
		s := sum.Stages["only"]
		if s.LeasesLost != 0 || s.Done != s.Calls || s.Done == 0 {
			t.Errorf("done %d of %d calls, leases lost %d: want every answer committed once the store was back, none lost", s.Done, s.Calls, s.LeasesLost)
		}
		if calledAway != 0 {
			t.Errorf("%d calls started while the store was known to be away", calledAway)
		}
		if st.late != 0 {
			t.Errorf("%d answers sent for commit at or after their lease's end", st.late)
		}

		b := &pipeline.Runner{Store: st.view("b"), Clock: clock, Lease: lease, Stages: []pipeline.StageConfig{{Stage: stage, Workers: 4}}}
		if _, err := b.Run(context.Background()); err != nil {
			t.Fatalf("the worker started again: %v", err)
		}
		if got := st.places(t); got["done"] != n || len(got) != 1 {
			t.Errorf("places = %v, want %d done", got, n)
		}
		for id, c := range stage.calls {
			if c != 1 {
				t.Errorf("%s called %d times", id, c)
			}
		}
	})
}
