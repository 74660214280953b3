package ingest

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Reader reads Records from one input, in input order. It is not safe for
// concurrent use.
//
// Most callers loop on Next until io.EOF, then show Problems to the user.
type Reader struct {
	opt   Options
	lines *lineReader

	// CSV only.
	csv        *csv.Reader
	feed       *recordFeed
	records    *csvRecords
	header     []string
	idCol      int
	textCol    int
	headerRead bool

	sawData   bool // JSONL: a non-blank line has been read
	seed      maphash.Seed
	seen      map[uint64]int // hash of id -> line it was first seen on
	problems  []Problem
	nProblems int
	nLines    int // physical data lines, good or bad
	badLines  int // physical lines of skipped records
	fields    fieldCheck
	types     columnTypes
	// CSV records of more than longRecordLines lines.
	longRecords sample
	err         error // sticky: returned by every Next after the first
}

// NewReader returns a Reader of r configured by opt. It fails only on
// options that cannot work; it reads nothing until Next.
func NewReader(r io.Reader, opt Options) (*Reader, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	rd := &Reader{
		opt:    opt,
		lines:  newLineReader(r, opt.MaxLineBytes),
		seed:   maphash.MakeSeed(),
		seen:   make(map[uint64]int),
		fields: newFieldCheck(opt),
	}
	if opt.Format != JSONL {
		rd.records = &csvRecords{lines: rd.lines, comma: byte(opt.Comma), maxBytes: opt.MaxLineBytes, maxLines: opt.MaxFieldLines}
		rd.feed = &recordFeed{}
		rd.csv = csv.NewReader(rd.feed)
		rd.csv.Comma = opt.Comma
		rd.csv.FieldsPerRecord = -1
		rd.csv.ReuseRecord = true
	}
	return rd, nil
}

// Next returns the next good record. Lines that cannot become a record are
// skipped and recorded (see Problems). At the end of the input Next returns
// io.EOF. Any other error means reading cannot go on: an I/O failure, UTF-16
// input, or a CSV header that cannot be read or lacks the id or text
// column. Once Next has returned an error it returns the same error on
// every later call.
func (r *Reader) Next() (pipeline.Record, error) {
	if r.err != nil {
		return pipeline.Record{}, r.err
	}
	var rec pipeline.Record
	var err error
	if r.csv != nil {
		rec, err = r.nextCSV()
	} else {
		rec, err = r.nextJSONL()
	}
	if err != nil {
		r.err = err
	}
	return rec, err
}

// Problems returns the lines skipped so far, ordered by line: at most
// MaxProblems of them, the first ones found. The slice is the caller's.
func (r *Reader) Problems() []Problem {
	out := slices.Clone(r.problems)
	slices.SortStableFunc(out, func(a, b Problem) int { return a.Line - b.Line })
	return out
}

// ProblemCount returns how many lines have been skipped so far, including
// those beyond the MaxProblems that Problems keeps.
func (r *Reader) ProblemCount() int { return r.nProblems }

// Lines returns how many physical data lines have been read so far, good
// or bad: non-blank JSONL lines, or the lines of CSV records after the
// header (a record whose quoted field spans 3 lines counts 3).
func (r *Reader) Lines() int { return r.nLines }

// BadLines returns how many of Lines were skipped: the physical lines of
// every record reported in Problems.
func (r *Reader) BadLines() int { return r.badLines }

// skip reports a record starting on line and spanning span physical lines
// as skipped.
func (r *Reader) skip(line, span int, id, reason string) {
	r.nLines += span
	r.badLines += span
	r.report(line, id, reason)
}

func (r *Reader) report(line int, id, reason string) {
	r.nProblems++
	if len(r.problems) < MaxProblems {
		r.problems = append(r.problems, Problem{Line: line, ID: shortID(id), Reason: reason})
	}
}

// firstSeen records id as seen on line and returns 0, or returns the line
// it was first seen on.
func (r *Reader) firstSeen(id string, line int) int {
	h := maphash.String(r.seed, id)
	if first, ok := r.seen[h]; ok {
		return first
	}
	r.seen[h] = line
	return 0
}

// accept runs the checks common to both formats on a parsed record of
// span physical lines, already counted in Lines, and keeps it, or reports
// it and returns false.
func (r *Reader) accept(rec *pipeline.Record, span int) bool {
	if reason := r.fields.check(rec); reason != "" {
		r.badLines += span
		r.report(rec.Line, rec.ID, reason)
		return false
	}
	if first := r.firstSeen(rec.ID, rec.Line); first != 0 {
		r.badLines += span
		r.report(rec.Line, rec.ID, fmt.Sprintf("duplicate id %q (first seen on line %d): skipped", shortID(rec.ID), first))
		return false
	}
	r.fields.count(rec)
	r.types.add(rec)
	r.setTypes(rec)
	return true
}

