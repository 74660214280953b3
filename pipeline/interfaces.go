package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Queued is one entry of a stage's queue: its sequence number (the queue
// key, increasing in arrival order) and the item to process.
type Queued struct {
	// Seq is the entry's key in the stage's queue.
	Seq uint64
	// Item is what the stage processes.
	Item Item
}

// Outcome is how a stage finished with one item.
type Outcome int

const (
	// Succeeded: Result holds the stage output; the item moves to the next
	// stage's queue, or is done after the last stage.
	Succeeded Outcome = iota + 1
	// DeadLettered: the item moves to dead/<stage> with Dead describing why.
	DeadLettered
	// Billed: the item stays queued (the run stopped before it finished)
	// but its calls so far were billed: only Usage and CostUSD are
	// recorded. Sent only to a store that implements Ledgers.
	Billed
)

// DeadLetter is why an item left a stage without an output. It is kept until
// re-queued or purged on purpose.
type DeadLetter struct {
	// Class is the failure's class (permanent, or transient once the
	// attempts were spent).
	Class Class `json:"class"`
	// Message says what failed: facts only, never a command (the CLI
	// words the next step when it shows the letter). Letters written
	// before that may end with a command.
	Message string `json:"message"`
	// Cause, when set, is why the item was dead-lettered beyond its
	// Class: the runner's own reason (CauseClaimsExhausted), or the
	// stage's error's (DeadCauser), for the front end to word what to
	// change. (Not PastDeadLetter.Reason, which is why a letter left its
	// item.)
	Cause DeadCause `json:"cause,omitempty"`
	// Attempts is the attempts spent on the item at this stage.
	Attempts int `json:"attempts"`
	// First and Last are when the first and the last attempt failed.
	First time.Time `json:"first_failure"`
	Last  time.Time `json:"last_failure"`
}

// DeadCause is why the runner itself dead-lettered an item.
type DeadCause string

// CauseClaimsExhausted: the item was claimed more than Runner.MaxClaims
// times and never finished; the workers holding it died or lost their
// lease each time, so the item may be what crashes them. Re-queueing it
// (after a look at it) is the user's call.
const CauseClaimsExhausted DeadCause = "claims-exhausted"

// DeadCauser is implemented by a stage's error that knows why its item
// fails (a setting to change, say): the runner stores the cause in the
// dead letter beside the message, so the words for it are chosen when
// the letter is shown, not when it is written.
type DeadCauser interface {
	DeadCause() DeadCause
}

// CauseOf is the cause err carries (DeadCauser), or "".
func CauseOf(err error) DeadCause {
	var c DeadCauser
	if errors.As(err, &c) {
		return c.DeadCause()
	}
	return ""
}

// Transition is one item leaving one stage. The store applies each
// transition exactly once: a transition whose item is no longer queued at
// Stage with Seq (already applied, or re-ingested meanwhile) is a no-op, so
// applying a batch twice is harmless.
type Transition struct {
	// Stage, ID and Seq name the queue entry the transition applies to.
	Stage string
	ID    string
	Seq   uint64
	// Outcome is how the stage finished with the item.
	Outcome Outcome
	// Result is the output (Succeeded).
	Result Result
	// Dead is why the item failed (DeadLettered).
	Dead DeadLetter
	// Usage is every token billed for the item's calls at Stage in this
	// run that led to this transition: the final call and every failed
	// attempt before it (an off-schema or blocked answer is paid too).
	// It travels with the outcome so a store can record what was paid in
	// the same transaction as what it bought: a run killed after the
	// commit has still accounted for it.
	Usage Usage
	// CostUSD is Usage priced at the stage's Price: what the calls that
	// led to this transition were billed. A store that implements Ledgers
	// adds it to the stage's lifetime spend in the same transaction, so
	// the spend a --budget-total counts is never ahead of, nor behind,
	// the results it paid for.
	CostUSD float64
	// CacheKey, on a Succeeded transition of a stage that implements
	// Cacheable, is the key of the answer: a store that implements
	// AnswerCache keeps Result under (Stage, CacheKey) in the transaction
	// that applies the transition. "" when the answer is not cached.
	CacheKey string
	// Cached marks an answer reused from the cache or from an identical
	// item in flight: no call was made, Usage and CostUSD are zero.
	Cached bool
	// SavedUSD is what a Cached answer would have cost at the stage's
	// Price (the answer's own usage, priced).
	SavedUSD float64
}

