package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"go.uber.org/goleak"
)

// TestMain runs the child process of TestLibrary_KillAndResume when asked
// to, and otherwise the tests under goleak. The genai client (the example
// and the library test wire the classify stage) starts an opencensus worker
// at init that never stops.
func TestMain(m *testing.M) {
	if os.Getenv(libraryChildEnv) != "" {
		os.Exit(libraryChild())
	}
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

func TestRunner_Run(t *testing.T) {
	permanentFor := func(id string) func(context.Context, pipeline.Item, int) (pipeline.Result, error) {
		return func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			if it.ID == id {
				return pipeline.Result{}, pipeline.Permanentf("empty text")
			}
			return ok(ctx, it, n)
		}
	}
	causedFor := func(id string) func(context.Context, pipeline.Item, int) (pipeline.Result, error) {
		return func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			if it.ID == id {
				return pipeline.Result{}, pipeline.Permanent(causedError{"cut off at 8 tokens", "output-budget"})
			}
			return ok(ctx, it, n)
		}
	}
	flaky := func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		if n < 3 {
			return pipeline.Result{}, errors.New("503 overloaded")
		}
		return ok(ctx, it, n)
	}
	alwaysFails := func(context.Context, pipeline.Item, int) (pipeline.Result, error) {
		return pipeline.Result{}, errors.New("500 internal")
	}
	panics := func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		if it.ID == "i0003" {
			panic("boom")
		}
		return ok(ctx, it, n)
	}
	tests := []struct {
		name      string
		first     func(context.Context, pipeline.Item, int) (pipeline.Result, error)
		second    func(context.Context, pipeline.Item, int) (pipeline.Result, error)
		wantWhere map[string]int
		wantCalls int // calls at the second stage
		// wantDead is what every dead letter at a stage must say: its
		// class, attempts and a part of its message.
		wantDead map[string]pipeline.DeadLetter
	}{
		{"all succeed", ok, ok, map[string]int{"done": 50}, 50, nil},
		{"permanent dead-letters at once", permanentFor("i0007"), ok, map[string]int{"done": 49, "first/dead": 1}, 49,
			map[string]pipeline.DeadLetter{"first": {Class: pipeline.ClassPermanent, Attempts: 1, Message: "empty text"}}},
		{"a stage's cause is stored beside its message", causedFor("i0007"), ok, map[string]int{"done": 49, "first/dead": 1}, 49,
			map[string]pipeline.DeadLetter{"first": {Class: pipeline.ClassPermanent, Attempts: 1, Message: "cut off at 8 tokens", Cause: "output-budget"}}},
		{"transient retried in place", ok, flaky, map[string]int{"done": 50}, 150, nil},
		{"transient budget spent", ok, alwaysFails, map[string]int{"second/dead": 50}, 200,
			map[string]pipeline.DeadLetter{"second": {Class: pipeline.ClassTransient, Attempts: 4, Message: "gave up after 4 attempts: 500 internal"}}},
		{"panic is permanent for that item", panics, ok, map[string]int{"done": 49, "first/dead": 1}, 49,
			map[string]pipeline.DeadLetter{"first": {Class: pipeline.ClassPermanent, Attempts: 1, Message: `stage first panicked on item "i0003": boom`}}},
	}
	for _, tc := range tests {
		for _, backend := range []string{"memory", "claims", "bbolt"} {
			t.Run(tc.name+" on "+backend, func(t *testing.T) {
				st := openTestStore(t, backend, []string{"first", "second"}, 50)
				second := &funcStage{name: "second", fn: tc.second}
				r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{
					{Stage: &funcStage{name: "first", fn: tc.first}, Workers: 4, NewBackOff: noWait},
					{Stage: second, Workers: 3, MaxAttempts: 4, NewBackOff: noWait},
				}}
				sum, err := r.Run(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if got := st.places(t); fmt.Sprint(got) != fmt.Sprint(tc.wantWhere) {
					t.Errorf("where = %v, want %v", got, tc.wantWhere)
				}
				total := 0
				for _, n := range second.calls {
					total += n
				}
				if total != tc.wantCalls || sum.Stages["second"].Calls != int64(tc.wantCalls) {
					t.Errorf("second-stage calls = %d (summary %d), want %d", total, sum.Stages["second"].Calls, tc.wantCalls)
				}
				if sum.Status != "complete" {
					t.Errorf("status = %q", sum.Status)
				}
				for _, stage := range []string{"first", "second"} {
					want := tc.wantWhere[stage+"/dead"]
					dead := st.deadLetters(t, stage)
					if got := len(dead); got != want || sum.Stages[stage].Dead != int64(want) {
						t.Errorf("%s: %d dead letters (summary %d), want %d", stage, got, sum.Stages[stage].Dead, want)
					}
					for id, d := range dead {
						w := tc.wantDead[stage]
						if d.Class != w.Class || d.Cause != w.Cause || d.Attempts != w.Attempts || !strings.Contains(d.Message, w.Message) || d.First.IsZero() || d.Last.Before(d.First) {
							t.Errorf("%s dead letter of %s = %+v, want %+v", stage, id, d, w)
						}
					}
				}
			})
		}
	}
}

