package pipeline

import (
	"encoding/json"
	"strings"
	"time"
)

// Database is everything sawtooth does with a pipeline's persistence: the
// runner's Store and RunLog, and what the commands do (ingest, inspect,
// re-queue, re-run, prune, verify). The bbolt store (store) and the
// PostgreSQL store (store/postgres) implement it and pass the same
// contract suite (store/storetest). Implementations must be safe for concurrent use.
//
// Every method that changes items is one transaction (Rerun may use
// several, each complete) and idempotent: applying it twice leaves what
// applying it once did.
type Database interface {
	Store
	RunLog

	// Ingest stores records: a new id is queued at the first stage; an id
	// with the same content is left alone; an id whose content changed
	// re-enters at the first stage that reads a changed field (see
	// StageDef.Reads), its later outputs dropped and folded out of the
	// tally.
	Ingest(recs []Record) (IngestStats, error)
	// Requeue moves dead letters of stage back to its queue (the given
	// ids, or all when ids is empty); each dead letter moves to its item's
	// history. It returns how many moved.
	Requeue(stage string, ids []string) (int, error)
	// Rerun sends every item that reached stage back to its queue,
	// dropping the outputs of stage and later ones. It returns how many
	// moved.
	Rerun(stage string) (int, error)
	// Prune removes every item for which keep returns false, with its
	// outputs, dead letters and history, folding it out of the tally. With
	// dryRun it changes nothing. It returns how many items it removed (or
	// would remove).
	Prune(keep func(id string) bool, dryRun bool) (int, error)

	// Counts summarises where the items are.
	Counts() (Counts, error)
	// Locate answers "where is item id", with its dead-letter history.
	Locate(id string) (Location, error)
	// DeadHistory lists the dead letters item id had before it was
	// re-queued, oldest first.
	DeadHistory(id string) ([]PastDeadLetter, error)
	// ForEachDead calls fn for every current dead letter of stage.
	ForEachDead(stage string, fn func(DeadEntry) error) error
	// ForEachOutput calls fn for every item with an output at stage.
	ForEachOutput(stage string, fn func(rec Record, out json.RawMessage) error) error
	// ForEachDone calls fn with every done item, its record and outputs.
	ForEachDone(fn func(Item) error) error
	// Tally is the stored aggregate, folded as items completed.
	Tally() (Tally, error)
	// Usage is the tokens billed per stage, recorded by Commit in the
	// transaction that stored what they paid for.
	Usage() (map[string]Usage, error)
	// Check verifies the stored state's invariants and returns one line
	// per problem.
	Check() ([]string, error)

	// Runs returns up to n run records, newest first. A run whose process
	// died before saving its end reads "killed".
	Runs(n int) ([]RunSummary, error)
	// Samples returns a run's per-second samples in time order.
	Samples(runID string) ([]Sample, error)
	// SetLearnedLimit persists a stage's learned concurrency limit;
	// LearnedLimit reads it back (0 if none). The rate beside it is kept
	// the same way, under QuotaRateKey(stage).
	SetLearnedLimit(stage string, n int) error
	LearnedLimit(stage string) int

	// StoredDefinition is the pipeline definition the store was last run
	// with; ChangedStages the stages whose fingerprint differs from the
	// definition it was opened with; AcceptDefinition records the latter.
	StoredDefinition() ([]StageDef, error)
	ChangedStages() []string
	AcceptDefinition() error
	// Stages is the definition the store was opened with.
	Stages() []StageDef
	// Path names the store for messages (a file path or a DSN without
	// credentials).
	Path() string
	// Close releases the store.
	Close() error
}

// TextField names the record's text in StageDef.Reads (Record.Text is
// not one of Record.Fields, so it gets a name no CSV header is likely to
// have).
const TextField = "$text"

// QuotaRateKey is the key a stage's learned rate is kept under, beside
// its learned limit (kept under the stage's name), through
// SetLearnedLimit and LearnedLimit: the rate the stage's quota showed its
// limiter (limiter.AIMD.Rate), in call starts per minute, 0 if none.
func QuotaRateKey(stage string) string { return stage + ".quota_rate_per_min" }

