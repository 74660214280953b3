package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// fleet runs one runner per view at once and returns their summaries.
func fleet(t *testing.T, views []*claimView, mk func(v *claimView) *pipeline.Runner) []pipeline.RunSummary {
	t.Helper()
	sums := make([]pipeline.RunSummary, len(views))
	errs := make([]error, len(views))
	var wg sync.WaitGroup
	for i, v := range views {
		r := mk(v)
		wg.Add(1)
		go func() {
			defer wg.Done()
			sums[i], errs[i] = r.Run(context.Background())
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("worker %s: %v", views[i].name, err)
		}
	}
	return sums
}

func totals(sums []pipeline.RunSummary, stage string) (done, dead, lost int64) {
	for _, s := range sums {
		if st := s.Stages[stage]; st != nil {
			done, dead, lost = done+st.Done, dead+st.Dead, lost+st.LeasesLost
		}
	}
	return done, dead, lost
}

// TestFleet_WorkersShareTheQueues: three runners drain one store's two
// stages, each item called once per stage, by whichever worker claimed it.
func TestFleet_WorkersShareTheQueues(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		const n = 120
		st := newClaimStore([]string{"first", "second"}, n, clock.Now)
		slow := func(ctx context.Context, it pipeline.Item, call int) (pipeline.Result, error) {
			var k int
			fmt.Sscanf(it.ID, "i%d", &k)
			if err := clock.sleep(ctx, time.Duration(1+k%3)*time.Second); err != nil {
				return pipeline.Result{}, err
			}
			return ok(ctx, it, call)
		}
		first, second := &funcStage{name: "first", fn: slow}, &funcStage{name: "second", fn: slow}
		views := []*claimView{st.view("a"), st.view("b"), st.view("c")}
		sums := fleet(t, views, func(v *claimView) *pipeline.Runner {
			return &pipeline.Runner{Store: v, Clock: clock, Lease: time.Minute, Stages: []pipeline.StageConfig{
				{Stage: first, Workers: 4, NewBackOff: noWait}, {Stage: second, Workers: 2, NewBackOff: noWait}}}
		})
		if got := st.places(t); got["done"] != n || len(got) != 1 {
			t.Errorf("places = %v, want %d done", got, n)
		}
		for _, s := range []*funcStage{first, second} {
			if len(s.calls) != n {
				t.Errorf("%s called for %d items, want %d", s.name, len(s.calls), n)
			}
			for id, c := range s.calls {
				if c != 1 {
					t.Errorf("%s called %d times for %s", s.name, c, id)
				}
			}
			if done, dead, lost := totals(sums, s.name); done != n || dead != 0 || lost != 0 {
				t.Errorf("%s: the workers' summaries count %d done, %d dead, %d leases lost; want %d, 0, 0", s.name, done, dead, lost, n)
			}
		}
		for _, s := range sums {
			if s.Stages["first"].Done == 0 {
				t.Errorf("a worker did nothing: %+v", s.Stages["first"])
			}
		}
		if st.fenced != 0 {
			t.Errorf("%d commits fenced off with every lease renewed", st.fenced)
		}
	})
}