// causedError is a stage's error that says why its item fails
// (pipeline.DeadCauser).
type causedError struct {
	msg   string
	cause pipeline.DeadCause
}

func (e causedError) Error() string                 { return e.msg }
func (e causedError) DeadCause() pipeline.DeadCause { return e.cause }

func TestRunner_RateLimitedSpendsNoAttempt(t *testing.T) {
	st := newMemStore([]string{"api"}, 20)
	lim := &fakeLimiter{}
	api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		if n <= 3 {
			return pipeline.Result{}, pipeline.RateLimited(errors.New("429"), time.Millisecond, false)
		}
		return ok(ctx, it, n)
	}}
	r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Workers: 4, Limiter: lim, MaxAttempts: 1, NewBackOff: noWait}}}
	sum, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.tally()["done"] != 20 {
		t.Fatalf("where = %v", st.tally())
	}
	if lim.limited != 60 || lim.succeeded != 20 || lim.inFlight != 0 || lim.retryAfter[0] != time.Millisecond {
		t.Fatalf("limiter saw %+v", lim)
	}
	if s := sum.Stages["api"]; s.RateLimited != 60 || s.Attempts != 20 || s.Calls != 80 || s.Transient != 0 || s.Unavailable != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

// TestRunner_BareRateLimitBacksOff: a 429 without a retryDelay waits a
// backoff step even when a limiter gates the calls, so a quota that comes
// back after 5 s costs a few refusals, not 200 back-to-back calls and a
// "quota exhausted" stop.
func TestRunner_BareRateLimitBacksOff(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		st := newMemStore([]string{"api"}, 8)
		lim := &fakeLimiter{}
		api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			if clock.Since() < 5*time.Second {
				return pipeline.Result{}, pipeline.RateLimited(errors.New("429 RESOURCE_EXHAUSTED"), 0, false)
			}
			return ok(ctx, it, n)
		}}
		// The default schedule: 1 s, doubling, jitter ±50%.
		r := &pipeline.Runner{Store: st, Clock: clock, Stages: []pipeline.StageConfig{{Stage: api, Workers: 8, Limiter: lim}}}
		sum, err := r.Run(context.Background())
		if err != nil {
			t.Fatalf("err = %v, want the run to wait out the refusals", err)
		}
		s := sum.Stages["api"]
		// Each item waits at least 0.5, 1, 2, 4 s: at most 4 refusals
		// each before 5 s have passed.
		if st.tally()["done"] != 8 || s.RateLimited < 8 || s.RateLimited > 4*8 {
			t.Fatalf("where = %v, %d refusals, want each item done after 1 to 4", st.tally(), s.RateLimited)
		}
		if clock.Since() < 5*time.Second {
			t.Fatalf("finished at +%s, before the quota came back", clock.Since())
		}
	})
}

