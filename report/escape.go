package report

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// termText makes s safe to print on a terminal: control characters (ESC
// sequences that clear the screen or retitle the window, carriage returns
// that overwrite a line) and invisible format characters (bidi overrides)
// are written as visible escapes (\x1b, \u202e), so the text shows what
// the data held without acting on the terminal. Newlines and tabs are
// escaped too: one value stays on one line.
func termText(s string) string { return visible(s, unsafeRune) }

// pageText is termText for a whole rendered page: newlines and tabs, the
// page's own layout, are kept; every other unsafe rune is escaped.
func pageText(s string) string {
	return visible(s, func(r rune) bool { return r != '\n' && r != '\t' && unsafeRune(r) })
}

// visible writes the runes of s for which escape holds as visible escapes.
func visible(s string, escape func(rune) bool) string {
	if !strings.ContainsFunc(s, escape) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !escape(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

// unsafeRune is a rune that acts on a terminal or hides itself: C0 and C1
// controls, DEL, invalid UTF-8 and format characters (bidi overrides)
// other than the zero-width joiners that emoji sequences need.
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || hiddenFormat(r) || r == unicode.ReplacementChar
}

// hiddenFormat is an invisible format character other than the
// zero-width (non-)joiner.
func hiddenFormat(r rune) bool {
	return unicode.Is(unicode.Cf, r) && r != '\u200d' && r != '\u200c'
}

// mdEscaper escapes what Markdown (GitHub-flavoured, CommonMark) would
// read as markup inside a line: HTML tags and entities become entities;
// emphasis, code, links and images, table pipes and strikethrough are
// backslash-escaped. A value can then neither inject HTML (<script>,
// "><img onerror>) nor an image that loads a URL when the Markdown is
// viewed (![t](http://...)).
var mdEscaper = strings.NewReplacer(
	"&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;",
	`\`, `\\`, "`", "\\`", "*", `\*`, "_", `\_`, "[", `\[`, "]", `\]`,
	"(", `\(`, ")", `\)`, "!", `\!`, "|", `\|`, "~", `\~`, "#", `\#`,
)

// mdText makes s one line of literal Markdown text: controls escaped as
// in termText (a newline would end a table row), then markup escaped.
func mdText(s string) string {
	return mdEscaper.Replace(termText(s))
}

// formulaCell is s as a CSV or TSV cell a spreadsheet shows as text and
// never evaluates (OWASP's CSV injection advice): a cell starting with =,
// +, -, @, a tab or a carriage return is a formula to Excel, LibreOffice
// and Google Sheets (=HYPERLINK(...) leaks data when clicked,
// +cmd|' /C calc'!A0 runs a program through DDE), so it gets a leading
// single quote, which they show as text and do not display. A cell that
// is a plain decimal number (-3, -0.25, +1e-05) is left alone: a
// spreadsheet reads it as that number, never as a formula. Any other
// cell is returned as it is.
func formulaCell(s string) string {
	if s == "" || !strings.ContainsRune("=+-@\t\r", rune(s[0])) || plainNumber.MatchString(s) {
		return s
	}
	return "'" + s
}

// plainNumber is a decimal number as spreadsheets read one: an optional
// sign, digits with an optional point, an optional exponent; nothing else.
var plainNumber = regexp.MustCompile(`^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$`)