// TestFleet_LostLeaseCancelsTheCall: worker a is cut off from the
// database after its first claim, so it cannot renew: it treats each
// lease as gone at claim-sent + lease - 10 s and cancels the call, and
// stops, resumable, once it has failed to claim for StoreRetry and its
// leases have ended; worker b claims the
// entries once the leases have ended on the store's clock and does them,
// each once.
func TestFleet_LostLeaseCancelsTheCall(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		const n, lease = 6, time.Minute
		st := newClaimStore([]string{"only"}, n, clock.Now)
		a, b := st.view("a"), st.view("b")
		var mu sync.Mutex
		cut, felt := false, false
		a.cutOff = func() bool {
			mu.Lock()
			c, first := cut, cut && !felt
			cut, felt = true, felt || c
			mu.Unlock()
			if first {
				// The first request that fails comes a second after the
				// claim, once both calls have started: a worker that
				// knows its store is away starts none.
				_ = clock.sleep(context.Background(), time.Second)
			}
			return c
		}
		var canceledAfter []time.Duration
		hangs := &funcStage{name: "only", fn: func(ctx context.Context, it pipeline.Item, _ int) (pipeline.Result, error) {
			start := clock.Now()
			<-ctx.Done()
			mu.Lock()
			canceledAfter = append(canceledAfter, clock.Now().Sub(start))
			mu.Unlock()
			return pipeline.Result{}, ctx.Err()
		}}
		quick := &funcStage{name: "only", fn: ok}
		bStarted := make(chan struct{})
		var sums []pipeline.RunSummary
		var sa pipeline.RunSummary
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &pipeline.Runner{Store: a, Clock: clock, Lease: lease, Stages: []pipeline.StageConfig{{Stage: hangs, Workers: 2}}}
			var err error
			sa, err = r.Run(context.Background())
			if !errors.Is(err, pipeline.ErrStopped) || !strings.Contains(err.Error(), "could not claim work of only") {
				t.Errorf("worker a cut off from the store ended with %v, want a resumable stop saying it could not claim", err)
			}
		}()
		// b joins once a has claimed.
		go func() { _ = clock.sleep(context.Background(), time.Second); close(bStarted) }()
		<-bStarted
		sums = fleet(t, []*claimView{b}, func(v *claimView) *pipeline.Runner {
			return &pipeline.Runner{Store: v, Clock: clock, Lease: lease, Stages: []pipeline.StageConfig{{Stage: quick, Workers: 1}}}
		})
		wg.Wait()
		if got := st.places(t); got["done"] != n {
			t.Errorf("places = %v, want %d done; dead letters %v", got, n, st.deadLetters(t, "only"))
		}
		for id, c := range quick.calls {
			if c != 1 {
				t.Errorf("b called %s %d times", id, c)
			}
		}
		if len(canceledAfter) != 2 {
			t.Fatalf("a's calls canceled %d times, want its first 2 claims", len(canceledAfter))
		}
		for _, d := range canceledAfter {
			if d != lease-10*time.Second {
				t.Errorf("a's call canceled %s after it started, want lease - 10 s = %s", d, lease-10*time.Second)
			}
		}
		lost := sa.Stages["only"].LeasesLost
		if lost != 2 || sa.Stages["only"].Done != 0 || sa.Stages["only"].Calls != int64(len(canceledAfter)) {
			t.Errorf("a: %d leases lost, %d done, %d calls; want at least %d lost (one per canceled call), 0 done, no call on a lost lease",
				lost, sa.Stages["only"].Done, sa.Stages["only"].Calls, len(canceledAfter))
		}
		if done, _, _ := totals(sums, "only"); done != n {
			t.Errorf("b did %d, want %d", done, n)
		}
	})
}

// TestFleet_RenewKeepsSlowCallsAlive: a call five leases long keeps its
// lease by heartbeat; a second worker never gets the entry.
func TestFleet_RenewKeepsSlowCallsAlive(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		const lease = time.Minute
		st := newClaimStore([]string{"only"}, 1, clock.Now)
		stage := &funcStage{name: "only", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			if err := clock.sleep(ctx, 5*lease); err != nil {
				return pipeline.Result{}, err
			}
			return ok(ctx, it, n)
		}}
		sums := fleet(t, []*claimView{st.view("a"), st.view("b")}, func(v *claimView) *pipeline.Runner {
			return &pipeline.Runner{Store: v, Clock: clock, Lease: lease, Stages: []pipeline.StageConfig{{Stage: stage, Workers: 1}}}
		})
		if c := stage.calls["i0000"]; c != 1 {
			t.Errorf("the slow item was called %d times, want 1", c)
		}
		if done, _, lost := totals(sums, "only"); done != 1 || lost != 0 {
			t.Errorf("%d done, %d leases lost; want 1, 0", done, lost)
		}
		if got := clock.Since(); got < 5*lease {
			t.Errorf("the run ended at +%s, before the call could", got)
		}
	})
}

// TestFleet_FencedCommitIsNotAnError: while a's call runs, its entry's
// lease ends on the store and someone else claims it (a's renewals would
// learn it only at the next beat): a's result is fenced off, counted as a
// lost lease, and the run goes on to do the item once the other claim
// lapses.
func TestFleet_FencedCommitIsNotAnError(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		st := newClaimStore([]string{"only"}, 1, clock.Now)
		stage := &funcStage{name: "only", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			if n == 1 {
				// Another worker steals the entry meanwhile.
				st.mu.Lock()
				for seq := range st.attempt {
					st.attempt[seq]++
					st.until[seq] = clock.Now().Add(30 * time.Second)
				}
				st.mu.Unlock()
			}
			if err := clock.sleep(ctx, time.Second); err != nil {
				return pipeline.Result{}, err
			}
			return ok(ctx, it, n)
		}}
		r := &pipeline.Runner{Store: st.view("a"), Clock: clock, Lease: 10 * time.Minute, Stages: []pipeline.StageConfig{{Stage: stage, Workers: 1}}}
		sum, err := r.Run(context.Background())
		if err != nil {
			t.Fatalf("a fenced-off commit failed the run: %v", err)
		}
		s := sum.Stages["only"]
		if st.fenced != 1 || s.LeasesLost != 1 || s.Done != 1 || stage.calls["i0000"] != 2 {
			t.Errorf("fenced %d, leases lost %d, done %d, calls %d; want 1, 1, 1, 2", st.fenced, s.LeasesLost, s.Done, stage.calls["i0000"])
		}
		if got := st.places(t); got["done"] != 1 {
			t.Errorf("places = %v", got)
		}
	})
}

