package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// weightedLimiter is a fakeLimiter that also takes each call's size.
type weightedLimiter struct {
	fakeLimiter
	sizes []int64 // of each AcquireWeighted, in order
	plain int     // Acquire calls
}

func (l *weightedLimiter) Acquire(ctx context.Context) (time.Time, error) {
	l.mu.Lock()
	l.plain++
	l.mu.Unlock()
	return l.fakeLimiter.Acquire(ctx)
}

func (l *weightedLimiter) AcquireWeighted(ctx context.Context, size int64) (time.Time, error) {
	started, err := l.fakeLimiter.Acquire(ctx)
	if err == nil {
		l.mu.Lock()
		l.sizes = append(l.sizes, size)
		l.mu.Unlock()
	}
	return started, err
}

// estimatingStage is a funcStage that estimates its input: three per
// rune of the item's text.
type estimatingStage struct{ *funcStage }

func (s estimatingStage) EstimateInput(it pipeline.Item) int64 {
	return 3 * int64(utf8.RuneCountInString(it.Text))
}
func (s estimatingStage) MaxOutputTokens() int64 { return 16 }

// A limiter that takes call sizes acquires every call, retries included,
// through AcquireWeighted with the item's size: the stage's input
// estimate when it has one, else the runes of the item's text.
func TestRunner_WeightedLimiterGetsCallSizes(t *testing.T) {
	const items = 4
	textRunes := int64(len("text i0000"))
	refuseFirst := func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		if n == 1 {
			return pipeline.Result{}, &pipeline.RateLimitedError{Err: errors.New("429"), RetryAfter: time.Millisecond}
		}
		return ok(ctx, it, n)
	}
	tests := []struct {
		name     string
		stage    func() pipeline.Stage
		wantSize int64
	}{
		{"no estimator: the runes of the item's text", func() pipeline.Stage {
			return &funcStage{name: "api", fn: refuseFirst}
		}, textRunes},
		{"an estimator: its input estimate", func() pipeline.Stage {
			return estimatingStage{&funcStage{name: "api", fn: refuseFirst}}
		}, 3 * textRunes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := &weightedLimiter{}
			r := &pipeline.Runner{Store: newMemStore([]string{"api"}, items),
				Stages: []pipeline.StageConfig{{Stage: tt.stage(), Workers: 2, Limiter: lim, MaxAttempts: 1, NewBackOff: noWait}}}
			if _, err := r.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			if lim.plain != 0 || len(lim.sizes) != 2*items || lim.succeeded != items || lim.limited != items {
				t.Fatalf("%d plain and %d weighted acquires, %d successes, %d 429s; want 0, %d, %d, %d",
					lim.plain, len(lim.sizes), lim.succeeded, lim.limited, 2*items, items, items)
			}
			for i, size := range lim.sizes {
				if size != tt.wantSize {
					t.Errorf("acquire %d carried size %d, want %d", i, size, tt.wantSize)
				}
			}
		})
	}
}

var _ pipeline.WeightedLimiter = (*weightedLimiter)(nil)
