package ingest

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

func (r *Reader) nextCSV() (pipeline.Record, error) {
	if !r.headerRead {
		if err := r.readHeader(); err != nil {
			return pipeline.Record{}, err
		}
	}
	for {
		row, err := r.csv.Read()
		if err == io.EOF {
			return pipeline.Record{}, io.EOF
		}
		if err != nil {
			var pe *csv.ParseError
			var oq *openQuoteError
			switch {
			case errors.As(err, &pe):
				r.nLines++
				r.report(pe.StartLine, "", csvReason(pe))
				continue
			case errors.As(err, &oq):
				r.report(oq.start, "", oq.reason())
				return pipeline.Record{}, oq
			}
			return pipeline.Record{}, r.readErr(err)
		}
		r.nLines++
		lineNo, _ := r.csv.FieldPos(0)
		rec, reason := r.parseRow(row)
		rec.Line = lineNo
		if reason != "" {
			r.report(lineNo, rec.ID, reason)
			continue
		}
		if r.accept(rec) {
			return rec, nil
		}
	}
}

// readHeader reads the header row and finds the id and text columns.
func (r *Reader) readHeader() error {
	row, err := r.csv.Read()
	if err == io.EOF {
		return io.EOF
	}
	if err != nil {
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			return fmt.Errorf("line %d: cannot read the CSV header (%v): the first line must name the columns", pe.StartLine, pe.Err)
		}
		return r.readErr(err)
	}
	if r.nProblems > 0 {
		return fmt.Errorf("line %d: %s; the first line must be the CSV header", r.problems[0].Line, r.problems[0].Reason)
	}
	r.headerRead = true
	r.header = make([]string, len(row))
	r.idCol, r.textCol = -1, -1
	where := make(map[string]int, len(row))
	for i, name := range row {
		name = strings.TrimSpace(name)
		r.header[i] = name
		if name == "" {
			continue // e.g. the unnamed index column pandas writes
		}
		if j, ok := where[name]; ok {
			return fmt.Errorf("CSV header names column %q twice (columns %d and %d): rename one", name, j+1, i+1)
		}
		where[name] = i
		switch name {
		case r.opt.IDField:
			r.idCol = i
		case r.opt.TextField:
			r.textCol = i
		}
	}
	var missing []string
	if r.idCol < 0 {
		missing = append(missing, fmt.Sprintf("no %q column for the id (pass --id-field to name it)", r.opt.IDField))
	}
	if r.textCol < 0 {
		missing = append(missing, fmt.Sprintf("no %q column for the text (pass --text-field to name it)", r.opt.TextField))
	}
	if missing != nil {
		quoted := make([]string, len(r.header))
		for i, h := range r.header {
			quoted[i] = fmt.Sprintf("%q", h)
		}
		return fmt.Errorf("CSV header has %s; its columns are %s", strings.Join(missing, " and "), strings.Join(quoted, ", "))
	}
	return nil
}

// parseRow turns one CSV row into a record (without Line), or returns why
// it cannot, with the id when it got that far. Empty cells are left out of
// Fields, as a JSON null is.
func (r *Reader) parseRow(row []string) (pipeline.Record, string) {
	if len(row) != len(r.header) {
		return pipeline.Record{}, fmt.Sprintf("row has %d columns, header has %d: fix the row (a field holding %q must be quoted) or remove it", len(row), len(r.header), r.opt.Comma)
	}
	rec := pipeline.Record{ID: row[r.idCol], Text: row[r.textCol]}
	if reason := checkID(r.opt.IDField, rec.ID); reason != "" {
		return rec, reason
	}
	for i, v := range row {
		if strings.IndexByte(v, 0) >= 0 {
			return rec, fmt.Sprintf("NUL byte (0x00) in column %q: the file may be binary or UTF-16; fix or remove the row", r.header[i])
		}
		if i == r.idCol || i == r.textCol || r.header[i] == "" || v == "" {
			continue
		}
		if rec.Fields == nil {
			rec.Fields = make(map[string]string, len(row))
		}
		rec.Fields[r.header[i]] = v
	}
	return rec, ""
}