// TestFleet_ClaimBudgetDeadLetters: an entry claimed MaxClaims times
// already (its workers died each time) is dead-lettered without a call.
func TestFleet_ClaimBudgetDeadLetters(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		st := newClaimStore([]string{"only"}, 3, clock.Now)
		for seq, id := range st.todo["only"] {
			if id == "i0001" {
				st.attempt[seq] = 4
			}
		}
		stage := &funcStage{name: "only", fn: ok}
		r := &pipeline.Runner{Store: st.view("a"), Clock: clock, MaxClaims: 4, Stages: []pipeline.StageConfig{{Stage: stage, Workers: 2}}}
		sum, err := r.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if stage.calls["i0001"] != 0 || sum.Stages["only"].Dead != 1 || sum.Stages["only"].Done != 2 {
			t.Errorf("calls %v, summary %+v; want i0001 dead-lettered uncalled, 2 done", stage.calls, sum.Stages["only"])
		}
		d := st.deadLetters(t, "only")["i0001"]
		if d.Class != pipeline.ClassPermanent || d.Cause != pipeline.CauseClaimsExhausted || d.Attempts != 5 {
			t.Errorf("dead letter = %+v, want permanent, claims exhausted, after 5 claims", d)
		}
		// The letter is stored: it holds facts, and the CLI words the
		// command when it shows it.
		if !strings.Contains(d.Message, "claimed 5 times") || strings.Contains(d.Message, "sawtooth") || strings.Contains(d.Message, "--") {
			t.Errorf("message %q: want the facts, no command", d.Message)
		}
	})
}

// TestFleet_CommitFailureStopsResumably: a fleet worker whose commits
// fail (the database gone for writes, claims and renewals still
// answered) stops with ErrStopped, not a fatal error, within StoreRetry
// and a lease: it renews no lease once it gave the store up, and never
// tries a commit past a lease's end. Its items stay queued, leased until
// their leases end.
func TestFleet_CommitFailureStopsResumably(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		const lease = time.Minute
		st := newClaimStore([]string{"only"}, 4, clock.Now)
		st.failOn = 1
		r := &pipeline.Runner{Store: st.view("a"), Clock: clock, Lease: lease, Stages: []pipeline.StageConfig{{Stage: &funcStage{name: "only", fn: ok}, Workers: 2}}}
		sum, err := r.Run(context.Background())
		var fe *pipeline.FatalError
		if !errors.Is(err, pipeline.ErrStopped) || errors.As(err, &fe) || !strings.Contains(err.Error(), "could not commit") {
			t.Fatalf("Run = %v, want a resumable stop saying the commit failed", err)
		}
		// The worker starts no call once its store failed, so how many of
		// the 4 were called before the first commit failed depends on the
		// schedule; each answer bought and not committed is a lease given
		// up, the others are left queued uncalled.
		if got := sum.Stages["only"]; sum.Status != "stopped" || got.LeasesLost < 1 || got.LeasesLost != got.Calls {
			t.Errorf("status %q, leases lost %d of %d calls; want stopped, every uncommitted answer's lease lost", sum.Status, got.LeasesLost, got.Calls)
		}
		if bound := pipeline.DefaultStoreRetry + time.Second + lease; clock.Since() > bound {
			t.Errorf("stopped at +%s, later than StoreRetry + a poll + a lease (%s)", clock.Since(), bound)
		}
		if st.late != 0 {
			t.Errorf("%d results sent for commit past their lease's end", st.late)
		}
		if got := st.places(t); got["only/queued"] != 4 {
			t.Errorf("places = %v, want all 4 still queued", got)
		}
	})
}

// TestFleet_ParkedStageEndsTheRun: when the API stage parks (its
// endpoint unreachable), the later stage does not wait for the items
// queued before it: the run stops, resumable.
func TestFleet_ParkedStageEndsTheRun(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		st := newClaimStore([]string{"api", "last"}, 5, clock.Now)
		down := func(context.Context, pipeline.Item, int) (pipeline.Result, error) {
			return pipeline.Result{}, pipeline.Unavailable(errors.New("connection refused"))
		}
		r := &pipeline.Runner{Store: st.view("a"), Clock: clock, Stages: []pipeline.StageConfig{
			{Stage: &funcStage{name: "api", fn: down}, Workers: 2, Limiter: &fakeLimiter{}, MaxOutage: time.Second, NewBackOff: every(100 * time.Millisecond)},
			{Stage: &funcStage{name: "last", fn: ok}, Workers: 1}}}
		_, err := r.Run(context.Background())
		if !errors.Is(err, pipeline.ErrStopped) {
			t.Fatalf("Run = %v, want a resumable stop", err)
		}
		if got := st.places(t); got["api/queued"] != 5 {
			t.Errorf("places = %v, want all 5 queued at api", got)
		}
	})
}