// TestRunner_Parks: each way a stage parks does so at the right virtual
// instant, after the right number of calls, with a message that says why;
// its items stay queued and the upstream stage drains.
func TestRunner_Parks(t *testing.T) {
	refused := func(after time.Duration, daily bool) func(context.Context, pipeline.Item, int) (pipeline.Result, error) {
		return func(context.Context, pipeline.Item, int) (pipeline.Result, error) {
			return pipeline.Result{}, pipeline.RateLimited(errors.New("429 RESOURCE_EXHAUSTED"), after, daily)
		}
	}
	unreachable := func(context.Context, pipeline.Item, int) (pipeline.Result, error) {
		return pipeline.Result{}, pipeline.Unavailable(errors.New("dial tcp: connection refused"))
	}
	var once atomic.Bool
	firstOKThenUnreachable := func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		if once.CompareAndSwap(false, true) {
			return ok(ctx, it, n)
		}
		return unreachable(ctx, it, n)
	}
	tests := []struct {
		name      string
		fn        func(context.Context, pipeline.Item, int) (pipeline.Result, error)
		wantAt    time.Duration // virtual time of the park
		wantCalls int64
		wantDone  int
		wantMsg   string
	}{
		{"daily 429 parks after one refusal", refused(26*time.Second, true), 0, 1, 0,
			"daily quota exhausted for api; resume after "},
		{"retryDelay beyond --max-wait parks after one refusal", refused(3*time.Minute, false), 0, 1, 0,
			"quota exhausted for api (the server asks to wait 3m0s, more than the 2m0s the stage waits); resume after " + epoch.Add(3*time.Minute).Local().Format(time.RFC3339)},
		// One call a second (the backoff step): the call at +30 s parks.
		{"unreachable before any answer parks at 30 s", unreachable, 30 * time.Second, 31, 0,
			"api cannot reach its endpoint: unreachable for 30s since " + epoch.Local().Format(time.TimeOnly) + " (limit 30s, before any answer in this run"},
		{"unreachable after a success parks at 5 min", firstOKThenUnreachable, 5 * time.Minute, 302, 1,
			"api cannot reach its endpoint: unreachable for 5m0s since " + epoch.Local().Format(time.TimeOnly) + " (limit 5m0s; last: dial tcp"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			once.Store(false)
			inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
				st := newMemStore([]string{"pre", "api"}, 30)
				lim := &fakeLimiter{}
				r := &pipeline.Runner{Store: st, Clock: clock, Stages: []pipeline.StageConfig{
					{Stage: &funcStage{name: "pre", fn: ok}, Workers: 2},
					{Stage: &funcStage{name: "api", fn: tc.fn}, Workers: 1, Limiter: lim, NewBackOff: every(time.Second)},
				}}
				sum, err := r.Run(context.Background())
				if !errors.Is(err, pipeline.ErrStopped) {
					t.Fatalf("err = %v, want ErrStopped", err)
				}
				if sum.Status != "stopped" || !strings.Contains(sum.Message, tc.wantMsg) {
					t.Errorf("summary %s: %q, want it to contain %q", sum.Status, sum.Message, tc.wantMsg)
				}
				if at := sum.Ended.Sub(sum.Started); at != tc.wantAt {
					t.Errorf("parked at +%s, want +%s", at, tc.wantAt)
				}
				if s := sum.Stages["api"]; s.Calls != tc.wantCalls || s.Dead != 0 {
					t.Errorf("api: %d calls, %d dead, want %d calls and none dead", s.Calls, s.Dead, tc.wantCalls)
				}
				if w := st.tally(); w["done"] != tc.wantDone || w["api/queued"] != 30-tc.wantDone {
					t.Errorf("where = %v: the upstream stage drains, the parked one keeps its items", w)
				}
			})
		})
	}
}

