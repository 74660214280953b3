package ingest

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sawtooth-dev/sawtooth/internal/dates"
)

// Format names an input file format.
type Format string

const (
	// JSONL is one JSON object per line (JSON Lines, NDJSON).
	JSONL Format = "jsonl"
	// CSV is comma-separated values with a header row (RFC 4180).
	CSV Format = "csv"
	// TSV is CSV separated by tabs: a Reader for TSV uses '\t' when
	// Options.Comma is zero.
	TSV Format = "tsv"
)

// Defaults and limits of a Reader.
const (
	// DefaultIDField is the JSON field or CSV column that holds the id.
	DefaultIDField = "id"
	// DefaultTextField is the JSON field or CSV column that holds the text.
	DefaultTextField = "text"
	// DefaultMaxLineBytes is the default for Options.MaxLineBytes: 4 MiB.
	DefaultMaxLineBytes = 4 << 20
	// DefaultMaxFieldLines is the default for Options.MaxFieldLines.
	DefaultMaxFieldLines = 50
	// DefaultDateField is the field the aggregate stage reads the month
	// from (stages.DefaultDateField).
	DefaultDateField = "date"
	// DefaultRatingField is the field the aggregate stage averages
	// (stages.DefaultRatingField).
	DefaultRatingField = "rating"
	// DefaultRatingRange is the default for Options.RatingRange.
	DefaultRatingRange = "0-10"
	// MaxIDBytes is the longest id accepted, in bytes.
	MaxIDBytes = 1024
	// MaxProblems is how many Problems a Reader keeps; it counts the rest
	// (see Reader.ProblemCount).
	MaxProblems = 1000
)

// DetectFormat tells the format of the file at path from its extension:
// .jsonl, .ndjson and .json are JSONL, .csv is CSV, .tsv is TSV. Case does
// not matter. Any other name is an error asking the user for the format (Names.Format).
func DetectFormat(path string) (Format, error) { return DetectFormatNamed(path, Names{}) }

// DetectFormatNamed is DetectFormat whose error says to set n.Format.
func DetectFormatNamed(path string, n Names) (Format, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".jsonl", ".ndjson", ".json":
		return JSONL, nil
	case ".csv":
		return CSV, nil
	case ".tsv":
		return TSV, nil
	}
	n = n.withDefaults()
	return "", fmt.Errorf("cannot tell the format of %s from its extension: %s jsonl, csv or tsv", path, n.set(n.Format))
}

// Options configures a Reader. The zero value of each field means its
// default; Format has none and must be set.
type Options struct {
	// Format is the input format: JSONL, CSV or TSV. Required.
	Format Format
	// IDField is the JSON field or CSV column holding each record's id.
	// Default DefaultIDField ("id").
	IDField string
	// TextField is the JSON field or CSV column holding each record's
	// text. Default DefaultTextField ("text").
	TextField string
	// MaxLineBytes is the longest line read, in bytes, without its line
	// ending. A longer line is skipped and reported without being held in
	// memory. For CSV it also bounds a record whose quoted field spans
	// lines (see MaxFieldLines). Default DefaultMaxLineBytes (4 MiB).
	MaxLineBytes int
	// Comma is the CSV field separator: an ASCII character other than
	// '"', '\r' and '\n'. Default ',' for CSV and '\t' for TSV; ignored for
	// JSONL.
	Comma rune
	// MaxFieldLines is the most physical lines one CSV record may span. A
	// quoted field still open after that many lines (or MaxLineBytes bytes,
	// or at the end of the input) is taken for a missing closing quote: the
	// line it opens on is reported and skipped, and the lines after it are
	// read on their own. Default DefaultMaxFieldLines (50).
	MaxFieldLines int

	// GroupBy lists the fields the aggregate stage groups by; "month"
	// stands for DateField. Only these fields, DateField and RatingField
	// are checked and counted for Warnings. nil checks none of them.
	GroupBy []string
	// OptionalFields lists fields a file need not have, such as the
	// caller's defaults: when no row has one at all, there is no warning.
	// A field that some rows have and most lack is warned about anyway.
	// DateField and RatingField are optional when left empty.
	OptionalFields []string
	// DateField is the field holding each record's date. Default
	// DefaultDateField. It is read when GroupBy holds "month" or
	// DateFormat is set: dates in a layout whose reading depends on the
	// file (01/02/2006, 02.01.2006, Jan 2, 2006, DateFormat) are rewritten
	// as 2006-01-02 (RFC 3339 with a time of day), so that every later
	// reading agrees.
	DateField string
	// DateFormat is a Go time layout (e.g. "02/01/2006 15:04") tried
	// before the common layouts. Default none.
	DateFormat string
	// RatingField is the field holding each record's numeric rating.
	// Default DefaultRatingField.
	RatingField string
	// RatingRange is the range ratings must fall in, as "MIN-MAX". A
	// rating outside it, or not finite (NaN, Inf, 1e999), is a problem and
	// the line is skipped; a rating that is not a number is kept and left
	// out of averages. Default DefaultRatingRange ("0-10").
	RatingRange string

	// Names is how the user sets the options above, for messages: the
	// flags, or a job file's keys; plain words by default.
	Names Names

	ratingMin, ratingMax float64
	// dateOrder reads ambiguous numeric dates; a Plan decides it for the
	// whole file from its first pass.
	dateOrder dates.Order
	// numberColumns are the CSV columns a Plan found holding only
	// numbers: their values are typed pipeline.FieldNumber.
	numberColumns []string
}

