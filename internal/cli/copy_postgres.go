package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
	"github.com/sawtooth-dev/sawtooth/store/storecopy"
	"github.com/sawtooth-dev/sawtooth/store/storecopy/pgstage"
)

// copyToPostgres copies src into the PostgreSQL pipeline at to, all or
// nothing (package pgstage): killed halfway, a copy left the items
// copied so far as a pipeline that status called consistent and run
// resumed, the rest missing.
func copyToPostgres(src pipeline.Database, to string, defs []store.StageDef, out, errOut io.Writer) error {
	ctx := context.Background()
	dst, err := pgstage.Stage(ctx, to, defs)
	if err != nil {
		var full *pgstage.NotEmptyError
		var live *pgstage.LiveRunsError
		switch {
		case errors.Is(err, pgstage.ErrCopyUnderWay):
			return &wordedError{err: err, msg: fmt.Sprintf("--to %s: %v: wait for it to finish, or stop it and copy again", postgres.Redact(to), err)}
		case errors.As(err, &full), errors.As(err, &live), errors.Is(err, postgres.ErrNotSawtooth):
			return usage(err)
		}
		return wordStoreError(err, "--to")
	}
	defer dst.Close()
	nothing := "nothing was written to " + postgres.Redact(to) // Close drops the staged copy
	st, err := storecopy.Copy(src, dst.DB, copyProgress(errOut))
	if err != nil {
		return fmt.Errorf("copy %s to %s: %w (%s)", src.Path(), postgres.Redact(to), copyHint(err), nothing)
	}
	if err := dst.Publish(ctx); err != nil {
		var full *pgstage.NotEmptyError
		var live *pgstage.LiveRunsError
		switch {
		case errors.As(err, &full):
			return usagef("--to %s gained items while the copy ran (a run started on it?): it is left as it is and %s; copy into another, empty database", postgres.Redact(to), nothing)
		case errors.As(err, &live):
			return usagef("--to %s: a run started on it while the copy ran (%s): it is left as it is and %s; let the run end (or stop it) and copy again, or copy into another, empty database", postgres.Redact(to), strings.Join(live.Runs, ", "), nothing)
		}
		return fmt.Errorf("copy %s to %s: %w (%s)", src.Path(), postgres.Redact(to), err, nothing)
	}
	copied(out, st, src.Path(), postgres.Redact(to))
	return nil
}
