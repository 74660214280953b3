package postgres

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// TestDB_StoredJob: the job a pipeline records reads back through the
// handle and, with the stage list, through ReadStored, which needs no
// stage list and finds no pipeline where there is none.
func TestDB_StoredJob(t *testing.T) {
	db, u := openNew(t, Options{})
	ctx := context.Background()
	if job, err := db.Job(); err != nil || job != nil {
		t.Fatalf("Job of a new pipeline = %q, %v; want none", job, err)
	}
	stages, job, err := ReadStored(ctx, u, "")
	if err != nil || job != nil || !slices.EqualFunc(stages, storetest.Stages, func(a, b pipeline.StageDef) bool { return a.Name == b.Name }) {
		t.Fatalf("ReadStored of a pipeline without a job = %v, %q, %v", stages, job, err)
	}
	for _, want := range []string{"stages: [a]", "stages: [a, b]"} {
		if err := db.SaveJob([]byte(want)); err != nil {
			t.Fatal(err)
		}
		if got, err := db.Job(); err != nil || string(got) != want {
			t.Fatalf("Job = %q, %v; want %q", got, err, want)
		}
		if _, got, err := ReadStored(ctx, u, ""); err != nil || string(got) != want {
			t.Fatalf("ReadStored job = %q, %v; want %q", got, err, want)
		}
	}
	if _, _, err := ReadStored(ctx, u, "elsewhere"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadStored of a schema without a pipeline: %v, want ErrNotFound", err)
	}
}
