package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// ingestBatch is how many records one ingest transaction holds.
const ingestBatch = 1000

// ingestFile streams the input into the DB in batches of one transaction
// each. Bad lines are reported and skipped; a file where most lines fail is
// an error, but what was ingested is kept.
func ingestFile(ctx context.Context, db *store.DB, in *inputOptions, stderr io.Writer) error {
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
			return fmt.Errorf("input %s: %w (the %d records read before it are kept)", in.Path, err, total.New+total.Changed+total.Unchanged)
		}
		batch = append(batch, rec)
		if len(batch) == ingestBatch {
			if err := flush(); err != nil {
				return err
			}
			if ctx.Err() != nil {
				return fmt.Errorf("interrupted while ingesting %s after %d records (all kept): %w", in.Path, total.New+total.Changed+total.Unchanged, pipeline.ErrStopped)
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	problems := rd.Problems()
	for i, p := range problems {
		if i == 20 {
			fmt.Fprintf(stderr, "input %s: ... and %d more skipped lines\n", in.Path, rd.ProblemCount()-20)
			break
		}
		fmt.Fprintf(stderr, "input %s: %s\n", in.Path, p)
	}
	fmt.Fprintf(stderr, "ingested %s: %d new, %d edited (re-entering at the first stage), %d unchanged, %d lines skipped\n",
		in.Path, total.New, total.Changed, total.Unchanged, rd.ProblemCount())
	if lines := rd.Lines(); lines > 0 && rd.ProblemCount()*2 > lines {
		return fmt.Errorf("input %s: %d of %d lines could not be read: is it the right file, --format, --id-field and --text-field? "+
			"(the %d good lines are kept: fix the file and run again, or run without --input to process just them)",
			in.Path, rd.ProblemCount(), lines, total.New+total.Changed+total.Unchanged)
	}
	return nil
}
