package cli

import (
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
	"github.com/sawtooth-dev/sawtooth/store"
)

// checkInput checks the input file before anything else is touched: it
// exists and is a regular file, its format is known (and becomes
// in.Format), and its start reads as that format with the id and text
// fields asked for. Problems on single lines are left to the ingest,
// which reports them.
func checkInput(in *inputOptions) error {
	fi, err := os.Stat(in.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return usagef("--input %s: no such file", in.Path)
	case err != nil:
		return usagef("--input %s: %v", in.Path, unwrapPath(err))
	case fi.IsDir():
		return usagef("--input %s is a directory: give the file of items", in.Path)
	case !fi.Mode().IsRegular():
		return usagef("--input %s is not a regular file (%s)", in.Path, fi.Mode().Type())
	}
	format := ingest.Format(strings.ToLower(in.Format))
	if format == "" {
		if format, err = ingest.DetectFormat(in.Path); err != nil {
			return usage(err)
		}
	} else if !slices.Contains(inputFormats, string(format)) {
		return usagef("--format %q: want %s", in.Format, strings.Join(inputFormats, ", "))
	}
	in.Format = string(format)
	f, err := os.Open(in.Path)
	if err != nil {
		return usagef("--input %s: %v", in.Path, unwrapPath(err))
	}
	defer f.Close()
	rd, err := ingest.NewReader(io.LimitReader(f, 1<<20), ingest.Options{Format: format, IDField: in.IDField, TextField: in.TextField, MaxLineBytes: in.MaxLine})
	if err != nil {
		return usagef("input %s: %v", in.Path, err)
	}
	// Not a usage error: the file is the one asked for, its content is
	// wrong (UTF-16, a CSV header without the fields, ...).
	if _, err := rd.Next(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("input %s: %w", in.Path, err)
	}
	return nil
}

// ingestBatch is how many records one ingest transaction holds.
const ingestBatch = 1000

// ingestFile streams the input into the DB in batches of one transaction
// each. Bad lines are reported and skipped; a file where most lines fail is
// an error, but what was ingested is kept. The fields the aggregate
// reads are checked on the way (fc).
func ingestFile(ctx context.Context, db *store.DB, in *inputOptions, fc *fieldCheck, stderr io.Writer) error {
	f, err := os.Open(in.Path)
	if err != nil {
		return fmt.Errorf("open input: %w", err)
	}
	defer f.Close()
	format := ingest.Format(strings.ToLower(in.Format))
	if format == "" {
		if format, err = ingest.DetectFormat(in.Path); err != nil {
			return usagef("%v", err)
		}
	}
	rd, err := ingest.NewReader(f, ingest.Options{Format: format, IDField: in.IDField, TextField: in.TextField, MaxLineBytes: in.MaxLine})
	if err != nil {
		return usagef("input %s: %v", in.Path, err)
	}
	var (
		total store.IngestStats
		batch []pipeline.Record
	)
	flush := func() error {
		st, err := db.Ingest(batch)
		if err != nil {
			return fmt.Errorf("ingest %s: %w", in.Path, err)
		}
		total = total.Add(st)
		batch = batch[:0]
		return nil
	}
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if len(batch) > 0 {
				if ferr := flush(); ferr != nil {
					return ferr
				}
			}
			if n := total.New + total.Changed + total.Unchanged; n > 0 {
				return fmt.Errorf("input %s: %w (the %s read before it are kept)", in.Path, err, plural(n, "record"))
			}
			return fmt.Errorf("input %s: %w (nothing was ingested)", in.Path, err)
		}
		batch = append(batch, rec)
		fc.add(rec)
		if len(batch) == ingestBatch {
			if err := flush(); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted while ingesting %s after %s (all kept): %w", in.Path, plural(total.New+total.Changed+total.Unchanged, "record"), pipeline.ErrStopped)
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	problems := rd.Problems()
	for i, p := range problems {
		if i == 20 {
			more := rd.ProblemCount() - 20
			fmt.Fprintf(stderr, "input %s: ... and %d more skipped %s\n", in.Path, more, nounFor(more, "line"))
			break
		}
		fmt.Fprintf(stderr, "input %s: %s\n", in.Path, p)
	}
	fc.report(stderr, in.Path)
	fmt.Fprintf(stderr, "ingested %s: %d new, %d edited (re-entering at the first stage), %d unchanged, %s skipped\n",
		in.Path, total.New, total.Changed, total.Unchanged, plural(rd.ProblemCount(), "line"))
	if lines := rd.Lines(); lines > 0 && rd.ProblemCount()*2 > lines {
		kept := "nothing was ingested: fix the file and run again"
		if n := total.New + total.Changed + total.Unchanged; n > 0 {
			kept = fmt.Sprintf("the %s are kept: fix the file and run again, or run without --input to process just them", plural(n, "good line"))
		}
		return fmt.Errorf("input %s: %d of %d lines could not be read: is it the right file, --format, --id-field and --text-field? (%s)",
			in.Path, rd.ProblemCount(), lines, kept)
	}
	return nil
}