// TestRunner_RefusalsEndAnOutage: minutes of 429s show the endpoint is
// there, so one refused connection after them waits instead of parking
// on an outage clock started before the 429s.
func TestRunner_RefusalsEndAnOutage(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		st := newMemStore([]string{"api"}, 1)
		api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			switch {
			case n == 1 || n == 302:
				return pipeline.Result{}, pipeline.Unavailable(errors.New("dial tcp: connection refused"))
			case n <= 301: // five minutes of 429s, one a second
				return pipeline.Result{}, pipeline.RateLimited(errors.New("429"), 0, false)
			}
			return ok(ctx, it, n)
		}}
		r := &pipeline.Runner{Store: st, Clock: clock, Stages: []pipeline.StageConfig{
			{Stage: api, Workers: 1, MaxRateLimited: 1000, MaxRefused: time.Hour, NewBackOff: every(time.Second)},
		}}
		sum, err := r.Run(context.Background())
		if err != nil || st.tally()["done"] != 1 {
			t.Fatalf("err = %v, where = %v", err, st.tally())
		}
		if s := sum.Stages["api"]; s.Unavailable != 2 || s.RateLimited != 300 || s.Transient != 0 {
			t.Fatalf("stats = %+v", s)
		}
	})
}

// TestRunner_OutageClockRace: 64 workers, every item refused a connection
// once and then answered, so successes reset the outage clock while other
// workers start and read it. No interleaving may park the stage.
func TestRunner_OutageClockRace(t *testing.T) {
	const items = 3000
	st := newMemStore([]string{"api"}, items)
	api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		if n == 1 {
			return pipeline.Result{}, pipeline.Unavailable(errors.New("dial tcp: connection refused"))
		}
		return ok(ctx, it, n)
	}}
	r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Workers: 64, NewBackOff: noWait}}}
	sum, err := r.Run(context.Background())
	if err != nil {
		t.Fatalf("err = %v: an endpoint answering half the calls must not park", err)
	}
	if s := sum.Stages["api"]; s.Done != items || s.Unavailable != items || s.Calls != 2*items {
		t.Fatalf("stats = %+v", s)
	}
}

func TestRunner_FatalStopsWithoutDeadLetters(t *testing.T) {
	st := newMemStore([]string{"api"}, 40)
	api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		if it.ID >= "i0010" {
			return pipeline.Result{}, pipeline.Fatal(errors.New("API key not valid"))
		}
		return ok(ctx, it, n)
	}}
	r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Workers: 1}}}
	sum, err := r.Run(context.Background())
	var fe *pipeline.FatalError
	if !errors.As(err, &fe) || fe.DeadLettered != 0 || !strings.Contains(err.Error(), "api: API key not valid") {
		t.Fatalf("err = %v, want fatal", err)
	}
	w := st.tally()
	if w["api/dead"] != 0 || w["done"] != 10 || w["api/queued"] != 30 {
		t.Fatalf("where = %v", w)
	}
	if sum.Status != "failed" || sum.Stages["api"].Done != 10 || sum.Stages["api"].Dead != 0 {
		t.Fatalf("summary = %+v %+v", sum, sum.Stages["api"])
	}
}

// TestRunner_CommitFailureIsFatal: a store that fails every commit stops
// the run after CommitAttempts tries; no outcome is counted, no item moves.
func TestRunner_CommitFailureIsFatal(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		st := newMemStore([]string{"a"}, 100)
		st.failOn = 1
		// Half the items are dead-lettered, half succeed: neither may be
		// counted.
		a := &funcStage{name: "a", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			if it.ID[len(it.ID)-1]%2 == 0 {
				return pipeline.Result{}, pipeline.Permanentf("bad row")
			}
			return ok(ctx, it, n)
		}}
		r := &pipeline.Runner{Store: st, Clock: clock, Stages: []pipeline.StageConfig{{Stage: a, Workers: 2}}}
		sum, err := r.Run(context.Background())
		if err == nil || pipeline.ClassOf(context.Background(), err) != pipeline.ClassFatal || !strings.Contains(err.Error(), "disk full") {
			t.Fatalf("err = %v", err)
		}
		if st.tally()["a/queued"] != 100 {
			t.Fatalf("items lost: %v", st.tally())
		}
		s := sum.Stages["a"]
		if s.Done != 0 || s.Dead != 0 || len(s.DeadReasons) != 0 || s.Calls == 0 {
			t.Fatalf("summary counts outcomes that were never committed: %+v", s)
		}
		if sum.Status != "failed" {
			t.Fatalf("status = %q", sum.Status)
		}
		// The first batch was tried three times, 1 s then 2 s apart.
		if st.commits < pipeline.DefaultCommitAttempts || clock.Since() < 3*time.Second {
			t.Fatalf("%d commits by +%s, want the first batch retried", st.commits, clock.Since())
		}
	})
}

