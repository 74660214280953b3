package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

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
