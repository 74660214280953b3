package pipeline_test

import (
	"context"
	"errors"
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
