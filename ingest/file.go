package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Result is what reading one input file found.
type Result struct {
	// Path is the file read.
	Path string
	// Lines is the number of physical data lines (after a CSV header,
	// without blank lines), good or bad.
	Lines int
	// BadLines is how many of Lines were skipped (see Problems).
	BadLines int
	// Records is the number of good records.
	Records int
	// Problems lists the first MaxProblems skipped lines, by line;
	// ProblemCount counts them all.
	Problems     []Problem
	ProblemCount int
	// Warnings say which fields in use most rows lack, and how many dates
	// or ratings could not be read, with examples (see Reader.Warnings).
	Warnings []string
	// DateOrder, when not "", says how the file's ambiguous day/month dates
	// were read and why: the order is decided once for the whole file.
	DateOrder string
	// Fields is the names of the fields the good records have besides
	// the id and the text (up to 1000), sorted: what a prompt template
	// or a condition may read as .Fields.NAME.
	Fields []string
	// NumberColumns is the CSV columns whose values are all numbers
	// (written as JSON numbers are): their fields are typed
	// pipeline.FieldNumber, so a condition compares them as numbers.
	NumberColumns []string
}

// RefusedError is returned by Check for a file most of whose lines cannot
// be read: probably the wrong file, format or field names. Nothing was
// ingested from it.
type RefusedError struct {
	Result Result
	names  Names
}

func (e *RefusedError) Error() string {
	n := e.names.withDefaults()
	return fmt.Sprintf("input %s: %d of %d lines could not be read: is it the right file, %s, %s and %s? Nothing was ingested from it: fix the file or the options and run again",
		e.Result.Path, e.Result.BadLines, e.Result.Lines, n.Format, n.IDField, n.TextField)
}

// refused reports whether most lines of a read failed.
func (r Result) refused() bool { return r.Lines > 0 && r.BadLines*2 > r.Lines }

// Plan is an input file read once, checked and accepted, ready to be
// applied. Check makes it; nothing is written until Apply.
type Plan struct {
	path   string
	opt    Options
	size   int64
	mtime  time.Time
	result Result
	sample *pipeline.Record
}

// Check reads the file at path once, writing nothing, and decides whether
// to accept it: it is refused with a *RefusedError when more than half of
// its physical lines fail. It also decides, for the whole file, the
// day/month order of its dates. Other errors are the input's (it cannot be
// opened or read, is not a regular file, is UTF-16, has an unusable CSV
// header) or ctx's, wrapped. Check honours ctx while reading, even inside
// one very long line.
func Check(ctx context.Context, path string, opt Options) (*Plan, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	f, fi, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rd, err := NewReader(&ctxReader{ctx: ctx, r: f}, opt)
	if err != nil {
		return nil, err
	}
	records := 0
	var first *pipeline.Record
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", path, err)
		}
		if first == nil {
			first = &rec
		}
		records++
	}
	order, note := rd.fields.evidence.Decide()
	res := rd.result(path, records)
	res.DateOrder = note
	res.Fields = rd.types.fieldNames()
	if opt.Format != JSONL {
		res.NumberColumns = rd.types.numberColumns()
	}
	if res.refused() {
		return nil, &RefusedError{Result: res, names: opt.Names}
	}
	opt.dateOrder = order
	opt.numberColumns = res.NumberColumns
	p := &Plan{path: path, opt: opt, size: fi.Size(), mtime: fi.ModTime(), result: res}
	if first != nil {
		// Its numeric columns typed, as Apply will read it.
		(&Reader{opt: opt}).setTypes(first)
		p.sample = first
	}
	return p, nil
}

// Sample is the file's first good record as Apply reads it, or nil for a
// file without one: checks run templates and conditions on it before
// anything is ingested or sent.
func (p *Plan) Sample() *pipeline.Record { return p.sample }

// Result returns what Check found: the counts, problems and date order
// that Apply will meet again. Warnings are known only after Apply, once
// dates have been read in the decided order.
func (p *Plan) Result() Result { return p.result }

// Apply reads the file again and hands its good records to apply in
// batches of up to batch records (1000 when batch <= 0), in input order;
// the slice is reused after apply returns. It stops at the first error of
// apply, of the input or of ctx (checked between batches and while
// reading), returning what was read so far; records already applied stay
// applied. A file changed since Check (size, time, or a different count of
// lines or records on this pass) is an error naming the file.
func (p *Plan) Apply(ctx context.Context, batch int, apply func([]pipeline.Record) error) (Result, error) {
	if batch <= 0 {
		batch = 1000
	}
	f, fi, err := openRegular(p.path)
	if err != nil {
		return Result{Path: p.path}, err
	}
	defer f.Close()
	changed := fmt.Errorf("input %s changed since it was checked: run again (records already ingested from it are kept)", p.path)
	if fi.Size() != p.size || !fi.ModTime().Equal(p.mtime) {
		return Result{Path: p.path}, changed
	}
	rd, err := NewReader(&ctxReader{ctx: ctx, r: f}, p.opt)
	if err != nil {
		return Result{Path: p.path}, err
	}
	recs := make([]pipeline.Record, 0, batch)
	n := 0
	flush := func() error {
		if len(recs) == 0 {
			return nil
		}
		if err := apply(recs); err != nil {
			return err
		}
		n += len(recs)
		recs = recs[:0]
		return ctx.Err()
	}
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return rd.result(p.path, n), fmt.Errorf("input %s: %w", p.path, err)
		}
		recs = append(recs, rec)
		if len(recs) == batch {
			if err := flush(); err != nil {
				return rd.result(p.path, n), err
			}
		}
	}
	if err := flush(); err != nil {
		return rd.result(p.path, n), err
	}
	res := rd.result(p.path, n)
	res.DateOrder = p.result.DateOrder
	res.Fields, res.NumberColumns = p.result.Fields, p.result.NumberColumns
	res.Warnings = rd.Warnings()
	if res.Lines != p.result.Lines || res.BadLines != p.result.BadLines || res.Records != p.result.Records {
		return res, changed
	}
	return res, nil
}

// Load is Check then Apply: the file is applied only if it is accepted.
func Load(ctx context.Context, path string, opt Options, batch int, apply func([]pipeline.Record) error) (Result, error) {
	p, err := Check(ctx, path, opt)
	if err != nil {
		var re *RefusedError
		if errors.As(err, &re) {
			return re.Result, err
		}
		return Result{Path: path}, err
	}
	return p.Apply(ctx, batch, apply)
}

func (r *Reader) result(path string, records int) Result {
	return Result{Path: path, Lines: r.nLines, BadLines: r.badLines, Records: records, Problems: r.Problems(), ProblemCount: r.nProblems}
}

// openRegular opens path for reading, refusing what is not a regular
// file: the input is read twice, and a FIFO or device would give the
// second pass different bytes, or hang.
func openRegular(path string) (*os.File, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("open input: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("open input: %w", err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("input %s is not a regular file (%s): it is read twice, once to check it and once to ingest it; save it to a file first", path, fi.Mode().Type())
	}
	return f, fi, nil
}

// ctxReader fails its reads once ctx is done, so that a Ctrl-C stops a
// read even in the middle of one very long line.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
