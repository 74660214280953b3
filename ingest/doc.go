// Package ingest turns an input file into pipeline.Records, one at a time.
//
// A Reader streams its input: it holds at most one line (JSONL) or one
// record (CSV) in memory, plus a fixed read buffer, so memory does not grow
// with the size of the file. A line longer than Options.MaxLineBytes is
// skipped without being buffered, which keeps that bound even for a
// gigabyte with no newline in it.
//
// Bad input is not an error. A line that cannot become a Record (broken
// JSON, no id, a NUL byte, a duplicate id, a CSV row with the wrong number
// of columns, ...) is skipped and recorded as a Problem that names its line
// and says what to do about it; reading goes on. Next returns an error only
// when reading cannot go on: an I/O failure, UTF-16 input, a CSV header that
// cannot be read or lacks the id or text column, or a CSV quote left open for
// more than MaxLineBytes.
//
// Empty text is not a problem here: the sanitize stage dead-letters it, so
// it stays visible in the dead-letter list next to every other failure.
//
// Ids must be unique within one input. The first record with an id wins;
// later ones are reported with the line of the first. To keep memory small
// the Reader remembers a 64-bit hash of each id, not the id itself (about
// 40 bytes per distinct id); two different ids with the same hash would be
// taken for duplicates, a chance of about n²/2⁶⁵ for n ids (one in 10⁵
// for 10⁷ ids). The hash is seeded per Reader, so no input triggers it on
// purpose and a rerun does not repeat it.
package ingest