func csvReason(pe *csv.ParseError) string {
	switch {
	case errors.Is(pe.Err, csv.ErrBareQuote):
		return fmt.Sprintf(`invalid CSV: a " inside an unquoted field (line %d, column %d): quote the whole field and double each " inside it`, pe.Line, pe.Column)
	case errors.Is(pe.Err, csv.ErrQuote):
		return fmt.Sprintf(`invalid CSV: a quoted field is not closed properly (line %d, column %d): double each " inside it and end it with a single "`, pe.Line, pe.Column)
	}
	return fmt.Sprintf("invalid CSV (%v at line %d, column %d): fix or remove the row", pe.Err, pe.Line, pe.Column)
}

// csvFeed is the io.Reader under the csv.Reader. It hands over the input
// line by line, so that a line over the limit is dropped (replaced by an
// empty line, which csv skips and which keeps line numbers right) before
// encoding/csv, which buffers whole records, ever sees it; and it stops the
// input when a quoted field stays open past the limit.
type csvFeed struct {
	lines   *lineReader
	quote   quoteTracker
	onLong  func(line)
	pending []byte
	buf     []byte
	err     error
}

func (f *csvFeed) Read(p []byte) (int, error) {
	for len(f.pending) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		l, err := f.lines.next()
		if err != nil {
			f.err = err
			continue
		}
		if err := f.quote.line(l); err != nil {
			f.err = err
			continue
		}
		if l.tooLong {
			f.onLong(l)
		}
		f.buf = append(append(f.buf[:0], l.data...), '\n')
		f.pending = f.buf
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	return n, nil
}

type quoteState uint8

const (
	fieldStart   quoteState = iota
	unquoted                // inside a field that did not start with a quote
	quoted                  // inside a quoted field
	closingQuote            // just after a quote inside a quoted field
	badLine                 // csv reports an error and drops the rest of the line
)

// quoteTracker follows, byte by byte, what encoding/csv (LazyQuotes off,
// TrimLeadingSpace off, no comment character) makes of the lines it is
// fed, to know at each line end whether a quoted field is still open, and
// so how many bytes csv is holding for the record.
type quoteTracker struct {
	comma byte
	max   int64
	state quoteState
	start int   // line the current record started on
	size  int64 // bytes of the current record so far
}

// line feeds one line (l.data, or an empty line if l is too long) and
// returns an *openQuoteError once a quoted field has stayed open for more
// than max bytes.
func (t *quoteTracker) line(l line) error {
	if t.size == 0 {
		t.start = l.no
	}
	for _, c := range l.data {
		switch t.state {
		case fieldStart:
			switch c {
			case '"':
				t.state = quoted
			case t.comma:
			default:
				t.state = unquoted
			}
		case unquoted:
			switch c {
			case '"':
				t.state = badLine
			case t.comma:
				t.state = fieldStart
			}
		case quoted:
			if c == '"' {
				t.state = closingQuote
			}
		case closingQuote:
			switch c {
			case '"':
				t.state = quoted
			case t.comma:
				t.state = fieldStart
			default:
				t.state = badLine
			}
		}
	}
	t.size += l.size + 1
	if t.state == quoted {
		if t.size > t.max {
			return &openQuoteError{start: t.start, size: t.size, max: t.max}
		}
		return nil
	}
	t.state, t.size = fieldStart, 0
	return nil
}

// openQuoteError stops a CSV input whose quoted field runs on for more than
// the line limit: past that point csv would buffer the rest of the file.
type openQuoteError struct {
	start     int
	size, max int64
}

func (e *openQuoteError) reason() string {
	return fmt.Sprintf(`a quoted field opened on this line is still open after %d bytes, over the %d-byte limit: probably a missing closing quote ("); fix it, or raise --max-line-bytes if the field really is that long`, e.size, e.max)
}

func (e *openQuoteError) Error() string {
	return fmt.Sprintf("line %d: %s", e.start, e.reason())
}
