package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// TestRunner_CountsEveryRequest: a stage that sends a repair request after
// an unusable answer says so in Result.Calls; the run's calls count every
// request sent, and Paid those billed, so the summary's calls match the
// server's.
func TestRunner_CountsEveryRequest(t *testing.T) {
	u := pipeline.Usage{PromptTokens: 10, CandidateTokens: 5, TotalTokens: 15}
	tests := []struct {
		name           string
		fn             func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error)
		calls, paid    int64
		done, dead, rl int64
		maxRateLimited int
	}{
		{"one request each", func(context.Context, pipeline.Item, int) (pipeline.Result, error) {
			return pipeline.Result{Output: json.RawMessage(`{}`), Usage: u}, nil
		}, 10, 10, 10, 0, 0, 0},
		{"a repair request each", func(context.Context, pipeline.Item, int) (pipeline.Result, error) {
			return pipeline.Result{Output: json.RawMessage(`{}`), Usage: u.Add(u), Calls: 2, BilledCalls: 2}, nil
		}, 20, 20, 10, 0, 0, 0},
		{"a repair request refused, then one request", func(_ context.Context, _ pipeline.Item, n int) (pipeline.Result, error) {
			if n == 1 {
				return pipeline.Result{Usage: u, Calls: 2, BilledCalls: 1}, pipeline.RateLimited(errors.New("429"), 0, false)
			}
			return pipeline.Result{Output: json.RawMessage(`{}`), Usage: u}, nil
		}, 30, 20, 10, 0, 10, 1000},
		{"unbilled failures", func(context.Context, pipeline.Item, int) (pipeline.Result, error) {
			return pipeline.Result{}, pipeline.Permanentf("bad request")
		}, 10, 0, 0, 10, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := newMemStore([]string{"api"}, 10)
			api := &funcStage{name: "api", fn: tc.fn}
			r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Workers: 2, MaxRateLimited: tc.maxRateLimited, NewBackOff: noWait}}}
			sum, err := r.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			s := sum.Stages["api"]
			if s.Calls != tc.calls || s.Paid != tc.paid || s.Done != tc.done || s.Dead != tc.dead || s.RateLimited != tc.rl {
				t.Errorf("calls %d paid %d done %d dead %d 429s %d; want %d, %d, %d, %d, %d", s.Calls, s.Paid, s.Done, s.Dead, s.RateLimited, tc.calls, tc.paid, tc.done, tc.dead, tc.rl)
			}
		})
	}
}

// badAnswer is a stage's unusable answer (no candidates, say), marked as
// stages marks it: found by its AnswerFault method.
type badAnswer struct{ error }

func (badAnswer) AnswerFault() bool { return true }

var _ pipeline.AnswerFault = badAnswer{}

// TestRunner_BadAnswersAreNot5xx: an answer with nothing usable in it is
// retried as transient, and counted as a bad answer, not with the 5xx and
// timeouts.
func TestRunner_BadAnswersAreNot5xx(t *testing.T) {
	st := newMemStore([]string{"api"}, 10)
	api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		switch n {
		case 1:
			return pipeline.Result{}, fmt.Errorf("item %s: %w", it.ID, badAnswer{errors.New("the model returned no candidates and no block reason")})
		case 2:
			return pipeline.Result{}, errors.New("server error (500 INTERNAL)")
		}
		return ok(ctx, it, n)
	}}
	r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Workers: 2, NewBackOff: noWait}}}
	sum, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s := sum.Stages["api"]; s.Done != 10 || s.Calls != 30 || s.BadAnswers != 10 || s.Transient != 10 || sum.Totals().BadAnswers != 10 {
		t.Errorf("done %d calls %d bad answers %d (total %d) 5xx %d; want 10, 30, 10, 10, 10", s.Done, s.Calls, s.BadAnswers, sum.Totals().BadAnswers, s.Transient)
	}
}

// steppingLimiter admits every call; its limit is 16 for the first 8
// calls, then 2, as a slow start's peak that a 429 cuts within a second.
type steppingLimiter struct {
	fakeLimiter
	acquired atomic.Int64
}

func (l *steppingLimiter) Acquire(ctx context.Context) (time.Time, error) {
	l.acquired.Add(1)
	return l.fakeLimiter.Acquire(ctx)
}

func (l *steppingLimiter) Limit() int {
	if l.acquired.Load() <= 8 {
		return 16
	}
	return 2
}

// TestRunner_InFlightAndLimitAsTheyWere: the summary's figures are what
// happened, not what a once-a-second sample saw: the most calls in flight
// at once, counted at each start, and the limit's whole range, though it
// fell within the first second.
func TestRunner_InFlightAndLimitAsTheyWere(t *testing.T) {
	inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
		const first = 8
		st := newMemStore([]string{"api"}, 40)
		var (
			started atomic.Int64
			all     = make(chan struct{})
		)
		api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
			// The first 8 calls are all in flight at once.
			switch s := started.Add(1); {
			case s < first:
				<-all
			case s == first:
				close(all)
			}
			return ok(ctx, it, n)
		}}
		lim := &steppingLimiter{}
		r := &pipeline.Runner{Store: st, Clock: clock, Stages: []pipeline.StageConfig{{Stage: api, Workers: first, Limiter: lim, NewBackOff: noWait}}}
		sum, err := r.Run(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s := sum.Stages["api"]; s.InFlightMax != first || s.LimitMax != 16 || s.LimitMin != 2 || s.LimitEnd != 2 {
			t.Errorf("in flight at most %d, limit %d..%d ended at %d; want %d, 2..16 ended at 2", s.InFlightMax, s.LimitMin, s.LimitMax, s.LimitEnd, first)
		}
	})
}