// Store is what the runner needs from persistence. Implementations must be
// safe for concurrent use.
type Store interface {
	// Queued returns up to max entries of stage's queue with Seq > after,
	// in Seq order, each with its record and earlier stages' outputs.
	Queued(stage string, after uint64, max int) ([]Queued, error)
	// Commit applies ts in one durable transaction. When it returns nil,
	// every transition is on disk.
	Commit(ts []Transition) error
}

// RunLog records run summaries and per-second samples. Optional: a Store
// that also implements RunLog gets them.
type RunLog interface {
	// SaveRun writes r under r.ID, replacing an earlier record of the run.
	SaveRun(r RunSummary) error
	// AppendSamples adds s to the run's series.
	AppendSamples(runID string, s []Sample) error
}

// Limiter governs how many calls of one stage are in flight. The runner
// calls Acquire before each call and exactly one of Succeeded, RateLimited
// or Failed after it, passing back the start time Acquire returned.
// Implementations must be safe for concurrent use.
type Limiter interface {
	// Acquire blocks until a call may start (or ctx is done) and returns
	// the call's start time.
	Acquire(ctx context.Context) (started time.Time, err error)
	// Succeeded reports a call that returned a result, billed tokens.
	Succeeded(started time.Time, tokens int64)
	// RateLimited reports a 429; retryAfter is the server's delay (0 if none).
	RateLimited(started time.Time, retryAfter time.Duration)
	// Failed reports any other outcome (5xx, timeout, permanent, canceled):
	// the slot is freed and the limit is unchanged.
	Failed(started time.Time)
	// Limit is the current concurrency limit.
	Limit() int
	// InFlight is the calls holding a slot.
	InFlight() int
}

// QuotaLimiter is a Limiter that also reads the per-minute quota a 429
// names. The runner reports a 429 through RateLimitedQuota instead of
// RateLimited when the stage's limiter implements it.
type QuotaLimiter interface {
	Limiter
	// RateLimitedQuota is RateLimited with the per-minute budgets the
	// refusal named (see RateLimitedError), 0 for each it did not name.
	RateLimitedQuota(started time.Time, retryAfter time.Duration, requestsPerMinute, tokensPerMinute int64)
}

// TimeoutListener is a Limiter told apart when a call ran out its own
// deadline (the stage's per-call timeout while the run goes on), which it
// may read as the server's congestion: the runner reports such a call
// through TimedOut instead of Failed when the stage's limiter implements
// it.
type TimeoutListener interface {
	Limiter
	TimedOut(started time.Time)
}

// WeightedLimiter is a Limiter that also takes a call's size before it
// starts, to pace calls by what a token budget counts rather than one
// call at a time. The runner acquires through AcquireWeighted instead of
// Acquire when the stage's limiter implements it, with the item's size:
// the stage's Estimator's input estimate when it has one, else the runes
// of the item's text. The size is an estimate in any unit that grows with
// the input tokens; the limiter learns the tokens per unit from what
// Succeeded reports, as no client knows a server's tokenizer.
type WeightedLimiter interface {
	Limiter
	// AcquireWeighted is Acquire for a call of size (0 if unknown).
	AcquireWeighted(ctx context.Context, size int64) (started time.Time, err error)
}

// PoolSizer is a Limiter that knows the most calls it can ever let be in
// flight: a stage left without Workers may grow its pool to that many, so
// that no call the limit admits waits for a worker (see pool.go).
type PoolSizer interface {
	Limiter
	// MostInFlight is the highest the limit can go.
	MostInFlight() int
}

