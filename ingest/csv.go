package ingest

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// longRecordLines is the span past which a good CSV record is pointed out
// in Warnings: a field that runs on for many lines may be two stray quotes
// merging the rows between them.
const longRecordLines = 10

func (r *Reader) nextCSV() (pipeline.Record, error) {
	if !r.headerRead {
		if err := r.readHeader(); err != nil {
			return pipeline.Record{}, err
		}
	}
	for {
		cr, err := r.records.next()
		if err == io.EOF {
			return pipeline.Record{}, io.EOF
		}
		if err != nil {
			return pipeline.Record{}, r.readErr(err)
		}
		switch {
		case cr.tooLong:
			r.skip(cr.start, 1, "", longLineReason(cr.size, r.opt))
			continue
		case cr.open:
			r.skip(cr.start, 1, "", cr.openReason(r.opt))
			continue
		}
		span := cr.end - cr.start + 1
		row, pe, err := r.parseCSV(cr)
		if err != nil {
			return pipeline.Record{}, r.readErr(err)
		}
		// A record over several lines that does not parse, or has the
		// wrong number of columns, is most likely a stray quote that ran
		// on into the rows below: they get their own chance.
		if pe != nil || (span > 1 && len(row) != len(r.header)) {
			reason := ""
			if pe != nil {
				reason = csvReason(pe, cr.start)
			} else {
				reason, _ = r.columnsReason(row)
			}
			if span > 1 {
				r.records.readAgainAfterFirst()
				reason += fmt.Sprintf("; the record spans lines %d-%d: only this line is skipped and the lines after it are read on their own", cr.start, cr.end)
				span = 1
			}
			r.skip(cr.start, span, "", reason)
			continue
		}
		rec, reason := r.parseRow(row)
		rec.Line = cr.start
		if reason != "" {
			r.skip(cr.start, span, rec.ID, reason)
			continue
		}
		r.nLines += span
		if span > longRecordLines {
			r.longRecords.add(fmt.Sprintf("lines %d-%d", cr.start, cr.end))
		}
		if r.accept(&rec, span) {
			return rec, nil
		}
	}
}

// parseCSV hands one record, whole, to encoding/csv. The feed ends after
// the record, so csv never reads ahead into the next one, whose lines may
// still be dropped or read again.
func (r *Reader) parseCSV(cr csvRecord) ([]string, *csv.ParseError, error) {
	r.feed.set(cr.data)
	row, err := r.csv.Read()
	var pe *csv.ParseError
	switch {
	case errors.As(err, &pe):
	case err != nil:
		return nil, nil, err
	}
	// The tracker ends records where csv does; a second row here means
	// they disagree, and the record is not trusted.
	if _, again := r.csv.Read(); again != io.EOF {
		for again != io.EOF && (again == nil || errors.As(again, new(*csv.ParseError))) {
			_, again = r.csv.Read()
		}
		return nil, &csv.ParseError{StartLine: 1, Line: 1, Column: 1, Err: errors.New("the record cannot be split into one row")}, nil
	}
	return row, pe, nil
}