// TestRunner_CommitRetried: a commit that fails once and then succeeds
// loses nothing and re-pays nothing.
func TestRunner_CommitRetried(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		st := newMemStore([]string{"a"}, 100)
		st.failOn, st.failFor = 1, 1
		a := &funcStage{name: "a", fn: ok}
		r := &pipeline.Runner{Store: st, Clock: clock, Stages: []pipeline.StageConfig{{Stage: a, Workers: 2}}}
		sum, err := r.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.tally()["done"] != 100 || sum.Stages["a"].Done != 100 || sum.Stages["a"].Calls != 100 {
			t.Fatalf("where = %v, stats %+v", st.tally(), sum.Stages["a"])
		}
	})
}

// TestRunner_FailedCommitKeepsResults: a batch whose commit failed for
// good stops the run but is not dropped: it is tried again with the last
// results, and when the store has recovered by then every answer paid
// for is committed and counted.
func TestRunner_FailedCommitKeepsResults(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		st := newMemStore([]string{"a"}, 100)
		// The first batch fails its three tries (the run stops), the
		// results answered meanwhile fail their one try with it, and the
		// last try at the end succeeds.
		st.failOn, st.failFor = 1, pipeline.DefaultCommitAttempts+1
		a := &funcStage{name: "a", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			if err := clock.sleep(ctx, 10*time.Millisecond); err != nil {
				return pipeline.Result{}, err
			}
			return ok(ctx, it, n)
		}}
		r := &pipeline.Runner{Store: st, Clock: clock, Stages: []pipeline.StageConfig{{Stage: a, Workers: 1}}}
		sum, err := r.Run(context.Background())
		if pipeline.ClassOf(context.Background(), err) != pipeline.ClassFatal {
			t.Fatalf("err = %v, want the run stopped as failed", err)
		}
		answered := 0
		for _, n := range a.calls {
			answered += n
		}
		w := st.tally()
		if st.commits != pipeline.DefaultCommitAttempts+2 {
			t.Errorf("%d commits, want 3 tries of the first batch, one of the next, one last", st.commits)
		}
		if answered == 0 || w["done"] != answered || w["a/queued"] != 100-answered || sum.Stages["a"].Done != int64(answered) {
			t.Fatalf("%d answers, where = %v, summary done %d: every answer must be committed and counted", answered, w, sum.Stages["a"].Done)
		}
	})
}

// TestRunner_UsageTravelsWithTheOutcome: every call's usage, failed
// attempts included, is in the transition that commits the outcome.
func TestRunner_UsageTravelsWithTheOutcome(t *testing.T) {
	st := newMemStore([]string{"api"}, 10)
	api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		paid := pipeline.Result{Usage: pipeline.Usage{PromptTokens: 5, CandidateTokens: 2, TotalTokens: 7}}
		switch {
		case it.ID == "i0009":
			return paid, verdict(errors.New("blocked by the safety filter"))
		case n <= 2:
			return paid, errors.New("answer is not valid JSON")
		}
		return ok(ctx, it, n)
	}}
	r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Workers: 3, NewBackOff: noWait}}}
	sum, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for id, u := range st.usage {
		want := pipeline.Usage{PromptTokens: 10, CandidateTokens: 4, TotalTokens: 24}
		if id == "i0009" {
			want = pipeline.Usage{PromptTokens: 5, CandidateTokens: 2, TotalTokens: 7}
		}
		if u != want {
			t.Errorf("%s: committed usage %+v, want %+v", id, u, want)
		}
	}
	if len(st.usage) != 10 || sum.Stages["api"].Usage.TotalTokens != 9*24+7 {
		t.Fatalf("usage of %d items, summary %+v", len(st.usage), sum.Stages["api"].Usage)
	}
}

