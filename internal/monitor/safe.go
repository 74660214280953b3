package monitor

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// TerminalSafe returns s with every control character (C0, DEL and C1:
// ESC sequences, carriage returns, line breaks) and every invalid UTF-8
// byte written as a visible Go escape (\x1b, \n, \u009b, \xff), so that
// text from an input file or a server can neither drive the terminal
// nor fake lines of output. Other text is returned unchanged.
func TerminalSafe(s string) string {
	clean := true
	for i, r := range s {
		if unicode.IsControl(r) || r == utf8.RuneError && isInvalidAt(s, i) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && isInvalidAt(s, i):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TerminalSafeLines is TerminalSafe for a message of several lines: its
// line breaks stay line breaks, every other control character is escaped.
func TerminalSafeLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = TerminalSafe(l)
	}
	return strings.Join(lines, "\n")
}

// isInvalidAt says whether the RuneError decoded at s[i] stands for an
// invalid byte rather than a literal U+FFFD.
func isInvalidAt(s string, i int) bool {
	_, size := utf8.DecodeRuneInString(s[i:])
	return size == 1
}

// WriteJSONSafe writes v as indented JSON with the C1 control characters
// and DEL escaped too (encoding/json escapes only those below U+0020), so
// that the JSON shown on a terminal carries no control sequence.
func WriteJSONSafe(w io.Writer, v any) error {
	var buf bytes.Buffer
	if err := writeJSON(&buf, v); err != nil {
		return err
	}
	_, err := w.Write(EscapeJSONControls(buf.Bytes()))
	return err
}

// EscapeJSONControls rewrites DEL and the C1 control characters in
// encoded JSON as \u escapes. They can only occur inside strings (JSON's
// own syntax is ASCII), where the escape means the same character.
func EscapeJSONControls(b []byte) []byte {
	if !bytes.ContainsFunc(b, isC1) {
		return b
	}
	var out bytes.Buffer
	for _, r := range string(b) {
		if isC1(r) {
			fmt.Fprintf(&out, `\u%04x`, r)
		} else {
			out.WriteRune(r)
		}
	}
	return out.Bytes()
}

// isC1 is DEL or a C1 control character.
func isC1(r rune) bool { return r >= 0x7f && r <= 0x9f }