// Names names the options a Reader's messages point to, as the user sets
// them: "--text-field" on the command line, "input.text" in a job file.
// Set says how to set one ("pass %s", "set %s in the job file"). Only the
// front end knows them; "" names an option in plain words.
type Names struct {
	Format, IDField, TextField, GroupBy, DateField, RatingField string
	DateFormat, RatingRange, MaxLineBytes, MaxFieldLines        string
	Set                                                         string
}

// plainNames are the options in plain words, the default Names.
var plainNames = Names{Format: "the input format", IDField: "the id field", TextField: "the text field",
	GroupBy: "the group-by field", DateField: "the date field", RatingField: "the rating field",
	DateFormat: "a date layout", RatingRange: "the rating range", MaxLineBytes: "the line limit",
	MaxFieldLines: "the limit on lines per field", Set: "set %s"}

func (n Names) withDefaults() Names {
	for _, f := range []struct {
		v   *string
		def string
	}{{&n.Format, plainNames.Format}, {&n.IDField, plainNames.IDField}, {&n.TextField, plainNames.TextField},
		{&n.GroupBy, plainNames.GroupBy}, {&n.DateField, plainNames.DateField}, {&n.RatingField, plainNames.RatingField},
		{&n.DateFormat, plainNames.DateFormat}, {&n.RatingRange, plainNames.RatingRange},
		{&n.MaxLineBytes, plainNames.MaxLineBytes}, {&n.MaxFieldLines, plainNames.MaxFieldLines}, {&n.Set, plainNames.Set}} {
		if *f.v == "" {
			*f.v = f.def
		}
	}
	return n
}

// set is how to set the option named: "pass --text-field", or "set
// input.text in the job file".
func (n Names) set(name string) string { return fmt.Sprintf(n.Set, name) }

// Validate returns an error naming the option that cannot work, or nil.
// NewReader and Check validate too; Validate lets a caller tell a usage
// error from a problem with the input before reading it.
func (o Options) Validate() error {
	_, err := o.withDefaults()
	return err
}

// withDefaults returns o with every zero field set to its default, or an
// error naming the field that cannot work.
func (o Options) withDefaults() (Options, error) {
	o.Names = o.Names.withDefaults()
	switch o.Format {
	case JSONL, CSV, TSV:
	case "":
		return o, fmt.Errorf("no input format given: %s jsonl, csv or tsv", o.Names.set(o.Names.Format))
	default:
		return o, fmt.Errorf("unknown input format %q: %s jsonl, csv or tsv", string(o.Format), o.Names.set(o.Names.Format))
	}
	if o.IDField == "" {
		o.IDField = DefaultIDField
	}
	if o.TextField == "" {
		o.TextField = DefaultTextField
	}
	if o.IDField == o.TextField {
		return o, fmt.Errorf("%s and %s are both %q: they must name different fields", o.Names.IDField, o.Names.TextField, o.IDField)
	}
	if o.MaxLineBytes <= 0 {
		o.MaxLineBytes = DefaultMaxLineBytes
	}
	if o.MaxFieldLines <= 0 {
		o.MaxFieldLines = DefaultMaxFieldLines
	}
	// A field left to its default is optional: a file need not have it.
	if o.DateField == "" {
		o.DateField = DefaultDateField
		o.OptionalFields = append(slices.Clip(o.OptionalFields), o.DateField)
	}
	if o.RatingField == "" {
		o.RatingField = DefaultRatingField
		o.OptionalFields = append(slices.Clip(o.OptionalFields), o.RatingField)
	}
	if o.RatingRange == "" {
		o.RatingRange = DefaultRatingRange
	}
	var err error
	if o.ratingMin, o.ratingMax, err = ParseRatingRange(o.RatingRange); err != nil {
		return o, fmt.Errorf("%s: %w", o.Names.RatingRange, err)
	}
	if o.Format == JSONL {
		return o, nil
	}
	if o.Comma == 0 {
		o.Comma = ','
		if o.Format == TSV {
			o.Comma = '\t'
		}
	}
	// The quote tracker that bounds multi-line CSV records works on bytes.
	if o.Comma < 0 || o.Comma >= 0x80 || o.Comma == '"' || o.Comma == '\r' || o.Comma == '\n' {
		return o, fmt.Errorf("field separator %q cannot be used: pick an ASCII character other than a quote or a line break", o.Comma)
	}
	return o, nil
}

// Problem is one input line that was skipped, and why.
type Problem struct {
	// Line is the 1-based line the problem is on; for a CSV record, the
	// line it starts on.
	Line int
	// ID is the record's id when it could be read, else "". Ids longer
	// than 64 bytes are cut to 64 bytes and marked with "...".
	ID string
	// Reason says what is wrong and what to do about it, without the line
	// number: e.g. `invalid JSON (unexpected end of JSON input at byte 40):
	// fix or remove the line`.
	Reason string
}

// String returns the problem as shown to the user: "line 12: <reason>".
func (p Problem) String() string {
	return fmt.Sprintf("line %d: %s", p.Line, p.Reason)
}

// shortID returns id cut to 64 bytes for messages.
func shortID(id string) string {
	if len(id) <= 64 {
		return id
	}
	return id[:64] + "..."
}
