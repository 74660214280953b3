package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// Class is the one classification of a stage error that decides what the
// runner does with the item.
type Class string

const (
	// ClassTransient: retried in place with backoff and jitter; once the
	// stage's attempt budget is spent the item goes to the dead letters.
	// Any error not wrapped in one of the types below is transient.
	ClassTransient Class = "transient"
	// ClassPermanent: can never succeed; dead-lettered at once.
	ClassPermanent Class = "permanent"
	// ClassRateLimited: the API refused for quota; the limiter decreases
	// (once per congestion event), the item is retried after RetryAfter
	// without spending an attempt.
	ClassRateLimited Class = "rate-limited"
	// ClassFatal: fails every item alike (bad key, unknown model, store
	// failure); the run stops cleanly and no item is dead-lettered for it.
	// A HaltError is of this class too, but stops the run resumable
	// (ErrStopped) rather than failed.
	ClassFatal Class = "fatal"
	// ClassCanceled: the run is shutting down; the attempt is given back
	// and the item stays queued.
	ClassCanceled Class = "canceled"
	// ClassUnavailable: the endpoint could not be reached at all (no
	// connection): not the item's fault, so no attempt is spent; the item
	// waits with backoff, and an outage longer than the stage's MaxOutage
	// parks the stage (exit 3) instead of dead-lettering everything.
	ClassUnavailable Class = "unavailable"
	// ClassOverloaded: the server answered that it is overloaded (a 503
	// "The model is overloaded"): neither the item's fault nor a quota
	// signal, so no attempt is spent and the limiter does not decrease.
	// The item waits a short backoff; answers that are all overloaded
	// hold the stage's calls until one probe gets through, and an
	// overload longer than the stage's MaxOutage parks the stage.
	ClassOverloaded Class = "overloaded"
	// ClassShed: a best-effort service tier (flex) refused the call or
	// did not answer in time: that tier saying "not now", neither the
	// item's fault nor a quota signal. No attempt is spent, the limiter
	// hears no refusal, the item is never dead-lettered for it; it is
	// called again after the error's RetryAfter or a backoff (the stage
	// decides on which tier).
	ClassShed Class = "shed"
	// ClassOK is not an error class: it keys successful calls where calls
	// are counted by class (StageProgress.Outcomes). ClassOf never returns it.
	ClassOK Class = "ok"
)

// Classes lists every outcome a call can have, in the order reports show
// them.
var Classes = []Class{ClassOK, ClassRateLimited, ClassTransient, ClassOverloaded, ClassUnavailable, ClassPermanent, ClassFatal, ClassCanceled, ClassShed}

// PermanentError marks an error that retrying can never fix.
type PermanentError struct {
	// Err is the cause.
	Err error
}

// Error is the cause's message.
func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the cause, for errors.Is and errors.As.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err as permanent. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// ItemVerdict is implemented by errors that are a verdict on one item's
// content (a safety block, an empty text): the item's fault, which says
// nothing about the request or the account, so it never counts toward the
// runner's "first calls all failed the same way" stop. The runner finds it
// anywhere in a permanent error's chain with errors.As, so a stage marks
// its verdicts without this package knowing its types.
type ItemVerdict interface {
	// ItemVerdict reports whether the error is a verdict on the item.
	ItemVerdict() bool
}

// AnswerFault is implemented by errors that are an answer the server sent
// (HTTP 200) with nothing usable in it: no candidates and no block reason,
// an empty response, a model that stopped early for no stated cause. The
// call is retried as transient, but counted in StageStats.BadAnswers, not
// with the 5xx and timeouts: the server answered. The runner finds it
// anywhere in the error's chain with errors.As, as ItemVerdict.
type AnswerFault interface {
	// AnswerFault reports whether the error is an unusable answer.
	AnswerFault() bool
}

// isAnswerFault reports an error marked as an unusable answer.
func isAnswerFault(err error) bool {
	var a AnswerFault
	return errors.As(err, &a) && a.AnswerFault()
}

// isVerdict reports an error marked as a verdict on its item.
func isVerdict(err error) bool {
	var v ItemVerdict
	return errors.As(err, &v) && v.ItemVerdict()
}

// Permanentf is Permanent(fmt.Errorf(format, args...)).
func Permanentf(format string, args ...any) error {
	return Permanent(fmt.Errorf(format, args...))
}

// RateLimitedError marks a refusal for quota.
type RateLimitedError struct {
	// Err is the cause.
	Err error
	// RetryAfter is the server's RetryInfo.retryDelay; zero if it sent none.
	RetryAfter time.Duration
	// Daily is true when the exhausted quota is a per-day one: nothing will
	// succeed until it resets, so the stage parks and the run stops.
	Daily bool
	// RequestsPerMinute and TokensPerMinute are the per-minute budgets the
	// refusal named (QuotaFailure's quotaValue on a per-minute request or
	// input-token quota); zero when it named none. A QuotaLimiter paces to
	// them instead of probing for the quota.
	RequestsPerMinute, TokensPerMinute int64
}

// Error is the cause's message.
func (e *RateLimitedError) Error() string { return e.Err.Error() }

// Unwrap returns the cause, for errors.Is and errors.As.
func (e *RateLimitedError) Unwrap() error { return e.Err }

// RateLimited wraps err as a quota refusal with the server's retry delay.
func RateLimited(err error, retryAfter time.Duration, daily bool) error {
	if err == nil {
		return nil
	}
	return &RateLimitedError{Err: err, RetryAfter: retryAfter, Daily: daily}
}

