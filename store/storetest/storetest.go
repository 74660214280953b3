// Package storetest is the contract every pipeline.Database passes: the
// bbolt store (store), the PostgreSQL store (store/postgres) and any
// in-memory fake. Run drives a fresh database through every transition
// (ingest, success, dead letter, re-queue, re-run, edit, prune) and checks
// after each step the invariants the runner and the commands rely on:
// each item is in exactly one place, re-applying anything is a no-op,
// a transition made stale by an edit, a re-run or a re-queue is ignored,
// dead letters survive in their item's history, and the stored tally
// equals the one recomputed from the stored outputs. A store that
// implements pipeline.Claimer (shared by many processes) is also held to
// the claim contract: leases, fencing tokens, fenced commits.
//
// The suite plays the stages itself with deterministic outputs (see
// Output), so it needs no network and no stage implementation.
package storetest

import (
	"slices"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Stages is the definition open must create the database with: a text
// stage, an LLM-like stage reading the text, and an aggregate reading the
// app and rating fields and folding a pipeline.Fact.
var Stages = []pipeline.StageDef{
	{Name: "sanitize", Fingerprint: "s1", Reads: []string{pipeline.TextField}},
	{Name: "classify", Fingerprint: "c1", Reads: []string{pipeline.TextField}},
	{Name: "aggregate", Fingerprint: "a1", Reads: []string{"app", "rating"}},
}

// Open returns a new, empty database defined by Stages, closed when the
// test ends. Run checks it after each case when its store has a Check.
type Open func(t testing.TB) pipeline.Database

// Run runs the contract against databases from open, one per subtest.
func Run(t *testing.T, open Open) {
	tests := []struct {
		name string
		fn   func(t *testing.T, db pipeline.Database)
	}{
		{"Definition", testDefinition},
		{"IngestNewUnchangedChanged", testIngest},
		{"TransitionsToDone", testTransitions},
		{"CommitIsIdempotent", testCommitIdempotent},
		{"StaleTransitionsIgnored", nil},
		{"FieldEditReentersAtFirstReader", testFieldEdits},
		{"InvalidUTF8TextEditKeepsOutputs", testInvalidUTF8Edit},
		{"Requeue", testRequeue},
		{"Rerun", testRerun},
		{"DeadLetterHistory", testHistory},
		{"DeadLetterFacts", testDeadLetterFacts},
		{"Prune", testPrune},
		{"RatingsExact", testRatings},
		{"TallyEqualsRecomputation", testTallyRandom},
		{"Usage", testUsage},
		{"AnswerCacheAndLedger", testAnswerCache},
		{"RunsAndSeries", testRuns},
		{"LearnedLimit", testLearnedLimit},
		{"Claims", testClaims},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fn == nil {
				testStale(t, open)
				return
			}
			db := open(t)
			if got := pipeline.StageNames(db.Stages()); !slices.Equal(got, pipeline.StageNames(Stages)) {
				t.Fatalf("open returned a database with stages %v, want storetest.Stages %v", got, pipeline.StageNames(Stages))
			}
			tc.fn(t, db)
			Invariants(t, db)
			checked(t, db)
		})
	}
}

// checker is a store that verifies its own data (each store's Check:
// for bbolt the pages, dictionary, long texts, history, counts and
// tally; for PostgreSQL the queues, outputs, tally and cube).
type checker interface {
	Check() ([]string, error)
}

// checked fails the test unless db, when its store can verify itself,
// passes that verification: a case asserts what it did through the
// interface, Check holds the data to what every path that wrote it must
// leave.
func checked(t testing.TB, db pipeline.Database) {
	t.Helper()
	c, ok := db.(checker)
	if !ok {
		return
	}
	problems, err := c.Check()
	if err != nil {
		t.Errorf("check at the end of the case: %v", err)
	}
	for _, p := range problems {
		t.Errorf("check at the end of the case: %s", p)
	}
}
