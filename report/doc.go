// Package report renders what a sawtooth database knows (the aggregate,
// the dead letters, the runs and the last run's per-second samples) as
// text, Markdown or one self-contained HTML page.
//
// Every renderer is a pure function from a Data value to an io.Writer: the
// caller reads the database once (main's report command does) and the
// renderers never touch it, so they are tested on plain values. The HTML
// page needs no network to be viewed: its styles are inline, its charts are
// plain SVG drawn here in Go, it runs no script, and a Content-Security-
// Policy forbids it to load anything. Every string that came from the data
// (labels, ids, dead-letter messages, which may quote item text) is escaped
// by html/template or, inside the SVG, by html.EscapeString.
package report
