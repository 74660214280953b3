package cli

import (
	"time"

	"github.com/sawtooth-dev/sawtooth/store"
)

// stageNames is the pipeline every sawtooth DB holds, in order.
var stageNames = []string{"sanitize", "classify", "aggregate"}

// namedStages is the stage definition by names only: what a command that
// does not run the stages opens the DB with.
func namedStages() []store.StageDef {
	defs := make([]store.StageDef, len(stageNames))
	for i, n := range stageNames {
		defs[i].Name = n
	}
	return defs
}

// openReadOnly opens the DB for a command that only reads. Stage
// fingerprints do not matter here, only the names.
func openReadOnly(path string) (*store.DB, error) {
	return store.Open(path, store.Options{Stages: namedStages(), ReadOnly: true, LockTimeout: 500 * time.Millisecond})
}

// openWritable opens the DB for a command that changes it without running.
func openWritable(path string) (*store.DB, error) {
	return store.Open(path, store.Options{Stages: namedStages(), MustExist: true})
}