// RefusalHolder is a Limiter that decides itself when calls start again
// after a 429 with no retry delay (a bare one): it holds them for a
// jittered backoff and lets one probe go first, as limiter.AIMD does. The
// runner then retries a bare 429's item at once, through the limiter,
// instead of on the item's own backoff as well.
type RefusalHolder interface {
	Limiter
	// HoldsRefusals reports whether the limiter holds the calls after a
	// bare 429 (false: it lets them through at once, as a fixed pool does).
	HoldsRefusals() bool
}

// Sample is one sampling period (a second by default) of one stage, for
// the run report's plot. The counts are of calls that ended in the period.
type Sample struct {
	// At is the end of the period.
	At time.Time `json:"t"`
	// Stage is the stage's name.
	Stage string `json:"stage"`
	// Limit is the limiter's concurrency limit at At (0 without one).
	Limit int `json:"limit"`
	// InFlight is the calls in flight at At.
	InFlight int `json:"in_flight"`
	// Successes is the outcomes committed as done (not calls).
	Successes int64 `json:"ok"`
	// RateLimited is the calls refused for quota (429).
	RateLimited int64 `json:"r429"`
	// Transient is the calls that failed transiently (5xx, timeouts,
	// cut-off bodies). Its JSON name predates the unavailable count.
	Transient int64 `json:"r5xx"`
	// Unavailable is the calls that never reached the endpoint.
	Unavailable int64 `json:"unavailable,omitempty"`
	// Tokens is the total tokens billed.
	Tokens int64 `json:"tokens"`
}

// StageStats is the per-stage accounting of one run. Done and Dead count
// committed outcomes only: a result whose commit failed is in neither.
type StageStats struct {
	// Done is the items that left the stage with an output.
	Done int64 `json:"done"`
	// Dead is the items dead-lettered at the stage.
	Dead int64 `json:"dead"`
	// Attempts is the attempts spent by items that finished (done, dead
	// or given back); refusals and outages spend none.
	Attempts int64 `json:"attempts"`
	// Calls is every call of the stage, whatever its outcome.
	Calls int64 `json:"calls"`
	// Paid is the calls that were billed (usage reported): answers,
	// usable or not. 429s, 5xx and lost calls bill nothing.
	Paid int64 `json:"paid_calls,omitempty"`
	// RateLimited is the calls refused for quota (429).
	RateLimited int64 `json:"rate_limited"`
	// Transient is the calls that failed transiently (5xx, timeouts).
	Transient int64 `json:"transient"`
	// Unavailable is the calls that never reached the endpoint.
	Unavailable int64 `json:"unavailable,omitempty"`
	// BadAnswers is the calls answered (HTTP 200) with nothing usable in
	// them, e.g. no candidates and no block reason (see AnswerFault):
	// retried as transient, but not 5xx or timeouts.
	BadAnswers int64 `json:"bad_answers,omitempty"`
	// Usage is the tokens billed for every call.
	Usage Usage `json:"usage"`
	// LeasesLost counts, in a fleet (a Store with Claimer), the entries
	// whose lease this process lost: their calls were canceled, or their
	// results fenced off at commit, and another worker does them again.
	// A call whose lease was lost may be billed twice.
	LeasesLost int64 `json:"leases_lost,omitempty"`
	// CostUSD is Usage priced at the stage's Price (StageConfig.Price),
	// failed billed calls included.
	CostUSD float64 `json:"cost_usd,omitempty"`
	// Cached is the answers reused without a call: from the answer
	// cache, or from an identical item in flight. They are in Done too.
	Cached int64 `json:"cached,omitempty"`
	// SavedUSD is what the Cached answers would have cost.
	SavedUSD float64 `json:"saved_usd,omitempty"`
	// Tiers holds the calls by the service tier that served them (shed
	// calls by the tier that shed them), when any was not standard; nil
	// for a run all on standard.
	Tiers map[string]*TierStats `json:"tiers,omitempty"`
	// CacheSavedUSD is what implicit caching took off the bill
	// (Usage.CachedTokens billed at the cached rate, not the input rate).
	CacheSavedUSD float64 `json:"cache_saved_usd,omitempty"`
	// DeadReasons counts the committed dead letters by ReasonKey.
	DeadReasons map[string]int `json:"dead_reasons,omitempty"`
	// LimitMin, LimitMax and LimitEnd are the limiter's concurrency limit:
	// lowest and highest it stood at when a call started or a sample was
	// taken, and at the end (0 without a limiter).
	LimitMin int `json:"limit_min,omitempty"`
	LimitMax int `json:"limit_max,omitempty"`
	LimitEnd int `json:"limit_end,omitempty"`
	// InFlightMax is the most calls of the stage this process had in
	// flight at once, counted as each call starts (not sampled). Calls a
	// client gave up on (a timeout) may still be served, so a server can
	// count more.
	InFlightMax int `json:"in_flight_max,omitempty"`
}

