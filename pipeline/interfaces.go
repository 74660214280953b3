package pipeline

import (
	"context"
	"encoding/json"
	"time"
)

// Queued is one entry of a stage's queue: its sequence number (the queue
// key, increasing in arrival order) and the item to process.
type Queued struct {
	Seq  uint64
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
)

// DeadLetter is why an item left a stage without an output. It is kept until
// re-queued or purged on purpose.
type DeadLetter struct {
	Class    Class     `json:"class"`
	Message  string    `json:"message"`
	Attempts int       `json:"attempts"`
	First    time.Time `json:"first_failure"`
	Last     time.Time `json:"last_failure"`
}

// Transition is one item leaving one stage. The store applies each
// transition exactly once: a transition whose item is no longer queued at
// Stage with Seq (already applied, or re-ingested meanwhile) is a no-op, so
// applying a batch twice is harmless.
type Transition struct {
	Stage   string
	ID      string
	Seq     uint64
	Outcome Outcome
	Result  Result
	Dead    DeadLetter
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
	SaveRun(r RunSummary) error
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
	// Limit is the current concurrency limit; InFlight the calls holding a slot.
	Limit() int
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

// Sample is one second of one stage, for the run report's plot.
type Sample struct {
	At          time.Time `json:"t"`
	Stage       string    `json:"stage"`
	Limit       int       `json:"limit"`
	InFlight    int       `json:"in_flight"`
	Successes   int64     `json:"ok"`
	RateLimited int64     `json:"r429"`
	ServerError int64     `json:"r5xx"`
	Tokens      int64     `json:"tokens"`
}

// StageStats is the per-stage accounting of one run.
type StageStats struct {
	Done        int64          `json:"done"`
	Dead        int64          `json:"dead"`
	Attempts    int64          `json:"attempts"`
	Calls       int64          `json:"calls"`
	RateLimited int64          `json:"rate_limited"`
	Transient   int64          `json:"transient"`
	Usage       Usage          `json:"usage"`
	CostUSD     float64        `json:"cost_usd,omitempty"`
	DeadReasons map[string]int `json:"dead_reasons,omitempty"`
	LimitMin    int            `json:"limit_min,omitempty"`
	LimitMax    int            `json:"limit_max,omitempty"`
	LimitEnd    int            `json:"limit_end,omitempty"`
}

// Totals adds up every stage's figures (limit fields stay zero).
func (r RunSummary) Totals() StageStats {
	var t StageStats
	for _, s := range r.Stages {
		if s == nil {
			continue
		}
		t.Done += s.Done
		t.Dead += s.Dead
		t.Attempts += s.Attempts
		t.Calls += s.Calls
		t.RateLimited += s.RateLimited
		t.Transient += s.Transient
		t.Usage = t.Usage.Add(s.Usage)
		t.CostUSD += s.CostUSD
	}
	return t
}

// RunSummary is one run's record in the runs bucket.
type RunSummary struct {
	ID       string                 `json:"id"`
	Started  time.Time              `json:"started"`
	Ended    time.Time              `json:"ended"`
	Status   string                 `json:"status"` // running, complete, stopped, failed
	Message  string                 `json:"message,omitempty"`
	Stages   map[string]*StageStats `json:"stages"`
	Ingested json.RawMessage        `json:"ingested,omitempty"`
}
