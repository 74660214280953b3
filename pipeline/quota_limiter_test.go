package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// quotaLimiter is a fakeLimiter that also reads the quota a 429 names.
type quotaLimiter struct {
	fakeLimiter
	named [][2]int64 // requests and tokens per minute of each 429
}

func (l *quotaLimiter) RateLimitedQuota(_ time.Time, d time.Duration, rpm, tpm int64) {
	l.done(func() {
		l.limited++
		l.retryAfter = append(l.retryAfter, d)
		l.named = append(l.named, [2]int64{rpm, tpm})
	})
}

// A limiter that reads quotas gets each 429's named budgets, through
// RateLimitedQuota instead of RateLimited.
func TestRunner_QuotaLimiterGetsNamedBudgets(t *testing.T) {
	st := newMemStore([]string{"api"}, 5)
	lim := &quotaLimiter{}
	api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		if n == 1 {
			return pipeline.Result{}, &pipeline.RateLimitedError{Err: errors.New("429"), RetryAfter: time.Millisecond, RequestsPerMinute: 600, TokensPerMinute: 90000}
		}
		return ok(ctx, it, n)
	}}
	r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Workers: 2, Limiter: lim, MaxAttempts: 1, NewBackOff: noWait}}}
	if _, err := r.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if lim.limited != 5 || lim.succeeded != 5 || lim.inFlight != 0 {
		t.Fatalf("limiter saw %d 429s, %d successes, %d in flight; want 5, 5, 0", lim.limited, lim.succeeded, lim.inFlight)
	}
	for i, q := range lim.named {
		if q != [2]int64{600, 90000} || lim.retryAfter[i] != time.Millisecond {
			t.Errorf("429 %d reported %v after %v, want [600 90000] after 1ms", i, q, lim.retryAfter[i])
		}
	}
}

// timeoutLimiter is a fakeLimiter told apart of the calls that ran out
// their own deadline.
type timeoutLimiter struct {
	fakeLimiter
	timedOut int
}

func (l *timeoutLimiter) TimedOut(time.Time) { l.done(func() { l.timedOut++ }) }

// A limiter that reads timeouts hears of a call that ran out its own
// deadline through TimedOut, and of any other failure through Failed; a
// limiter that does not read them hears of both through Failed.
func TestRunner_TimeoutListenerGetsTimedOutCalls(t *testing.T) {
	timedOut := fmt.Errorf("no complete answer within 20s: %w", context.DeadlineExceeded)
	for _, tc := range []struct {
		name         string
		lim          interface{ heard() (timedOut, failed int) }
		wantTimedOut int
		wantFailed   int
	}{
		{"reads timeouts", &timeoutLimiter{}, 5, 5},
		{"does not", &plainLimiter{}, 0, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newMemStore([]string{"api"}, 5)
			api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
				switch n {
				case 1:
					return pipeline.Result{}, timedOut
				case 2:
					return pipeline.Result{}, errors.New("500 internal")
				}
				return ok(ctx, it, n)
			}}
			r := &pipeline.Runner{Store: st, Stages: []pipeline.StageConfig{{Stage: api, Workers: 2, Limiter: tc.lim.(pipeline.Limiter), MaxAttempts: 3, NewBackOff: noWait}}}
			if _, err := r.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			if to, failed := tc.lim.heard(); to != tc.wantTimedOut || failed != tc.wantFailed {
				t.Errorf("limiter heard %d timeouts and %d other failures, want %d and %d", to, failed, tc.wantTimedOut, tc.wantFailed)
			}
		})
	}
}

// plainLimiter is a fakeLimiter with the counts timeoutLimiter has.
type plainLimiter struct{ fakeLimiter }

func (l *plainLimiter) heard() (int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return 0, l.fail
}

func (l *timeoutLimiter) heard() (int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.timedOut, l.fail
}