// UnavailableError marks a call that never reached the server.
type UnavailableError struct {
	// Err is the cause.
	Err error
}

// Error is the cause's message.
func (e *UnavailableError) Error() string { return e.Err.Error() }

// Unwrap returns the cause, for errors.Is and errors.As.
func (e *UnavailableError) Unwrap() error { return e.Err }

// Unavailable wraps err as "the endpoint is unreachable". Unavailable(nil)
// is nil.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &UnavailableError{Err: err}
}

// OverloadedError marks an answer saying the server is overloaded (HTTP
// 503 UNAVAILABLE): the call reached the server, which refused it for
// capacity it will have again shortly, with no word on when.
type OverloadedError struct {
	// Err is the cause.
	Err error
}

// Error is the cause's message.
func (e *OverloadedError) Error() string { return e.Err.Error() }

// Unwrap returns the cause, for errors.Is and errors.As.
func (e *OverloadedError) Unwrap() error { return e.Err }

// Overloaded wraps err as "the server is overloaded". Overloaded(nil) is
// nil.
func Overloaded(err error) error {
	if err == nil {
		return nil
	}
	return &OverloadedError{Err: err}
}

// ShedError marks a call a best-effort tier refused or left unanswered
// (see ClassShed).
type ShedError struct {
	// Err is the cause.
	Err error
	// Tier is the tier that shed the call (TierFlex).
	Tier string
	// RetryAfter is the delay the refusal asked for; zero if none.
	RetryAfter time.Duration
	// WaitAtMost, when > 0, caps the wait before the next call: the
	// stage moves the item to a tier with room by then (auto mode's
	// deadline). Moved says its next call already goes to such a tier:
	// it is made at once.
	WaitAtMost time.Duration
	Moved      bool
}

// Error is the cause's message.
func (e *ShedError) Error() string { return e.Err.Error() }

// Unwrap returns the cause, for errors.Is and errors.As.
func (e *ShedError) Unwrap() error { return e.Err }

// Shed wraps err as tier's "not now". Shed(nil, ...) is nil.
func Shed(err error, tier string, retryAfter time.Duration) error {
	if err == nil {
		return nil
	}
	return &ShedError{Err: err, Tier: tier, RetryAfter: retryAfter}
}

// FatalError marks an error that fails every item alike.
type FatalError struct {
	// Err is the cause.
	Err error
	// DeadLettered is how many items were dead-lettered for this cause
	// before the run stopped: non-zero only for the runner's "first calls
	// all failed the same way" stop, whose items `retry` re-queues.
	DeadLettered int
}

// Error is the cause's message.
func (e *FatalError) Error() string { return e.Err.Error() }

// Unwrap returns the cause, for errors.Is and errors.As.
func (e *FatalError) Unwrap() error { return e.Err }

// Fatal wraps err as fatal. Fatal(nil) is nil.
func Fatal(err error) error {
	if err == nil {
		return nil
	}
	return &FatalError{Err: err}
}

// HaltError marks a refusal every call of the run will meet until someone
// acts outside it: the account ran out of prepayment credits, or its
// billing is off. Waiting does not clear it, and no item is at fault. The
// run stops taking work at every stage, the calls in flight finish, no
// item spends an attempt or is dead-lettered, and Run returns ErrStopped
// with Err's message: once the cause is fixed, running again resumes.
type HaltError struct {
	// Err is the cause; its message says what to do.
	Err error
}

// Error is the cause's message.
func (e *HaltError) Error() string { return e.Err.Error() }

// Unwrap returns the cause, for errors.Is and errors.As.
func (e *HaltError) Unwrap() error { return e.Err }

// Halt wraps err as a refusal that stops the run, resumable. Halt(nil)
// is nil.
func Halt(err error) error {
	if err == nil {
		return nil
	}
	return &HaltError{Err: err}
}

// ClassOf returns err's class. It is the one place that decides.
// A context cancellation is ClassCanceled only when ctx itself is done: a
// request timeout (context.DeadlineExceeded from a per-call deadline while
// the run goes on) is transient. A failed dial (refused, unreachable, or a
// connect timeout, which also matches context.DeadlineExceeded) never
// reached the server: ClassUnavailable, unless the stage wrapped it in a
// class of its own.
func ClassOf(ctx context.Context, err error) Class {
	var (
		pe *PermanentError
		re *RateLimitedError
		fe *FatalError
		ue *UnavailableError
		oe *OverloadedError
		he *HaltError
		se *ShedError
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &fe), errors.As(err, &he):
		return ClassFatal
	case ctx != nil && ctx.Err() != nil:
		return ClassCanceled
	case errors.As(err, &se):
		// Before the classes of its cause: a flex 429 is no quota.
		return ClassShed
	case errors.As(err, &pe):
		return ClassPermanent
	case errors.As(err, &re):
		return ClassRateLimited
	case errors.As(err, &oe):
		return ClassOverloaded
	case errors.As(err, &ue), isDialError(err):
		return ClassUnavailable
	default:
		return ClassTransient
	}
}

// isDialError reports an error from connecting to the server (a
// *net.OpError with Op "dial", or a DNS failure): the request was never
// sent, so it says nothing about the item.
func isDialError(err error) bool {
	var (
		oe *net.OpError
		de *net.DNSError
	)
	return (errors.As(err, &oe) && oe.Op == "dial") || errors.As(err, &de)
}
