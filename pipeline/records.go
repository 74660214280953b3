package pipeline

import (
	"errors"
	"fmt"
	"time"
)

// The states and records every store keeps and the commands read, here
// so that what reads them (batch, report, the CLI) does not depend on
// one store.

// Status is where an item is within its current stage.
type Status uint8

const (
	// Queued: in todo/<stage>; the runner moves it out by committing a
	// success or a dead letter.
	StatusQueued Status = 1
	// Dead: in dead/<stage>; only a re-queue (dlq requeue, retry) moves it.
	StatusDead Status = 2
	// Done: passed every stage; only a re-run or an edited text moves it.
	StatusDone Status = 3
	// InBatch: held by an open batch job (Seq is the job's number, see
	// BatchJob); the stores' CommitBatch or ReturnBatch moves it out.
	StatusInBatch Status = 4
)

// String is the status as status and dlq print it: queued, dead, done,
// in batch.
func (s Status) String() string {
	switch s {
	case StatusQueued:
		return "queued"
	case StatusDead:
		return "dead"
	case StatusDone:
		return "done"
	case StatusInBatch:
		return "in batch"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// ItemState is one item as a store's ForEachItem reads it.
type ItemState struct {
	// Item holds the record and the outputs of every stage that has one.
	Item
	// Stage is the stage the item is at: where it waits or died, or the
	// last stage when Done.
	Stage string
	// Status is Queued, Dead, Done or InBatch.
	Status Status
	// Dead is the item's current dead letter when Status is Dead.
	Dead *DeadLetter
}

// BatchJob is one batch job's record.
type BatchJob struct {
	// Num is the job's number in this database, from 1; Stage the stage
	// its items are at.
	Num   uint64 `json:"num"`
	Stage string `json:"stage"`
	// DisplayName is derived from the intent (database nonce, stage,
	// number, a hash of the item ids) and sent with create, so that after
	// a crash the job is found at the API by it instead of created twice.
	DisplayName string `json:"display_name"`
	// Name is the API's name ("batches/...") once create returned; ""
	// while only the intent is recorded.
	Name string `json:"name,omitempty"`
	// Endpoint is the API root URL the job is created at (the run's
	// base URL, see SetBatchEndpoint): a job is known only there, so
	// whoever looks for it or cancels it later must ask that endpoint.
	// "" in records from before it was kept.
	Endpoint string `json:"endpoint,omitempty"`
	// State is the API's last seen state (genai.JobState, e.g.
	// JOB_STATE_RUNNING); "" before create.
	State string `json:"state,omitempty"`
	// Items are the ids reserved for the job, in request order.
	Items []string `json:"items"`
	// Created is when the intent was recorded; Submitted when create
	// returned; Updated the last poll; Closed when the job was done with
	// (results committed or items returned).
	Created   time.Time `json:"created"`
	Submitted time.Time `json:"submitted,omitzero"`
	Updated   time.Time `json:"updated,omitzero"`
	Closed    time.Time `json:"closed,omitzero"`
	// CreateSent is when a create was last sent for the job (zero if
	// none was): until the name is recorded, the API may have made the
	// job, or may still make it, whatever the client saw.
	CreateSent time.Time `json:"create_sent,omitzero"`
	// CreateTracked is set on records written since CreateSent is kept:
	// only then does a zero CreateSent prove no create was sent. An older
	// intent without it may have been created at the API.
	CreateTracked bool `json:"create_tracked,omitempty"`
	// ReservedUSD is the job's estimated cost reserved against a budget
	// when its create was sent (0 with no budget): while the job is open
	// a resumed run counts it as spent, since the job may be billed.
	ReservedUSD float64 `json:"reserved_usd,omitempty"`
	// Answered and Dead count results committed as outputs and dead
	// letters; Returned items put back in the queue; Ignored results for
	// items no longer in the job.
	Answered int `json:"answered"`
	Dead     int `json:"dead"`
	Returned int `json:"returned"`
	Ignored  int `json:"ignored"`
	// Counts are the API's request counts at the last poll.
	Counts BatchCounts `json:"counts"`
	// APIError is the job-level error the API gave, if any.
	APIError string `json:"api_error,omitempty"`
	// Usage is what the committed results were billed (batch tokens),
	// the requests answered with something the online path would ask
	// again (billed, the item back in the queue) included.
	Usage Usage `json:"usage"`
	// ResultsCommitted is set by the first commit of the job's results:
	// a CommitBatch once the API named the job. The items committed
	// before its create (answered from the cache, left out by a
	// condition, refused before a call) count in Answered and Dead but
	// do not set it. A job applied again with it set (its driver died
	// between that commit and closing the job) has its answers billed
	// already. False in records from before it was kept.
	ResultsCommitted bool `json:"results_committed,omitempty"`
	// Note says why the job was closed the way it was.
	Note string `json:"note,omitempty"`
}

// BatchCounts are a job's request counts as the API reports them
// (metadata.batchStats).
type BatchCounts struct {
	Requests  int64 `json:"requests"`
	Succeeded int64 `json:"succeeded"`
	Failed    int64 `json:"failed"`
	Pending   int64 `json:"pending"`
}

// Open reports whether the job still holds items (not yet closed).
func (j BatchJob) Open() bool { return j.Closed.IsZero() }

// ReportStamp is what the store keeps of the last report of a period.
type ReportStamp struct {
	// Fingerprint is a hash of the period's figures as that report showed them.
	Fingerprint string `json:"fingerprint"`
	// At is when that report was generated.
	At time.Time `json:"at"`
}

// RunKilled is the status of a run whose process died (SIGKILL, a crash,
// power loss) before it saved its end; a store finds such runs when it
// opens.
const RunKilled = "killed"

// ErrNotFound is a store's error for an unknown item or dead letter.
var ErrNotFound = errors.New("not found")

// NotDeadError is a store's refusal to re-queue an item that is not among
// a stage's dead letters; it is ErrNotFound.
type NotDeadError struct {
	ID, Stage string
}

func (e *NotDeadError) Error() string {
	return fmt.Sprintf("item %q is not in the dead letters of %s: %v", e.ID, e.Stage, ErrNotFound)
}

func (e *NotDeadError) Unwrap() error { return ErrNotFound }

// ErrBatchHeld is a shared store's error for a change to a batch job
// that another worker drives (it holds the job's lease): the caller
// leaves the job to that worker.
var ErrBatchHeld = errors.New("batch job is held by another worker")
