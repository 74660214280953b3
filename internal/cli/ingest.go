package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
)

// checkInput checks the input file before anything is written: a path
// that names nothing or the wrong kind of file, or an unknown --format, is
// a usage error; then the file is read once (ingest.Check) and accepted or
// refused, a refused file's problems printed. The plan it returns is
// applied by ingestFile once the DB is open.
func checkInput(ctx context.Context, o *pipelineOptions, in *inputOptions, stderr io.Writer) (*ingest.Plan, error) {
	fi, err := os.Stat(in.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, usagef("--input %s: no such file", in.Path)
	case err != nil:
		return nil, usagef("--input %s: %v", in.Path, unwrapPath(err))
	case fi.IsDir():
		return nil, usagef("--input %s is a directory: give the file of items", in.Path)
	case !fi.Mode().IsRegular():
		return nil, usagef("--input %s is not a regular file (%s)", in.Path, fi.Mode().Type())
	}
	format := ingest.Format(strings.ToLower(in.Format))
	if format == "" {
		if format, err = ingest.DetectFormatNamed(in.Path, cmp.Or(in.Names, flagInputNames)); err != nil {
			return nil, usage(err)
		}
	} else if !slices.Contains(inputFormats, string(format)) {
		return nil, usagef("--format %q: want %s", in.Format, strings.Join(inputFormats, ", "))
	}
	opt := ingest.Options{
		Format: format, IDField: in.IDField, TextField: in.TextField, MaxLineBytes: in.MaxLine, MaxFieldLines: in.MaxFieldLines,
		GroupBy: o.GroupBy, DateField: o.DateField, RatingField: o.RatingField, DateFormat: in.DateFormat, RatingRange: in.RatingRange, Names: cmp.Or(in.Names, flagInputNames),
		// A file need not have the default fields; one it lacks only in
		// most rows, or a field the user named, gets a warning.
		OptionalFields: append(slices.Clone(stages.DefaultGroupBy), stages.DefaultDateField, stages.DefaultRatingField),
	}
	if err := opt.Validate(); err != nil {
		return nil, usagef("input %s: %v", in.Path, err)
	}
	plan, err := ingest.Check(ctx, in.Path, opt)
	var refused *ingest.RefusedError
	switch {
	case errors.As(err, &refused):
		printProblems(stderr, refused.Result)
		return nil, err
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("interrupted while checking %s: nothing was ingested: %w", in.Path, pipeline.ErrStopped)
	case err != nil:
		// Not a usage error: the file is the one asked for, its content
		// is wrong (UTF-16, a CSV header without the fields, ...).
		return nil, err
	}
	return plan, nil
}

// ingestBatch is how many records one ingest transaction holds.
const ingestBatch = 1000

// ingestFile applies an accepted input to the DB in batches of one
// transaction each, and says what it did.
func ingestFile(ctx context.Context, db pipeline.Database, plan *ingest.Plan, stderr io.Writer) error {
	var total store.IngestStats
	res, err := plan.Apply(ctx, ingestBatch, func(batch []pipeline.Record) error {
		st, err := db.Ingest(batch)
		total = total.Add(st)
		return err
	})
	kept := total.New + total.Changed + total.Updated + total.Unchanged
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("interrupted while ingesting %s after %s (all kept): %w", res.Path, plural(kept, "record"), pipeline.ErrStopped)
	case err != nil && kept > 0:
		return fmt.Errorf("ingest %s: %w (the %s ingested before it are kept)", res.Path, err, plural(kept, "record"))
	case err != nil:
		return fmt.Errorf("ingest %s: %w (nothing was ingested)", res.Path, err)
	}
	printProblems(stderr, res)
	fmt.Fprintf(stderr, "ingested %s: %d new, %d edited (re-entering at the first stage that reads what changed), %d updated (no work redone), %d unchanged, %s skipped\n",
		res.Path, total.New, total.Changed, total.Updated, total.Unchanged, plural(res.BadLines, "line"))
	return nil
}

// printProblems prints the first 20 skipped lines of an input, and what
// it says about the date order and the fields the aggregate reads.
func printProblems(stderr io.Writer, res ingest.Result) {
	for i, p := range res.Problems {
		if i == 20 {
			more := res.ProblemCount - 20
			fmt.Fprintf(stderr, "input %s: ... and %d more skipped %s\n", res.Path, more, nounFor(more, "line"))
			break
		}
		fmt.Fprintf(stderr, "input %s: %s\n", res.Path, p)
	}
	if res.DateOrder != "" {
		fmt.Fprintf(stderr, "input %s: %s\n", res.Path, res.DateOrder)
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(stderr, "warning: input %s: %s\n", res.Path, w)
	}
}
