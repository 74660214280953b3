package report

import (
	"bytes"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// The CSV and TSV rows of a flat export, appended into the row's one
// buffer byte for byte as encoding/csv's Writer (Comma ',' or '\t', no
// CRLF) writes the cells flatCellText and formulaCell give. Going through
// csv.Writer took a string per cell (a copy of every output string, a
// second of every formula-quoted one) and a buffered write per cell and
// per separator; here a stored string without escapes goes from the
// output's bytes to the line once. TestAppendCSVField holds
// appendCSVField to csv.Writer, FuzzWriteFlat_SameAsBefore whole rows to the
// export before rows streamed (refWriteFlat), as TestWriteFlat_SameAsBefore does.

// appendCSVRow appends the row as one CSV (TSV) line.
func (w *rowWriter) appendCSVRow(b []byte) ([]byte, error) {
	for i, s := range w.colAt {
		if i > 0 {
			b = append(b, w.comma)
		}
		var err error
		if b, err = w.appendCSVCell(b, w.cells[s]); err != nil {
			return nil, fmt.Errorf("export: column %s: %w", w.cols[i], err)
		}
	}
	return append(b, '\n'), nil
}

// appendCSVCell appends c as flatCellText reads it, a text value through
// formulaCell unless the export writes raw cells.
func (w *rowWriter) appendCSVCell(b []byte, c cell) ([]byte, error) {
	if !c.set {
		return b, nil
	}
	if c.raw == nil {
		return appendCSVText(b, c.text, w.comma, w.formulas), nil
	}
	raw := c.raw
	switch raw[0] {
	case 'n':
		return b, nil
	case 't':
		return append(b, "true"...), nil
	case 'f':
		return append(b, "false"...), nil
	case '"':
		if !unquotable(raw) {
			break
		}
		s := raw[1 : len(raw)-1]
		if bytes.IndexByte(s, '\\') >= 0 {
			w.unquoted = appendUnquoted(w.unquoted[:0], s)
			s = w.unquoted
		}
		return appendCSVText(b, s, w.comma, w.formulas), nil
	case '{', '[':
		if canonicalJSON(raw) {
			return appendCSVField(b, raw, w.comma), nil
		}
	default:
		if canonicalNumber(raw) {
			return appendCSVField(b, raw, w.comma), nil
		}
	}
	v, isText, err := flatCellText(c)
	if err != nil {
		return b, err
	}
	if isText {
		return appendCSVText(b, v, w.comma, w.formulas), nil
	}
	return appendCSVField(b, v, w.comma), nil
}

// appendCSVText appends the text value s as a cell: with formulas, one a
// spreadsheet would run gets formulaCell's leading quote.
func appendCSVText[T string | []byte](b []byte, s T, comma byte, formulas bool) []byte {
	if !formulas || !formulaQuoted(s) {
		return appendCSVField(b, s, comma)
	}
	// "'"+s needs quotes exactly when s holds a quote, a line break or
	// the separator: it is neither empty nor `\.`, and starts with no
	// space.
	if !csvSpecial(s, comma) {
		b = append(b, '\'')
		return append(b, s...)
	}
	b = append(b, '"', '\'')
	return appendCSVQuotedBody(b, s)
}

// formulaQuoted says whether formulaCell quotes s.
func formulaQuoted[T string | []byte](s T) bool {
	if len(s) == 0 {
		return false
	}
	switch s[0] {
	case '=', '+', '-', '@', '\t', '\r':
		return !plainNumber.MatchString(string(s))
	}
	return false
}

// appendCSVField appends s as csv.Writer writes a field: quoted (a quote
// doubled) when it is `\.`, holds a quote, a line break or the separator,
// or starts with a space.
func appendCSVField[T string | []byte](b []byte, s T, comma byte) []byte {
	if !csvNeedsQuotes(s, comma) {
		return append(b, s...)
	}
	b = append(b, '"')
	return appendCSVQuotedBody(b, s)
}

// appendCSVQuotedBody appends s with each quote doubled, and the closing
// quote.
func appendCSVQuotedBody[T string | []byte](b []byte, s T) []byte {
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '"' {
			b = append(b, s[start:i+1]...)
			b = append(b, '"')
			start = i + 1
		}
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// csvNeedsQuotes is csv.Writer's fieldNeedsQuotes for a one-byte Comma.
func csvNeedsQuotes[T string | []byte](s T, comma byte) bool {
	if len(s) == 0 {
		return false
	}
	if string(s) == `\.` || csvSpecial(s, comma) {
		return true
	}
	if s[0] < utf8.RuneSelf {
		return unicode.IsSpace(rune(s[0]))
	}
	r, _ := utf8.DecodeRuneInString(string(s[:min(len(s), utf8.UTFMax)]))
	return unicode.IsSpace(r)
}

// csvSpecial says whether s holds a quote, a line break or the separator.
func csvSpecial[T string | []byte](s T, comma byte) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"', '\n', '\r', comma:
			return true
		}
	}
	return false
}
