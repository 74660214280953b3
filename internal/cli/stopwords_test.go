package cli

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/batch"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// TestWordStops: a stop the pipeline words in its own terms reaches the
// user naming the flag that changes it, and stays the same error for
// errors.Is and errors.As (the exit code, the resume hint).
func TestWordStops(t *testing.T) {
	since := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	last := errors.New("429 RESOURCE_EXHAUSTED")
	tests := []struct {
		name   string
		reason error
		want   string // in the worded message
		domain string // the domain's remedy, gone from it
	}{
		{"a wait over --max-wait", &pipeline.QuotaStop{Stage: "classify", Cause: pipeline.WaitTooLong, Wait: 3 * time.Minute, MaxWait: 2 * time.Minute, ResumeAt: since, Last: last},
			"or raise --max-wait to wait for it", "the longest wait allowed"},
		{"refusals in a row", &pipeline.QuotaStop{Stage: "classify", Cause: pipeline.RefusedInARow, InARow: 200, Last: last},
			"or lower --ceiling, then run again", "the ceiling on calls in flight"},
		{"refused too long", &pipeline.QuotaStop{Stage: "classify", Cause: pipeline.RefusedTooLong, InARow: 70, Since: since, For: 5 * time.Minute, MaxRefused: 5 * time.Minute, ResumeAt: since, Last: last},
			"give a longer --max-refused, or 0 to never stop for refusals", "the limit on refusals"},
		{"unreachable", &pipeline.OutageStop{Stage: "classify", Since: since, For: time.Minute, Limit: time.Minute, Last: errors.New("dial tcp: refused")},
			"check the network and --base-url", "the endpoint's address"},
		{"the run's budget", &pipeline.BudgetStop{LimitUSD: 5, SpentUSD: 4.9, RunSpentUSD: 4.9, ItemsLeft: 12, LeftUSD: 1},
			"raise --budget to continue", "the run's budget"},
		{"the total budget", &pipeline.BudgetStop{Total: true, LimitUSD: 5, SpentUSD: 4.9, ItemsLeft: -1, LeftUSD: -1},
			"raise --budget-total to continue", "the total budget"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(tc.reason.Error(), tc.domain) || strings.Contains(tc.reason.Error(), "--") {
				t.Fatalf("the domain's words %q should say %q and name no flag", tc.reason, tc.domain)
			}
			err := fmt.Errorf("run: %w", &pipeline.ParkedError{Reason: tc.reason})
			got := wordStops(err)
			msg := got.Error()
			if !strings.Contains(msg, tc.want) || strings.Contains(msg, tc.domain) || !strings.HasPrefix(msg, "run: ") || !strings.HasSuffix(msg, ": "+pipeline.ErrStopped.Error()) {
				t.Errorf("worded = %q, want %q in place of %q, the wrapping kept", msg, tc.want, tc.domain)
			}
			if !errors.Is(got, pipeline.ErrStopped) || !errors.As(got, new(*pipeline.ParkedError)) {
				t.Errorf("worded error lost what it wraps: %v", got)
			}
		})
	}
	// A batch client that cannot be made names the flag and the variable.
	ce := &batch.ClientError{Err: errors.New("invalid base URL")}
	if strings.Contains(ce.Error(), "--") {
		t.Errorf("the batch package's words %q name a flag", ce)
	}
	got := wordStops(fmt.Errorf("open batch: %w", ce))
	if want := "open batch: batch: create Gemini client (invalid base URL): check --base-url and GEMINI_API_KEY"; got.Error() != want || !errors.As(got, new(*batch.ClientError)) {
		t.Errorf("worded = %q, want %q, still a ClientError", got, want)
	}
	overloaded := &pipeline.OutageStop{Stage: "classify", Overloaded: true, Since: since, For: time.Minute, Limit: time.Minute, Last: last}
	plain := errors.New("input.jsonl line 3: no id")
	for _, err := range []error{nil, plain, &pipeline.ParkedError{Reason: overloaded}} {
		if got := wordStops(err); got != err {
			t.Errorf("wordStops(%v) = %v, want it unchanged: it names no flag", err, got)
		}
	}
}
