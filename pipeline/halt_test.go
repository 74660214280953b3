package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// TestRunner_HaltStopsTheRunResumable: once the account cannot pay (a
// HaltError, as the API's 429 for depleted prepayment credits is), the run
// stops at once as ErrStopped with the halt's own message: no stage takes
// more work, no call waits a backoff, nothing is dead-lettered, and a run
// once the credits are back finishes every item, none answered twice.
func TestRunner_HaltStopsTheRunResumable(t *testing.T) {
	const items, credits, workers = 60, 10, 4
	for _, tc := range []struct {
		name    string
		limiter func() pipeline.Limiter
	}{
		{"no limiter", func() pipeline.Limiter { return nil }},
		{"a limiter", func() pipeline.Limiter { return &fakeLimiter{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inVirtualTime(t, func(t *testing.T, clock *virtualClock) {
				st := newMemStore([]string{"api", "down"}, items)
				var (
					paid, calls atomic.Int64
					dry         atomic.Bool
					mu          sync.Mutex
					answers     = map[string]int{}
				)
				dry.Store(true)
				api := &funcStage{name: "api", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
					calls.Add(1)
					if dry.Load() && paid.Add(1) > credits {
						return pipeline.Result{}, fmt.Errorf("item %s: %w", it.ID, pipeline.Halt(errors.New("api: the account cannot pay for calls: add credits, then run again")))
					}
					mu.Lock()
					answers[it.ID]++
					mu.Unlock()
					return ok(ctx, it, n)
				}}
				down := &funcStage{name: "down", fn: ok}
				run := func() (pipeline.RunSummary, error) {
					r := &pipeline.Runner{Store: st, Clock: clock, Stages: []pipeline.StageConfig{
						{Stage: api, Workers: workers, Limiter: tc.limiter(), NewBackOff: every(1e9)},
						{Stage: down, Workers: workers},
					}}
					return r.Run(context.Background())
				}
				sum, err := run()
				if !errors.Is(err, pipeline.ErrStopped) || err.Error() != "api: the account cannot pay for calls: add credits, then run again: "+pipeline.ErrStopped.Error() {
					t.Fatalf("err = %v, want ErrStopped with the halt's message and no item named", err)
				}
				if sum.Status != "stopped" {
					t.Errorf("status %q, want stopped", sum.Status)
				}
				if got := calls.Load(); got > credits+workers {
					t.Errorf("%d calls: the run went on past the halt (%d paid, %d workers)", got, credits, workers)
				}
				if d := sum.Ended.Sub(sum.Started); d != 0 {
					t.Errorf("the run took %s of virtual time: a halt waits no backoff", d)
				}
				w := st.tally()
				if w["api/dead"]+w["down/dead"] != 0 || w["done"]+w["down/queued"] != credits || w["api/queued"] != items-credits {
					t.Fatalf("where = %v: want %d answered, the rest queued at api, none dead", w, credits)
				}

				dry.Store(false)
				if _, err := run(); err != nil {
					t.Fatalf("resume: %v", err)
				}
				if w := st.tally(); w["done"] != items {
					t.Fatalf("after the resume where = %v", w)
				}
				if len(answers) != items {
					t.Errorf("%d items answered, want %d", len(answers), items)
				}
				for id, n := range answers {
					if n != 1 {
						t.Errorf("item %s answered %d times", id, n)
					}
				}
			})
		})
	}
}

// parkSignal is a slog handler that closes parked at the runner's first
// "stage parked" record: the park is recorded by then.
type parkSignal struct {
	once   sync.Once
	parked chan struct{}
}

func (h *parkSignal) Enabled(context.Context, slog.Level) bool { return true }
func (h *parkSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "stage parked" {
		h.once.Do(func() { close(h.parked) })
	}
	return nil
}
func (h *parkSignal) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *parkSignal) WithGroup(string) slog.Handler      { return h }

// TestRunner_HaltMessageWinsOverAnEarlierPark: a stage parked (its daily
// quota) before another stage learns the account cannot pay: the run
// stops with the halt's message, what the user must act on, not the
// park's that came first.
func TestRunner_HaltMessageWinsOverAnEarlierPark(t *testing.T) {
	const billing = "down: the account cannot pay for calls: add credits or enable billing, then run again"
	st := newMemStore([]string{"up", "down"}, 8)
	sig := &parkSignal{parked: make(chan struct{})}
	downStarted := make(chan struct{})
	var upCalls atomic.Int64
	var downOnce sync.Once
	up := &funcStage{name: "up", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		if upCalls.Add(1) != 1 {
			return ok(ctx, it, n)
		}
		// Park only once an item is in flight at down, so its halt
		// comes after the park.
		select {
		case <-downStarted:
		case <-ctx.Done():
			return pipeline.Result{}, ctx.Err()
		}
		return pipeline.Result{}, pipeline.RateLimited(errors.New("per-day quota exceeded"), 0, true)
	}}
	down := &funcStage{name: "down", fn: func(ctx context.Context, it pipeline.Item, n int) (pipeline.Result, error) {
		downOnce.Do(func() { close(downStarted) })
		select {
		case <-sig.parked:
		case <-ctx.Done():
			return pipeline.Result{}, ctx.Err()
		}
		return pipeline.Result{}, pipeline.Halt(errors.New("the account cannot pay for calls: add credits or enable billing, then run again"))
	}}
	r := &pipeline.Runner{Store: st, Log: slog.New(sig), Stages: []pipeline.StageConfig{
		{Stage: up, Workers: 2, NewBackOff: noWait},
		{Stage: down, Workers: 1, NewBackOff: noWait},
	}}
	sum, err := r.Run(context.Background())
	if !errors.Is(err, pipeline.ErrStopped) || !strings.HasPrefix(err.Error(), billing) {
		t.Fatalf("err = %v, want ErrStopped with the halt's message %q", err, billing)
	}
	if sum.Status != "stopped" || !strings.HasPrefix(sum.Message, billing) {
		t.Errorf("summary %q: %q, want stopped with the halt's message", sum.Status, sum.Message)
	}
}