// Add adds o, the same stage's figures from a later part of the run, to
// s: every count, the usage, the costs, the tiers and the dead reasons
// are summed; the limits and the in-flight peak are the stage's over
// both (the lowest LimitMin and the highest LimitMax and InFlightMax
// either had, o's LimitEnd when it has one). o is not changed.
func (s *StageStats) Add(o StageStats) {
	s.Done += o.Done
	s.Dead += o.Dead
	s.Attempts += o.Attempts
	s.Calls += o.Calls
	s.Paid += o.Paid
	s.RateLimited += o.RateLimited
	s.Transient += o.Transient
	s.Unavailable += o.Unavailable
	s.BadAnswers += o.BadAnswers
	s.LeasesLost += o.LeasesLost
	s.Usage = s.Usage.Add(o.Usage)
	s.CostUSD += o.CostUSD
	s.Cached += o.Cached
	s.SavedUSD += o.SavedUSD
	s.CacheSavedUSD += o.CacheSavedUSD
	s.Tiers = addTiers(s.Tiers, o.Tiers)
	for k, n := range o.DeadReasons {
		if s.DeadReasons == nil {
			s.DeadReasons = map[string]int{}
		}
		s.DeadReasons[k] += n
	}
	if o.LimitMin > 0 && (s.LimitMin == 0 || o.LimitMin < s.LimitMin) {
		s.LimitMin = o.LimitMin
	}
	s.LimitMax = max(s.LimitMax, o.LimitMax)
	if o.LimitEnd > 0 {
		s.LimitEnd = o.LimitEnd
	}
	s.InFlightMax = max(s.InFlightMax, o.InFlightMax)
}

// Totals adds up every stage's figures. What is a stage's own (its
// limits, in-flight peak and dead reasons) stays zero.
func (r RunSummary) Totals() StageStats {
	var t StageStats
	for _, s := range r.Stages {
		if s != nil {
			t.Add(*s)
		}
	}
	t.LimitMin, t.LimitMax, t.LimitEnd, t.InFlightMax, t.DeadReasons = 0, 0, 0, 0, nil
	return t
}

// RunSummary is one run's record in the runs bucket.
type RunSummary struct {
	// ID names the run (Runner.RunID).
	ID string `json:"id"`
	// Started and Ended bound the run on the runner's clock.
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
	// Status is running, complete, stopped (resumable) or failed.
	Status string `json:"status"`
	// Message says why a run stopped or failed.
	Message string `json:"message,omitempty"`
	// Stages holds each stage's accounting, by stage name.
	Stages map[string]*StageStats `json:"stages"`
	// Ingested is the ingest report of the run's input, as the caller
	// recorded it.
	Ingested json.RawMessage `json:"ingested,omitempty"`
}