// StageDef names one stage and fingerprints its configuration (model,
// prompt version, label set...): a changed fingerprint means outputs of
// that stage were produced by another configuration.
type StageDef struct {
	Name        string `json:"name"`
	Fingerprint string `json:"fingerprint,omitempty"`
	// Config is the stage's configuration as the run gave it, kept so
	// later commands (verify) can use the same one.
	Config json.RawMessage `json:"config,omitempty"`
	// Reads lists the record fields the stage reads (TextField for the
	// text), matched ignoring case. An edit to a stored record re-enters
	// the pipeline at the first stage that reads a changed field; a stage
	// with nil Reads may read anything, so any edit re-enters at it. An
	// empty, non-nil Reads reads no field (only earlier outputs).
	Reads []string `json:"reads,omitempty"`
}

// StageNames is the names of defs, in order.
func StageNames(defs []StageDef) []string {
	out := make([]string, len(defs))
	for i, d := range defs {
		out[i] = d.Name
	}
	return out
}

// ReadsAny reports whether the stage reads any of the named fields.
func (d StageDef) ReadsAny(fields []string) bool {
	if d.Reads == nil {
		return len(fields) > 0
	}
	for _, r := range d.Reads {
		for _, f := range fields {
			if strings.EqualFold(r, f) {
				return true
			}
		}
	}
	return false
}

// IngestStats counts what one Ingest call did.
type IngestStats struct {
	New       int `json:"new"`
	Unchanged int `json:"unchanged"`
	// Changed counts edited ids that re-entered the pipeline.
	Changed int `json:"changed"`
	// Updated counts edited ids whose changed fields no stage reads
	// (yet), or whose item had not reached a stage reading them: the
	// record was replaced, no work was redone.
	Updated int `json:"updated,omitempty"`
}

// Add returns s plus o.
func (s IngestStats) Add(o IngestStats) IngestStats {
	return IngestStats{New: s.New + o.New, Unchanged: s.Unchanged + o.Unchanged, Changed: s.Changed + o.Changed, Updated: s.Updated + o.Updated}
}

// StageCounts is how many items are queued at, dead at, or have an output
// of one stage.
type StageCounts struct {
	Stage  string `json:"stage"`
	Queued int    `json:"queued"`
	Dead   int    `json:"dead"`
	Output int    `json:"output"`
}

// Counts summarises a store.
type Counts struct {
	Items  int           `json:"items"`
	Done   int           `json:"done"`
	Stages []StageCounts `json:"stages"`
}

// Location is where one item is.
type Location struct {
	ID     string                     `json:"id"`
	Stage  string                     `json:"stage"`
	Status string                     `json:"status"` // queued, dead or done
	Record Record                     `json:"record"`
	Output map[string]json.RawMessage `json:"outputs,omitempty"`
	Dead   *DeadLetter                `json:"dead,omitempty"`
	// History holds the item's earlier dead letters, oldest first.
	History []PastDeadLetter `json:"dead_history,omitempty"`
	// BatchSends is how many batch jobs asked for a queued item at its
	// stage since it last entered that queue other than by a job giving
	// it back (what a batch stage's max_sends bounds); 0 otherwise.
	BatchSends int `json:"batch_sends,omitempty"`
}

// DeadEntry is one dead letter with its item's id and text.
type DeadEntry struct {
	ID   string     `json:"id"`
	Text string     `json:"text"`
	Dead DeadLetter `json:"dead"`
}

// PastDeadLetter is a dead letter that no longer holds its item: a
// re-queue, a re-run or an edit of the record sent the item back to a
// queue. Dead letters are never deleted (only Prune removes an item with
// its history).
type PastDeadLetter struct {
	Stage string     `json:"stage"`
	Dead  DeadLetter `json:"dead"`
	// Retired is when the item left the dead letter, and Reason why:
	// "requeue", "rerun" or "edited".
	Retired time.Time `json:"retired"`
	Reason  string    `json:"reason"`
}