// TestRunner_CancelGivesItemsBack: calls that finish within the grace
// period are committed; the rest stay queued, and a resume calls every
// item exactly once in all.
func TestRunner_CancelGivesItemsBack(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		st := newMemStore([]string{"slow"}, 200)
		ctx, cancel := context.WithCancel(context.Background())
		var started atomic.Int64
		slow := &funcStage{name: "slow", fn: func(c context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			if started.Add(1) == 20 {
				cancel()
			}
			if err := clock.sleep(c, time.Millisecond); err != nil {
				return pipeline.Result{}, err
			}
			return ok(c, it, n)
		}}
		r := &pipeline.Runner{Store: st, Clock: clock, Grace: time.Second, Stages: []pipeline.StageConfig{{Stage: slow, Workers: 4}}}
		_, err := r.Run(ctx)
		if !errors.Is(err, pipeline.ErrStopped) {
			t.Fatalf("err = %v", err)
		}
		w := st.tally()
		if w["done"] != 20 || w["slow/queued"] != 180 {
			t.Fatalf("where = %v, want the 20 calls started before the stop done", w)
		}
		r2 := &pipeline.Runner{Store: st, Clock: clock, Stages: []pipeline.StageConfig{{Stage: slow, Workers: 4}}}
		if _, err := r2.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if w := st.tally(); w["done"] != 200 {
			t.Fatalf("after resume: %v", w)
		}
		for id, n := range slow.calls {
			if n != 1 {
				t.Errorf("%s processed %d times", id, n)
			}
		}
	})
}

// TestRunner_GraceExpiryKeepsItemsQueued: calls still running when the
// grace period after Ctrl-C ends are canceled at exactly Grace, and their
// items stay queued: no "canceled" dead letter, no attempt spent.
func TestRunner_GraceExpiryKeepsItemsQueued(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		st := newMemStore([]string{"hang"}, 20)
		ctx, cancel := context.WithCancel(context.Background())
		var started atomic.Int64
		hang := &funcStage{name: "hang", fn: func(c context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			if started.Add(1) == 4 {
				cancel()
			}
			<-c.Done()
			return pipeline.Result{}, fmt.Errorf("calling the API: %w", c.Err())
		}}
		r := &pipeline.Runner{Store: st, Clock: clock, Grace: 7 * time.Second, Stages: []pipeline.StageConfig{{Stage: hang, Workers: 4, NewBackOff: noWait}}}
		sum, err := r.Run(ctx)
		if !errors.Is(err, pipeline.ErrStopped) || sum.Message != "interrupted" {
			t.Fatalf("err = %v, summary %q", err, sum.Message)
		}
		if at := sum.Ended.Sub(sum.Started); at != 7*time.Second {
			t.Errorf("in-flight calls canceled at +%s, want +7s", at)
		}
		if w := st.tally(); w["hang/queued"] != 20 || len(st.dead["hang"]) != 0 {
			t.Fatalf("where = %v, dead %v: every item must stay queued", w, st.dead["hang"])
		}
		if s := sum.Stages["hang"]; s.Calls != 4 || s.Dead != 0 || s.Attempts != 0 || s.Transient != 0 {
			t.Fatalf("stats = %+v", s)
		}
	})
}

// TestRunner_UnavailableSpendsNoAttempt: an unreachable endpoint is not
// the item's fault, so a short outage costs waiting, not attempts.
func TestRunner_UnavailableSpendsNoAttempt(t *testing.T) {
	st := newMemStore([]string{"api"}, 10)
	api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		if n <= 4 {
			return pipeline.Result{}, pipeline.Unavailable(errors.New("dial tcp: connection refused"))
		}
		return ok(ctx, it, n)
	}}
	r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Workers: 2, MaxAttempts: 2, NewBackOff: noWait}}}
	sum, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if w := st.tally(); w["done"] != 10 {
		t.Fatalf("where = %v", w)
	}
	if s := sum.Stages["api"]; s.Attempts != 10 || s.Calls != 50 || s.Unavailable != 40 || s.Transient != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

