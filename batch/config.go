package batch

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
)

// Mode is how an API stage is run.
type Mode string

const (
	// ModeOnline: every item is one online call (the pipeline runner).
	ModeOnline Mode = "online"
	// ModeBatch: items go through batch jobs only, in up to MaxRounds
	// rounds; what is left stays queued.
	ModeBatch Mode = "batch"
	// ModeAuto: one round of batch jobs, then online calls for what the
	// jobs did not answer by the deadline.
	ModeAuto Mode = "auto"
)

// ParseMode reads a --mode value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case ModeOnline, ModeBatch, ModeAuto:
		return m, nil
	}
	return "", fmt.Errorf("mode %q: use online, batch or auto", s)
}

// Defaults for the zero fields of Config.
const (
	DefaultSize             = 2000
	DefaultDeadline         = 12 * time.Hour
	DefaultInlineBytes      = 19 << 20 // under the API's 20 MB inline limit, with room for the envelope
	DefaultPoll             = 30 * time.Second
	DefaultPollMax          = 10 * time.Minute
	DefaultCreateBackoff    = time.Minute
	DefaultCreateBackoffMax = 30 * time.Minute
	DefaultCreateSettle     = 2 * time.Minute
	DefaultMaxRounds        = 3
	DefaultMaxSends         = 3
)

// Store is what the driver needs from persistence: a store's batch jobs
// (the bbolt store implements it; its tests hold it to it).
type Store interface {
	ReserveBatch(stage string, max int, now time.Time) (pipeline.BatchJob, bool, error)
	MarkBatchCreate(num uint64, reservedUSD float64, now time.Time) (pipeline.BatchJob, error)
	SetBatchName(num uint64, name, state string, now time.Time) (pipeline.BatchJob, error)
	UpdateBatch(num uint64, state string, counts pipeline.BatchCounts, apiErr string, now time.Time) (pipeline.BatchJob, error)
	CommitBatch(num uint64, ts []pipeline.Transition) (int, error)
	CachedAnswer(stage, key string) (pipeline.Result, bool, error)
	Ledgers() (map[string]pipeline.Ledger, error)
	Queued(stage string, after uint64, max int) ([]pipeline.Queued, error)
	ReturnBatch(num uint64, note string, now time.Time) (int, error)
	BatchJobs(openOnly bool) ([]pipeline.BatchJob, error)
	BatchJobByNum(num uint64) (pipeline.BatchJob, error)
	BatchItems(num uint64) ([]pipeline.Item, error)
	// BatchSends is how many jobs were created holding each item of job
	// num at its stage, this one included once SetBatchName named it.
	BatchSends(num uint64) (map[string]int, error)
	Counts() (pipeline.Counts, error)
}

// Stage is an API stage that can be asked in batches; every LLM stage
// (*stages.LLM, *stages.Classify) is one. A stage that is also a
// pipeline.Skipper has the items it leaves out committed without a
// request, as the online path does.
type Stage interface {
	Name() string
	Model() string
	BatchRequest(it pipeline.Item) (*genai.InlinedRequest, error)
	DecodeBatch(it pipeline.Item, resp *genai.GenerateContentResponse, rowErr *genai.JobError) (pipeline.Result, error)
}

var (
	_ Stage = (*stages.Classify)(nil)
	_ Stage = (*stages.LLM)(nil)
)

// Config configures a Driver. Zero fields take the defaults above.
type Config struct {
	// Mode is ModeBatch or ModeAuto (ModeOnline makes Run a no-op).
	Mode Mode
	// Size is the most requests per job.
	Size int
	// Deadline is how long a job may stay PENDING or RUNNING after
	// create (or, for an intent, before create succeeds) before it is
	// cancelled and its items returned to the queue. In ModeAuto it is
	// also the whole run's: counted from the start of Run (or from the
	// oldest open job's intent, when resuming), no job is reserved past
	// it and every job still open then is cancelled, so what the batch
	// did not answer goes online in time.
	Deadline time.Duration
	// InlineBytes is the largest job sent as inlined requests; bigger
	// ones go as an uploaded JSONL file.
	InlineBytes int
	// Poll is the first interval between polls of a job; it doubles up
	// to PollMax.
	Poll, PollMax time.Duration
	// CreateBackoff is the first wait after a 429 on create; it doubles
	// up to CreateBackoffMax.
	CreateBackoff, CreateBackoffMax time.Duration
	// CreateSettle is how long after a create whose outcome is unknown
	// (its answer lost, the process killed while it was in flight) the
	// job may still appear in the API's list: until then, a display name
	// not listed is looked up again instead of created (create is not
	// idempotent). Counted from when the create was sent, as recorded.
	CreateSettle time.Duration
	// MaxRounds bounds ModeBatch's rounds (ModeAuto runs one).
	MaxRounds int
	// MaxSends is how many jobs may ask for one item at the stage, over
	// every round, run and worker, before it goes to the stage's dead
	// letters instead of into another job (see sends.go). In ModeAuto an
	// item a job gave back goes online whatever its count; only a new job
	// leaves it out.
	MaxSends int
	// Lease is how long this worker holds a job without renewing it, on
	// a Store shared by workers (a Leaser): the driver renews every
	// Lease/3, and once a worker's lease ended (it died, or stalled that
	// long) another takes its jobs over. Ignored otherwise.
	Lease time.Duration
	// NoCache keeps the answers out of the store's answer cache. By
	// default an answer is kept under the stage's cache key (when the
	// stage is a pipeline.Cacheable), as an online answer is, so a later
	// online call asking the same question is not paid again.
	NoCache bool
	// Budget caps what the jobs cost at the batch price (see budget.go):
	// RunUSD this run's batch answers, TotalUSD the database's lifetime
	// spend. The zero Budget is no cap.
	Budget pipeline.Budget
	// Price is the stage's online price, a job's own or the list's with
	// its cached-input rate; the jobs are priced at BatchPriceFactor of
	// it, for the budget, the ledger and the summary. The zero Price is
	// the list price of the stage's model.
	Price pipeline.Price
	// Now and Sleep are the clock; nil means the real one. Sleep returns
	// ctx's error when ctx ends first.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	// Log receives one line per job event; nil discards.
	Log *slog.Logger
	// Progress, if set, is called with the running summary after every
	// job event.
	Progress func(Summary)
}

func (c *Config) setDefaults() {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.Mode == "" {
		c.Mode = ModeBatch
	}
	if c.Size <= 0 {
		c.Size = DefaultSize
	}
	if c.InlineBytes <= 0 {
		c.InlineBytes = DefaultInlineBytes
	}
	if c.MaxRounds <= 0 {
		c.MaxRounds = DefaultMaxRounds
	}
	if c.MaxSends <= 0 {
		c.MaxSends = DefaultMaxSends
	}
	def(&c.Deadline, DefaultDeadline)
	def(&c.Poll, DefaultPoll)
	def(&c.PollMax, DefaultPollMax)
	def(&c.CreateBackoff, DefaultCreateBackoff)
	def(&c.CreateBackoffMax, DefaultCreateBackoffMax)
	def(&c.CreateSettle, DefaultCreateSettle)
	def(&c.Lease, DefaultLease)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = sleep
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
