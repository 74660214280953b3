package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
)

// jobDatabase is what a job run needs of its store beyond
// pipeline.Database: the job it was last run with. Both stores keep it
// (a bbolt file in its meta bucket, PostgreSQL in its meta table).
type jobDatabase interface {
	pipeline.Database
	SaveJob(job []byte) error
	Job() ([]byte, error)
}

var (
	_ jobDatabase = (*store.DB)(nil)
	_ jobDatabase = (*postgres.DB)(nil)
)

// openJobDatabase opens (or creates) the job's database at path with
// the job's stage list: a bbolt file, which may grow the stored list
// (AddedStages), or a PostgreSQL pipeline, whose list is fixed once
// created.
func openJobDatabase(path string, defs []store.StageDef) (jobDatabase, error) {
	// The path is the job file's db or --db's, which overrides it.
	db, err := openDatabase(path, dbOpen{Stages: defs, Flag: "db in the job file (or --db)"}, func() (*store.DB, error) {
		return store.Open(path, store.Options{Stages: defs})
	})
	switch {
	case errors.Is(err, postgres.ErrDefinition):
		return nil, usagef("%v: a PostgreSQL pipeline keeps the stage list it was created with (adding a stage is for a database file): run the job in another database, or keep its stages", err)
	case errors.Is(err, store.ErrDefinition):
		return nil, usagef("%v", err)
	case err != nil:
		return nil, err
	}
	jdb, ok := db.(jobDatabase)
	if !ok {
		db.Close()
		return nil, fmt.Errorf("--db %s: this store cannot keep a job", postgres.Redact(path))
	}
	return jdb, nil
}

// addedStages lists the stages the open added to the stored list (a
// bbolt file only).
func addedStages(db pipeline.Database) []string {
	if g, ok := db.(interface{ AddedStages() []string }); ok {
		return g.AddedStages()
	}
	return nil
}

// readStoredJob reads the job recorded in the database at path (a file
// or a PostgreSQL pipeline) without opening it for writing: nil, nil
// when there is no database or it records no job.
func readStoredJob(path string) ([]byte, error) {
	// The path is judged first, as every command does: an input file
	// given as --db gets the "use --input" hint, not the store's error.
	if err := checkDBPath(path, false); err != nil {
		return nil, err
	}
	if isPostgres(path) {
		_, job, err := postgres.ReadStored(context.Background(), path, "")
		if errors.Is(err, postgres.ErrNotFound) {
			return nil, nil
		}
		return job, err
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		return nil, nil
	}
	return store.ReadJob(path)
}

// readStoredStages reads the stage list recorded in the database at path
// (a file, waiting up to wait for a lock a run holds, or a PostgreSQL
// pipeline).
func readStoredStages(path string, wait time.Duration) ([]store.StageDef, error) {
	if isPostgres(path) {
		if err := checkPostgresDSN(path); err != nil {
			return nil, err // before connecting with it: a password in it, say
		}
		stages, _, err := postgres.ReadStored(context.Background(), path, "")
		return stages, err
	}
	return store.ReadDefinition(path, wait)
}