// TestRunner_SamePermanentIsFatal: an API stage whose first calls all fail
// permanently for one reason stops the run instead of dead-lettering every
// item, and says how many it dead-lettered; a stage that has succeeded
// once, or whose failures are verdicts on the items, goes on.
func TestRunner_SamePermanentIsFatal(t *testing.T) {
	badRequest := func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		return pipeline.Result{}, pipeline.Permanentf("item %q: 400 INVALID_ARGUMENT: bad responseSchema", it.ID)
	}
	tests := []struct {
		name      string
		fn        func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error)
		wantFatal bool
		wantDone  int
	}{
		{"no success yet: fatal", badRequest, true, 0},
		{"after a success: dead letters", func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			if it.ID == "i0000" {
				return ok(ctx, it, n)
			}
			return badRequest(ctx, it, n)
		}, false, 1},
		{"safety verdicts are the items' fault", func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			return pipeline.Result{}, verdict(errors.New("classify: blocked by the model's safety filter"))
		}, false, 0},
		{"a billed answer shows the request works", func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			return pipeline.Result{Usage: pipeline.Usage{TotalTokens: 9}}, pipeline.Permanentf("classify: the answer is off-schema")
		}, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := newMemStore([]string{"api"}, 100)
			// One worker, so the first call (i0000) completes first.
			r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: &funcStage{name: "api", fn: tc.fn}, Workers: 1, Limiter: &fakeLimiter{}}}}
			sum, err := r.Run(context.Background())
			w := st.tally()
			if tc.wantFatal {
				var fe *pipeline.FatalError
				var same *pipeline.SameFailureError
				if !errors.As(err, &fe) || !strings.Contains(err.Error(), "failed the same way") ||
					!strings.Contains(err.Error(), "25 items were dead-lettered for it") || fe.DeadLettered != 25 {
					t.Fatalf("err = %v, want fatal", err)
				}
				// The facts, for the CLI to word with its command; the
				// message is stored as the run's and names none.
				if !errors.As(err, &same) || same.Stage != "api" || same.DeadLettered != 25 || same.Calls != 25 ||
					strings.Contains(err.Error(), "sawtooth") || sum.Message != err.Error() {
					t.Fatalf("err = %#v (run message %q), want the facts and no command", same, sum.Message)
				}
				if w["api/dead"] != 25 || w["api/queued"] != 75 || sum.Stages["api"].Dead != 25 {
					t.Fatalf("where = %v", w)
				}
				return
			}
			if err != nil || w["api/dead"] != 100-tc.wantDone || w["done"] != tc.wantDone {
				t.Fatalf("err %v, where = %v", err, w)
			}
		})
	}
}

// listeningLimiter is a fakeLimiter told of the overload hold.
type listeningLimiter struct {
	fakeLimiter
	held, opened atomic.Int64
}

func (l *listeningLimiter) OverloadHeld()   { l.held.Add(1) }
func (l *listeningLimiter) OverloadOpened() { l.opened.Add(1) }

// TestRunner_OverloadHeldNotDeadLettered: a server that answers every
// call "overloaded" (503) for 2 s costs the items waiting, never an
// attempt nor a dead letter (one attempt each is the whole budget here),
// the limiter hears no 429, and the stage's hold keeps the refused calls
// to a few and a probe per backoff step instead of one per waiting item
// per step (about 30 here). The limiter is told when the hold closes and
// opens, as often each.
func TestRunner_OverloadHeldNotDeadLettered(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		const items, overload = 40, 2 * time.Second
		var refused atomic.Int64
		api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			if clock.Since() < overload {
				refused.Add(1)
				return pipeline.Result{}, pipeline.Overloaded(errors.New("503 UNAVAILABLE: The model is overloaded"))
			}
			if err := clock.sleep(ctx, 50*time.Millisecond); err != nil {
				return pipeline.Result{}, err
			}
			return ok(ctx, it, n)
		}}
		st := newMemStore([]string{"api"}, items)
		lim := &listeningLimiter{}
		r := &pipeline.Runner{Store: st, Clock: clock, Stages: []pipeline.StageConfig{{Stage: api, Workers: 4, MaxAttempts: 1, Limiter: lim}}}
		sum, err := r.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if w := st.tally(); w["done"] != items {
			t.Fatalf("where = %v", w)
		}
		s := sum.Stages["api"]
		if s.Attempts != items || s.Calls != items+refused.Load() {
			t.Fatalf("attempts %d calls %d refused %d", s.Attempts, s.Calls, refused.Load())
		}
		if n := refused.Load(); n > 16 {
			t.Errorf("%d calls refused during a %s overload with 4 workers, want at most 16", n, overload)
		}
		if _, limited, _ := lim.counts(); limited != 0 {
			t.Errorf("the limiter heard %d 429s for 503s", limited)
		}
		if held, opened := lim.held.Load(), lim.opened.Load(); held < 1 || opened != held {
			t.Errorf("the limiter was told of %d holds and %d openings, want one or more and as many", held, opened)
		}
		// The hold's last step before the end can overshoot it by up to
		// about half the overload's length; then 40 calls of 50 ms on 4
		// workers take 0.5 s.
		if clock.Since() > 2*overload {
			t.Errorf("drained at +%s, the overload ended at +%s", clock.Since(), overload)
		}
	})
}

