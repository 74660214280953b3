// Package ingest turns an input file into pipeline.Records, one at a time.
//
// # Check, then apply
//
// A file is read twice. Check reads it once, writing nothing, and decides
// whether to accept it: a file more than half of whose physical lines fail
// is refused (*RefusedError: probably the wrong file, format or field
// names), so that a mistake cannot change a single stored item. The first
// pass also decides, for the whole file, the day/month order of its dates.
// Plan.Apply then reads the file again and hands its good records to the
// caller in batches; a file changed in between is an error. Load is both.
// Both passes honour their context on every read, so a Ctrl-C stops them
// even inside one very long line.
//
// # Memory
//
// A Reader streams its input: it holds one line (JSONL) or one record
// (CSV) of at most Options.MaxLineBytes, plus a fixed read buffer. A longer
// line is skipped without being buffered, which keeps that bound even for a
// gigabyte with no newline in it. One thing does grow with the file: the
// set of ids seen, for the duplicate check. It keeps a 64-bit hash of each
// id, not the id: about 38 bytes per distinct id, 36 MB per million ids
// (measured by TestReader_idSetMemory; run it with -v). Two different ids
// with the same hash would be taken for duplicates, a chance of about
// n²/2⁶⁵ for n ids (one in 10⁵ for 10⁷ ids). The hash is seeded per
// Reader, so no input triggers it on purpose and a rerun does not repeat
// it.
//
// # Bad input
//
// Bad input is not an error. A line that cannot become a Record (broken
// JSON, no id, a NUL byte, a duplicate id, a CSV row with the wrong number
// of columns, a rating that is not finite or outside Options.RatingRange,
// ...) is skipped and recorded as a Problem that names its line and says
// what to do about it; reading goes on. Next returns an error only when
// reading cannot go on: an I/O failure, UTF-16 input, or a CSV header that
// cannot be read or lacks the id or text column.
//
// Lines are physical lines. A CSV record whose quoted field spans 5 lines
// counts 5, good or bad. A quoted field still open after
// Options.MaxFieldLines lines, MaxLineBytes bytes or at the end of the
// input is taken for a missing closing quote: the line it opens on is
// reported and skipped, and the lines after it are read again on their
// own, so one stray quote costs one line, not the rest of the file. A
// multi-line record that csv cannot parse is treated the same way.
//
// # Fields the aggregate reads
//
// The fields named by Options.GroupBy, DateField and RatingField are
// checked on every good record. Dates are read in the common layouts
// (package internal/dates) and, when their reading depends on the file
// (01/02/2006, 02.01.2006, Jan 2, 2006, DateFormat), rewritten as
// 2006-01-02 so that every later reading agrees. A field missing from most
// rows, or more than 5% of dates or ratings that cannot be read, gives a
// warning with counts and three examples (Result.Warnings, Reader.Warnings):
// the report would otherwise show "unknown" without saying why.
//
// # Field types
//
// A field's value is kept as its text (a JSON number as written, so a
// prompt shows it as the input did), and its type beside it
// (pipeline.Record.Types): JSON numbers and true/false are typed; in a
// CSV file a column is numeric when every value in it is written as a
// JSON number (no leading zeros: a zip code stays text), which Check
// decides for the whole file as it does the date order. A condition
// (`when: fields.rating <= 2`) then compares numbers.
//
// Empty text is not a problem here: the sanitize stage dead-letters it, so
// it stays visible in the dead-letter list next to every other failure.
//
// Ids must be unique within one input. The first record with an id wins;
// later ones are reported with the line of the first.
//
// The package is larger than our ~500-line guide because reading a hostile file line by line with exact line
// numbers is one job that does not split well: the JSONL and CSV readers
// (reader.go, csv.go, lines.go), the field and date checks (fields.go),
// the options (ingest.go) and the check-then-apply plan (file.go), each
// file one of those jobs.
package ingest