// readHeader reads the header row and finds the id and text columns.
func (r *Reader) readHeader() error {
	cr, err := r.records.next()
	if err == io.EOF {
		return io.EOF
	}
	if err != nil {
		return r.readErr(err)
	}
	switch {
	case cr.tooLong:
		return fmt.Errorf("line %d: %s; the first line must be the CSV header", cr.start, longLineReason(cr.size, r.opt))
	case cr.open:
		return fmt.Errorf("line %d: cannot read the CSV header (a quoted field opened on it is never closed): the first line must name the columns", cr.start)
	}
	row, pe, err := r.parseCSV(cr)
	if err != nil {
		return r.readErr(err)
	}
	if pe != nil {
		return fmt.Errorf("line %d: cannot read the CSV header (%v): the first line must name the columns", cr.start, pe.Err)
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
		missing = append(missing, fmt.Sprintf("no %q column for the id (%s to name it)", r.opt.IDField, r.opt.Names.set(r.opt.Names.IDField)))
	}
	if r.textCol < 0 {
		missing = append(missing, fmt.Sprintf("no %q column for the text (%s to name it)", r.opt.TextField, r.opt.Names.set(r.opt.Names.TextField)))
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
	if reason, ok := r.columnsReason(row); !ok {
		return pipeline.Record{}, reason
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

// columnsReason says why row has the wrong number of columns, or returns
// ok.
func (r *Reader) columnsReason(row []string) (string, bool) {
	if len(row) == len(r.header) {
		return "", true
	}
	return fmt.Sprintf("row has %d columns, header has %d: fix the row (a field holding %q must be quoted) or remove it", len(row), len(r.header), r.opt.Comma), false
}

// csvReason explains a csv parse error of the record starting on physical
// line start (csv's own line numbers run on over every record it is fed).
func csvReason(pe *csv.ParseError, start int) string {
	line := start + pe.Line - pe.StartLine
	switch {
	case errors.Is(pe.Err, csv.ErrBareQuote):
		return fmt.Sprintf(`invalid CSV: a " inside an unquoted field (line %d, column %d): quote the whole field and double each " inside it`, line, pe.Column)
	case errors.Is(pe.Err, csv.ErrQuote):
		return fmt.Sprintf(`invalid CSV: a quoted field is not closed properly (line %d, column %d): double each " inside it and end it with a single "`, line, pe.Column)
	}
	return fmt.Sprintf("invalid CSV (%v at line %d, column %d): fix or remove the row", pe.Err, line, pe.Column)
}

// recordFeed is the io.Reader under the csv.Reader: it serves one record's
// bytes, then io.EOF until the next record is set. encoding/csv does not
// keep an io.EOF: it reads on when called again.
type recordFeed struct{ pending []byte }

func (f *recordFeed) set(b []byte) { f.pending = b }

func (f *recordFeed) Read(p []byte) (int, error) {
	if len(f.pending) == 0 {
		return 0, io.EOF
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	return n, nil
}

// csvRecord is one CSV record as physical lines, or a line that could not
// become one.
type csvRecord struct {
	// data is the record, each line followed by '\n'; valid until the next
	// call to csvRecords.next. Empty when tooLong or open.
	data []byte
	// start and end are the record's first and last physical lines.
	start, end int
	// size is the record's length in bytes, line endings included (for
	// tooLong, the line's length).
	size int64
	// tooLong marks a single line over MaxLineBytes, outside any quoted
	// field: skipped without being held.
	tooLong bool
	// open marks a quoted field that starts on line start and is still
	// open after MaxFieldLines lines, MaxLineBytes bytes or at the end of
	// the input. Only line start is dropped; the lines after it are read
	// again as records of their own.
	open bool
	// atEOF is set for an open record that reached the end of the input.
	atEOF bool
}

func (c csvRecord) openReason(opt Options) string {
	const tail = `: probably a missing closing quote ("); the line is skipped and the lines after it are read on their own. Fix the quote`
	switch {
	case c.atEOF:
		later := fmt.Sprintf("%d lines later", c.end-c.start)
		switch c.end - c.start {
		case 0:
			later = "on it"
		case 1:
			later = "1 line later"
		}
		return fmt.Sprintf("a quoted field opened on this line is never closed (the input ends %s)%s", later, tail)
	case c.end-c.start+1 > opt.MaxFieldLines:
		return fmt.Sprintf("a quoted field opened on this line is still open after %d lines, over %s of %d%s, or raise %s if the field really spans that many lines",
			c.end-c.start+1, opt.Names.MaxFieldLines, opt.MaxFieldLines, tail, opt.Names.MaxFieldLines)
	}
	return fmt.Sprintf("a quoted field opened on this line is still open after %d bytes, over the %d-byte limit%s, or raise %s if the field really is that long",
		c.size, opt.MaxLineBytes, tail, opt.Names.MaxLineBytes)
}

// heldLine is a line of the record being assembled: its number and where
// its bytes sit in csvRecords.buf (or tooLong).
type heldLine struct {
	no       int
	off, end int
	size     int64
	tooLong  bool
}

// csvRecords groups physical lines into CSV records, following quotes the
// way encoding/csv does. A record is held whole, but never more than
// MaxLineBytes bytes or MaxFieldLines lines of it: past either limit, or at
// the end of the input, the record's first line is reported and the lines
// after it are read again, so one stray quote costs one line, not the rest
// of the file.
type csvRecords struct {
	lines    *lineReader
	comma    byte
	maxBytes int
	maxLines int

	replay []line // lines to read again before reading on, with their own bytes
	buf    []byte
	held   []heldLine
}

func (c *csvRecords) take() (line, error) {
	if len(c.replay) > 0 {
		l := c.replay[0]
		c.replay = c.replay[1:]
		return l, nil
	}
	return c.lines.next()
}

// next returns the next record, io.EOF after the last one, or the input's
// read error. Empty lines between records are skipped, as csv does.
func (c *csvRecords) next() (csvRecord, error) {
	c.buf, c.held = c.buf[:0], c.held[:0]
	var q quoteTracker
	q.comma = c.comma
	for {
		l, err := c.take()
		if err == io.EOF && len(c.held) > 0 {
			rec := c.overflow()
			rec.atEOF = true
			return rec, nil
		}
		if err != nil {
			return csvRecord{}, err
		}
		if len(c.held) == 0 && !l.tooLong && len(l.data) == 0 {
			continue
		}
		if l.tooLong {
			if len(c.held) == 0 {
				return csvRecord{start: l.no, end: l.no, size: l.size, tooLong: true}, nil
			}
			c.held = append(c.held, heldLine{no: l.no, size: l.size, tooLong: true})
			return c.overflow(), nil
		}
		off := len(c.buf)
		c.buf = append(append(c.buf, l.data...), '\n')
		c.held = append(c.held, heldLine{no: l.no, off: off, end: len(c.buf) - 1, size: l.size})
		if !q.line(l.data) {
			return csvRecord{data: c.buf, start: c.held[0].no, end: l.no, size: int64(len(c.buf))}, nil
		}
		if len(c.held) > c.maxLines || len(c.buf) > c.maxBytes {
			return c.overflow(), nil
		}
	}
}

// overflow gives up the open record held: its first line is reported, the
// others go back to be read again, ahead of any still waiting.
func (c *csvRecords) overflow() csvRecord {
	first, last := c.held[0], c.held[len(c.held)-1]
	rec := csvRecord{start: first.no, end: last.no, size: int64(len(c.buf)), open: true}
	if last.tooLong {
		rec.size += last.size
	}
	c.readAgainAfterFirst()
	return rec
}

// readAgainAfterFirst sends the lines of the record last returned by next,
// but its first, back to be read again, ahead of any still waiting.
func (c *csvRecords) readAgainAfterFirst() {
	first := c.held[0]
	own := make([]byte, len(c.buf)-first.end) // the bytes of the later lines, kept
	copy(own, c.buf[first.end:])
	again := make([]line, 0, len(c.held)-1+len(c.replay))
	for _, h := range c.held[1:] {
		if h.tooLong {
			again = append(again, line{no: h.no, size: h.size, tooLong: true})
			continue
		}
		d := own[h.off-first.end : h.end-first.end]
		again = append(again, line{no: h.no, size: h.size, data: d[:len(d):len(d)]})
	}
	c.replay = append(again, c.replay...)
	c.held = c.held[:1]
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
// fed, to know at each line end whether a quoted field is still open.
type quoteTracker struct {
	comma byte
	state quoteState
}

// line feeds one line and says whether a quoted field is still open at its
// end (the record goes on to the next line).
func (t *quoteTracker) line(data []byte) bool {
	for _, c := range data {
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
	if t.state == quoted {
		return true
	}
	t.state = fieldStart
	return false
}