// growingLimiter is a fakeLimiter whose limit grows with its successes,
// as slow start's does, up to 300, and that may let 512 in flight.
type growingLimiter struct{ fakeLimiter }

func (l *growingLimiter) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return min(300, 8+2*l.succeeded)
}
func (l *growingLimiter) MostInFlight() int { return 512 }

// TestRunner_PoolGrowsWithTheLimit: a limited stage left without Workers
// starts a pool of a few dozen and grows it as the limit grows, so that
// a limit of 300 has 200 calls in flight at once (a thinking model's
// quota), not the 64 workers it started with.
func TestRunner_PoolGrowsWithTheLimit(t *testing.T) {
	const quick, together = 100, 200
	st := newMemStore([]string{"api"}, 400)
	lim := &growingLimiter{}
	var calls, blocked atomic.Int64
	release := make(chan struct{})
	// The pool never reaching it fails below, after one wait, not a wait
	// per call.
	never, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		if calls.Add(1) <= quick {
			return ok(ctx, it, n)
		}
		if blocked.Add(1) == together {
			close(release)
		}
		select {
		case <-release:
		case <-never.Done():
		}
		return ok(ctx, it, n)
	}}
	r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Limiter: lim, MaxAttempts: 1, NewBackOff: noWait}}}
	if _, err := r.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st.tally()["done"] != 400 {
		t.Fatalf("where = %v", st.tally())
	}
	if lim.peak < together {
		t.Errorf("at most %d calls in flight, want %d: the pool did not grow with the limit", lim.peak, together)
	}
}

// lateLimiter is a fakeLimiter whose limit is 8 until raised, then 300,
// and that may let 1,000 in flight.
type lateLimiter struct {
	fakeLimiter
	raised atomic.Bool
}

func (l *lateLimiter) Limit() int {
	if l.raised.Load() {
		return 300
	}
	return 8
}
func (l *lateLimiter) MostInFlight() int { return 1000 }

// TestRunner_PoolGrowsPastItemsWaitingOnAFlight: workers waiting for an
// identical item's answer hold an item outside the limiter, as a backoff
// does; counted as idle, half a pool waiting on one hot key kept the pool
// from growing, and a limit raised late to 300 never had 100 calls in
// flight.
func TestRunner_PoolGrowsPastItemsWaitingOnAFlight(t *testing.T) {
	const together = 100
	st := newMemStore([]string{"api"}, 600)
	for i := 0; i < 600; i += 2 {
		id := fmt.Sprintf("i%04d", i)
		rec := st.records[id]
		rec.Text = "hot"
		st.records[id] = rec
	}
	lim := &lateLimiter{}
	var blocked atomic.Int64
	release := make(chan struct{})
	never, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	api := &keyedStage{funcStage: funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		lim.raised.Store(true)
		if it.Text != "hot" && blocked.Add(1) == together {
			close(release)
		}
		select {
		case <-release:
		case <-never.Done():
		}
		return ok(ctx, it, n)
	}}}
	r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Limiter: lim, MaxAttempts: 1, NewBackOff: noWait}}}
	if _, err := r.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st.tally()["done"] != 600 {
		t.Fatalf("where = %v", st.tally())
	}
	if never.Err() != nil {
		t.Errorf("never %d calls in flight at once: the pool did not grow past the items waiting on the hot key", together)
	}
}
