package pipeline

import (
	"fmt"
	"time"
)

// Why a stage stops taking work before its items are done, as typed
// errors carrying the facts. The domain words them in its own terms and
// says what to change in the same terms ("the longest wait allowed");
// a front end that knows which of its settings that is (a flag, a job
// file key) words the remedy in its own (Text). Run's error wraps them
// with ErrStopped (see ParkedError).

// QuotaCause is why a QuotaStop stopped its stage.
type QuotaCause int

const (
	// DailyQuota: a per-day quota is spent; it resets at midnight
	// Pacific.
	DailyQuota QuotaCause = iota + 1
	// WaitTooLong: a 429 asks to wait longer than the stage waits
	// (StageConfig.MaxWait).
	WaitTooLong
	// RefusedInARow: so many refusals in a row with no success
	// (StageConfig.MaxRateLimited) that the quota is taken to be gone.
	RefusedInARow
	// RefusedTooLong: every call refused for longer than
	// StageConfig.MaxRefused.
	RefusedTooLong
)

// QuotaStop is a stage stopped by its quota.
type QuotaStop struct {
	Stage string
	Cause QuotaCause
	// Wait is what the server asked to wait, MaxWait the longest the
	// stage waits (WaitTooLong).
	Wait, MaxWait time.Duration
	// InARow is the refusals with no success between them; Since is
	// when the first came, For how long they had lasted, MaxRefused the
	// bound they reached (RefusedTooLong).
	InARow          int64
	Since           time.Time
	For, MaxRefused time.Duration
	// ResumeAt is when calls are known to be admitted again (a per-day
	// quota's reset, the end of the wait asked for); zero when unknown.
	ResumeAt time.Time
	// Last is the last refusal.
	Last error
}

// Error words the stop and its remedy in the domain's terms.
func (e *QuotaStop) Error() string { return e.Text(e.Remedy()) }

// Remedy is what to change to go on, in the domain's terms; "" when
// nothing but time helps.
func (e *QuotaStop) Remedy() string {
	switch e.Cause {
	case WaitTooLong:
		return "raise the longest wait allowed"
	case RefusedInARow:
		return "or lower the ceiling on calls in flight"
	case RefusedTooLong:
		return "raise the limit on refusals, or set none to never stop for them"
	}
	return ""
}

// Text is the stop's message with remedy as the thing to change.
func (e *QuotaStop) Text(remedy string) string {
	switch e.Cause {
	case DailyQuota:
		return fmt.Sprintf("daily quota exhausted for %s; resume after %s (%v)", e.Stage, e.ResumeAt.Local().Format(time.RFC3339), e.Last)
	case WaitTooLong:
		return fmt.Sprintf("quota exhausted for %s (the server asks to wait %s, more than the %s the stage waits); resume after %s, or %s",
			e.Stage, e.Wait.Round(time.Second), e.MaxWait, e.ResumeAt.Local().Format(time.RFC3339), remedy)
	case RefusedInARow:
		return fmt.Sprintf("quota exhausted for %s: %d refusals in a row with no success (last: %v); check the project's quota and usage, %s, then run again",
			e.Stage, e.InARow, e.Last, remedy)
	default:
		return fmt.Sprintf("quota exhausted for %s: every call refused (429) for %s since %s, %d in a row with no success (limit %s; last: %v): no per-minute quota refuses that long; check the project's quota, usage and billing, then run again to resume, nothing is lost (to wait longer, %s; per-day quotas reset at midnight Pacific, %s)",
			e.Stage, e.For.Round(time.Second), e.Since.Local().Format(time.TimeOnly), e.InARow, e.MaxRefused, e.Last, remedy, e.ResumeAt.Local().Format(time.RFC3339))
	}
}

// OutageStop is a stage stopped because its endpoint did not answer, or
// answered only "overloaded", for longer than StageConfig.MaxOutage (or
// the shorter limit before any answer in the run).
type OutageStop struct {
	Stage string
	// Overloaded: the server answered, but only 503 "overloaded".
	Overloaded bool
	// Since is when it began, For how long it lasted, Limit the bound it
	// reached; BeforeAnswer: the endpoint never answered in this run.
	Since        time.Time
	For, Limit   time.Duration
	BeforeAnswer bool
	Last         error
}

// Error words the stop and its remedy in the domain's terms.
func (e *OutageStop) Error() string { return e.Text(e.Remedy()) }

// Remedy is what to check, in the domain's terms.
func (e *OutageStop) Remedy() string {
	if e.Overloaded {
		return ""
	}
	return "the endpoint's address"
}

// Text is the stop's message with remedy as what to check.
func (e *OutageStop) Text(remedy string) string {
	if e.Overloaded {
		return fmt.Sprintf("%s: the server has answered only \"overloaded\" for %s since %s (limit %s; last: %v): it is short of capacity; run again later to resume",
			e.Stage, e.For.Round(time.Second), e.Since.Local().Format(time.TimeOnly), e.Limit, e.Last)
	}
	before := ""
	if e.BeforeAnswer {
		before = ", before any answer in this run"
	}
	return fmt.Sprintf("%s cannot reach its endpoint: unreachable for %s since %s (limit %s%s; last: %v): check the network and %s, then run again to resume",
		e.Stage, e.For.Round(time.Second), e.Since.Local().Format(time.TimeOnly), e.Limit, before, e.Last, remedy)
}

// ParkedError is Run's error when a stage parked: Reason says why (a
// *QuotaStop, *OutageStop, *BudgetStop, or the cause that refuses every
// call of the run), and it is ErrStopped: the items left stay queued for
// the next run.
type ParkedError struct{ Reason error }

func (e *ParkedError) Error() string { return e.Reason.Error() + ": " + ErrStopped.Error() }

// Unwrap returns the reason and ErrStopped.
func (e *ParkedError) Unwrap() []error { return []error{e.Reason, ErrStopped} }