func (r *Reader) readErr(err error) error {
	if r.lines.no == 0 {
		return fmt.Errorf("read input: %w", err)
	}
	return fmt.Errorf("read input after line %d: %w", r.lines.no, err)
}

func (r *Reader) nextJSONL() (pipeline.Record, error) {
	for {
		l, err := r.lines.next()
		if err == io.EOF {
			return pipeline.Record{}, io.EOF
		}
		if err != nil {
			return pipeline.Record{}, r.readErr(err)
		}
		if l.tooLong {
			r.skip(l.no, 1, "", longLineReason(l.size, r.opt))
			continue
		}
		b := bytes.Trim(l.data, " \t\r\n")
		if len(b) == 0 {
			continue
		}
		first := !r.sawData
		r.sawData = true
		rec, reason := r.parseJSON(b, first)
		if reason != "" {
			r.skip(l.no, 1, rec.ID, reason)
			continue
		}
		r.nLines++
		rec.Line = l.no
		if r.accept(&rec, 1) {
			return rec, nil
		}
	}
}

// parseJSON turns one JSONL line into a record, or returns why it cannot
// (with the id when it got that far). first says whether this is the
// first data line of the input.
func (r *Reader) parseJSON(b []byte, first bool) (pipeline.Record, string) {
	obj, reason := jsonObject(b, first)
	if reason != "" {
		return pipeline.Record{}, reason
	}
	idField, textField := r.opt.IDField, r.opt.TextField
	rawID, ok := obj[idField]
	if !ok {
		return pipeline.Record{}, fmt.Sprintf("no %q field: %s if the id lives under another name", idField, r.opt.Names.set(r.opt.Names.IDField))
	}
	id, reason := jsonID(idField, rawID)
	if reason == "" {
		reason = checkID(idField, id)
	}
	if reason != "" {
		return pipeline.Record{ID: id}, reason
	}
	rec := pipeline.Record{ID: id}

	rawText, ok := obj[textField]
	switch {
	case !ok:
		return rec, fmt.Sprintf("no %q field: %s if the text lives under another name", textField, r.opt.Names.set(r.opt.Names.TextField))
	case rawText[0] == 'n':
		return rec, fmt.Sprintf(`%q is null: give it a string ("" for no text)`, textField)
	case rawText[0] != '"':
		return rec, fmt.Sprintf("%q is %s: it must be a string", textField, jsonKind(rawText))
	}
	text, err := jsonString(rawText)
	if err != nil {
		return rec, fmt.Sprintf("%q cannot be read (%v): fix or remove the line", textField, err)
	}
	rec.Text = text
	// The fields are read into rec before rec is returned: in one return
	// statement the order of the two would be the compiler's choice.
	reason = jsonFields(&rec, obj, idField, textField)
	return rec, reason
}

// jsonObject reads a line as one JSON object, or says why it is not one
// and how to fix the file.
func jsonObject(b []byte, first bool) (map[string]json.RawMessage, string) {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return nil, fmt.Sprintf("NUL byte (0x00) at byte %d: the file may be binary or UTF-16; fix or remove the line", i+1)
	}
	if bytes.HasPrefix(b, []byte("\xef\xbb\xbf")) {
		return nil, "line starts with a byte order mark (EF BB BF), as when files are joined with cat: remove it"
	}
	if obj, ok := plainObject(b); ok {
		return obj, ""
	}
	var obj map[string]json.RawMessage
	err := json.Unmarshal(b, &obj)
	if err == nil && obj != nil {
		return obj, ""
	}
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		reason := fmt.Sprintf("not a JSON object (found %s): each line must hold one {...} object", jsonKind(b))
		if first && b[0] == '[' {
			reason += "; to turn a JSON array into JSON Lines run: jq -c '.[]' in.json > out.jsonl"
		}
		return nil, reason
	}
	reason := fmt.Sprintf("invalid JSON (%s at byte %d): fix or remove the line", se.Error(), se.Offset)
	switch {
	case strings.Contains(se.Error(), "max depth"):
		reason = fmt.Sprintf("invalid JSON (nested more than 10000 levels deep at byte %d): flatten the value or remove the line", se.Offset)
	case first && b[0] == '[':
		reason += "; a .json input must hold one object per line (JSON Lines), not a JSON array: convert it with jq -c '.[]' in.json > out.jsonl"
	case bytes.IndexByte(b, '\r') >= 0:
		reason += `; the line holds a carriage return (\r) not followed by \n: if the file has old Mac (CR-only) line endings, convert them to \n`
	}
	return nil, reason
}