// TestFleet_ClaimSize: a stage claims a pool's worth at first; once its
// calls are measured, a stage whose calls are quicker than a claim's
// round trip claims what its workers get through in one round trip (up
// to 256), and a stage of slow calls keeps claiming a pool's worth, so
// that no entry waits in one worker while another idles.
func TestFleet_ClaimSize(t *testing.T) {
	tests := []struct {
		name      string
		call      time.Duration
		roundTrip time.Duration
		want      int // the size of the claims once calls are measured
	}{
		{"instant calls", 0, 10 * time.Millisecond, pipeline.DefaultFetch},
		{"calls of 1 ms, claims of 10 ms", time.Millisecond, 10 * time.Millisecond, 8 * 10},
		{"calls of 1 s", time.Second, 10 * time.Millisecond, 8},
		{"claims that take no time", time.Millisecond, 0, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
				const n = 1000
				st := newClaimStore([]string{"only"}, n, clock.Now)
				v := st.view("a")
				v.roundTrip, v.sleep = tt.roundTrip, clock.sleep
				stage := &funcStage{name: "only", fn: func(ctx context.Context, it pipeline.Item, call int) (pipeline.Result, error) {
					if err := clock.sleep(ctx, tt.call); err != nil {
						return pipeline.Result{}, err
					}
					return ok(ctx, it, call)
				}}
				fleet(t, []*claimView{v}, func(v *claimView) *pipeline.Runner {
					return &pipeline.Runner{Store: v, Clock: clock, Lease: time.Minute, Stages: []pipeline.StageConfig{{Stage: stage, Workers: 8}}}
				})
				if got := st.places(t); got["done"] != n {
					t.Fatalf("places = %v, want %d done", got, n)
				}
				// The first claim comes before any call has ended, the
				// second as the workers take the first (before or after
				// the first call ends); the last ones find the queue dry:
				// look at those between.
				if len(v.asked) < 4 || v.asked[0] != 8 || (v.asked[1] != 8 && v.asked[1] != tt.want) {
					t.Fatalf("claims asked for %v: want a pool's worth (8) first, then more claims", v.asked)
				}
				for _, got := range v.asked[2 : len(v.asked)/2+1] {
					if got != tt.want {
						t.Fatalf("claims asked for %v: want %d after the first", v.asked, tt.want)
					}
				}
			})
		})
	}
}

// TestFleet_EndsSoonAfterTheLastEntry: a worker that finds its stage's
// queue empty while another worker still holds entries looks again soon
// (10 ms, then twice as long each time), not only every Poll: it ends
// within about as long as the other worker needed, where a look every
// Poll would have kept it running up to Poll after the last commit.
func TestFleet_EndsSoonAfterTheLastEntry(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		const n, poll = 4, 30 * time.Second
		st := newClaimStore([]string{"only"}, n, clock.Now)
		a, b := st.view("a"), st.view("b")
		slow := &funcStage{name: "only", fn: func(ctx context.Context, it pipeline.Item, call int) (pipeline.Result, error) {
			if err := clock.sleep(ctx, time.Second); err != nil {
				return pipeline.Result{}, err
			}
			return ok(ctx, it, call)
		}}
		var bEnded time.Duration
		var wg sync.WaitGroup
		wg.Go(func() {
			r := &pipeline.Runner{Store: a, Clock: clock, Lease: time.Minute, Poll: poll, Stages: []pipeline.StageConfig{{Stage: slow, Workers: n}}}
			if _, err := r.Run(context.Background()); err != nil {
				t.Errorf("worker a: %v", err)
			}
		})
		wg.Go(func() {
			// b joins once a has claimed every entry.
			if err := clock.sleep(context.Background(), 100*time.Millisecond); err != nil {
				t.Error(err)
				return
			}
			r := &pipeline.Runner{Store: b, Clock: clock, Lease: time.Minute, Poll: poll, Stages: []pipeline.StageConfig{{Stage: slow, Workers: 1}}}
			sum, err := r.Run(context.Background())
			if err != nil {
				t.Errorf("worker b: %v", err)
			}
			if sum.Stages["only"].Done != 0 {
				t.Errorf("b did %d entries, want none (a held them all)", sum.Stages["only"].Done)
			}
			bEnded = clock.Since()
		})
		wg.Wait()
		if got := st.places(t); got["done"] != n {
			t.Fatalf("places = %v, want %d done", got, n)
		}
		// a's calls end at 1 s; b's looks come at 0.11, 0.13, 0.17,
		// 0.25, 0.41, 0.73 and 1.37 s.
		if bEnded < time.Second || bEnded > 2*time.Second {
			t.Errorf("b ended at +%s, want soon after a's last commit at +1s (Poll is %s)", bEnded, poll)
		}
	})
}
