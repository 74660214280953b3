// Package report renders what a sawtooth database knows, for two readers:
// the people who want the results (what the reviews say, per app and
// month, and how that changed) and the operator of the run (the
// concurrency limit, calls per second, 429s, cost, dead letters).
//
// Load reads the database once: the counts, the stored aggregate, dead
// letters, runs and samples, and a Cube of the done items (label counts,
// rating sums and the most confident quotes by every combination of
// group values and month; its memory grows with those combinations,
// never with the items). The Cube comes from the per-period aggregate a
// store keeps in the commit that folds each item (pipeline.CubeReader)
// when that answers exactly, and is otherwise streamed from every done
// item, with the same result byte for byte (cube_stored.go). A Pivot (`report --by app,month`)
// is a sum of cube cells over a month Window, with each row compared with
// its previous period, so any group fields in any order and any period
// come from the same pass.
//
// Every renderer is a pure function from a Data value to an io.Writer
// (Text, Markdown, HTML, CSV; JSON is Data itself), so they are tested on
// plain values and golden files under testdata/golden. The HTML page
// needs no network to be viewed: its styles are inline, its charts are
// plain SVG drawn here in Go, it runs no script, and a Content-Security-
// Policy forbids it to load anything. Every string that came from the
// data (app names, labels, ids, review text, server messages) is escaped
// for its output: by html/template or html.EscapeString in the page,
// as literal Markdown text (no HTML, links or images) in Markdown, and
// with control characters made visible on a terminal and in the page
// (\x1b, never the byte). In CSV and TSV a text cell a spreadsheet would
// run as a formula (= + - @, a tab or a carriage return first, and not a
// plain number such as -3) starts with a single quote, unless the caller
// asks for raw cells; JSON and JSONL are exact.
//
// --where (LoadOptions.Where) filters every figure that counts items:
// the counts, the labels and group tables, the dead letters, the cube
// and the pivot; the runs' own figures (calls, tokens, cost) stay whole.
// Those filtered figures come from one pass over the items: each done
// item's fact is decoded once, for the cube, the tally and its place.
//
// WriteFlat and Export write flat rows (CSV, TSV, JSONL): one per item
// wherever it stands (done, queued, in a batch job, dead, skipped by a
// stage's condition), the input fields, every stage's output fields as
// their own columns and the stage's recorded version, numbers as people
// write them, streamed: the columns come from a first pass over the
// rows, or on bbolt from the names of the stored fields (a read of keys
// that skips every value), then each row is written from its outputs'
// raw JSON (export_rows.go).
//
// Each report fingerprints the figures of every month it covers
// (stamp.go); the CLI records them after rendering, and the next report
// of a month says when its figures changed since.
//
// The package is larger than our ~500-line guide because every output of one data model lives here: loading
// (load.go, readers.go, data.go), the model and pivot (model.go, cube.go,
// pivot*.go), the text, Markdown and HTML writers with their SVG charts
// (text.go, html.go, charts.go, svg.go), escaping and the flat export
// (escape.go, export.go), each file one of those jobs.
package report