// jsonFields gives rec every field of obj but the id and the text: a
// string as it is, an object or list as compact JSON, a number or a
// boolean by its JSON text and typed so; null is left out. It returns
// why a field cannot be read, or "".
func jsonFields(rec *pipeline.Record, obj map[string]json.RawMessage, idField, textField string) string {
	for k, v := range obj {
		if k == idField || k == textField {
			continue
		}
		var s string
		var t pipeline.FieldType
		switch v[0] {
		case 'n':
			continue
		case 't', 'f':
			s, t = string(v), pipeline.FieldBool
		case '"':
			var err error
			if s, err = jsonString(v); err != nil {
				return fmt.Sprintf("field %q cannot be read (%v): fix or remove the line", k, err)
			}
		case '{', '[':
			var buf bytes.Buffer
			if err := json.Compact(&buf, v); err != nil {
				return fmt.Sprintf("field %q cannot be read (%v): fix or remove the line", k, err)
			}
			s = buf.String()
		default: // a number by its JSON text, as a prompt shows it
			s, t = string(v), pipeline.FieldNumber
		}
		if rec.Fields == nil {
			rec.Fields = make(map[string]string, len(obj))
		}
		rec.Fields[k] = s
		if t != "" {
			if rec.Types == nil {
				rec.Types = map[string]pipeline.FieldType{}
			}
			rec.Types[k] = t
		}
	}
	return ""
}

// jsonID returns the id held by the raw JSON value of the id field: a
// string, or an integer as its decimal text. A number with a zero fraction
// (12.0, 1.2e1, as spreadsheets export integers) counts as the integer.
func jsonID(field string, raw json.RawMessage) (string, string) {
	switch c := raw[0]; {
	case c == '"':
		if !utf8.Valid(raw) {
			return "", fmt.Sprintf("%q is not valid UTF-8: fix the file's encoding", field)
		}
		s, err := jsonString(raw)
		if err != nil {
			return "", fmt.Sprintf("%q cannot be read (%v): fix or remove the line", field, err)
		}
		return s, ""
	case c == '-' || ('0' <= c && c <= '9'):
		return numberID(field, string(raw))
	case c == 'n':
		return "", fmt.Sprintf("%q is null: every record needs a string or integer id", field)
	}
	return "", fmt.Sprintf("%q is %s: it must be a string or an integer", field, jsonKind(raw))
}

func numberID(field, s string) (string, string) {
	if strings.TrimLeft(strings.TrimPrefix(s, "-"), "0123456789") == "" {
		return s, ""
	}
	tooBig := fmt.Sprintf("%q is the number %.40s, too large for an id: use a string", field, s)
	// big.Rat computes 10^exponent: keep both the text and the exponent
	// small enough that this costs nothing.
	if len(s) > 2*MaxIDBytes {
		return "", tooBig
	}
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		exp, err := strconv.Atoi(s[i+1:])
		if err != nil || exp > MaxIDBytes || exp < -MaxIDBytes {
			return "", tooBig
		}
	}
	var q big.Rat
	if _, ok := q.SetString(s); !ok || !q.IsInt() {
		return "", fmt.Sprintf("%q is the number %.40s, not an integer: ids must be strings or integers", field, s)
	}
	return q.Num().String(), ""
}

// checkID returns why id cannot be used, or "".
func checkID(field, id string) string {
	switch {
	case strings.TrimSpace(id) == "":
		return fmt.Sprintf("%q is empty or blank: every record needs an id", field)
	case len(id) > MaxIDBytes:
		return fmt.Sprintf("%q is %d bytes long, over the %d-byte limit: use shorter ids", field, len(id), MaxIDBytes)
	case !utf8.ValidString(id):
		return fmt.Sprintf("%q is not valid UTF-8: fix the file's encoding", field)
	case strings.IndexByte(id, 0) >= 0:
		return fmt.Sprintf("%q holds a NUL character: fix or remove the line", field)
	}
	return ""
}

// jsonKind names the kind of the JSON value that starts b.
func jsonKind(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func longLineReason(size int64, opt Options) string {
	return fmt.Sprintf("line is %d bytes, over the %d-byte limit: skipped without reading it into memory; split the record or raise %s", size, opt.MaxLineBytes, opt.Names.MaxLineBytes)
}

// Warnings returns what the records read so far say about the fields the
// aggregate stage reads (Options.GroupBy, DateField, RatingField): a field
// missing from most rows, or more than 5% of dates or ratings that cannot
// be read, each with counts and three examples. Lines are not skipped for
// these; the report would silently show "unknown" for them.
func (r *Reader) Warnings() []string {
	out := r.fields.warnings()
	if s := r.longRecords; s.n > 0 {
		out = append(out, fmt.Sprintf("%d records span more than %d lines (%s): if a field was not meant to run on that long, two stray quotes may have merged the rows between them; check those lines",
			s.n, longRecordLines, strings.Join(s.examples, ", ")))
	}
	return out
}
