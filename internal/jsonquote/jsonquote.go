// Package jsonquote writes a string as a JSON string, byte for byte as
// encoding/json's Marshal does, without reflection or an allocation per
// string: the store packs records through it and export writes rows with
// it, both exactly as Marshal would.
package jsonquote

import "unicode/utf8"

// Append appends s as a JSON string the way encoding/json writes it
// (HTML characters, U+2028 and U+2029 escaped, invalid UTF-8 as U+FFFD).
// The bbolt store's record format depends on it (a record packs only if
// it reads back byte for byte through it) and so does export's output:
// it must never change.
func Append(out []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	out = append(out, '"')
	start := 0
	for i := 0; i < len(s); {
		i += PlainLen(s[i:])
		if i == len(s) {
			break
		}
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			out = append(out, s[start:i]...)
			switch b {
			case '"', '\\':
				out = append(out, '\\', b)
			case '\b':
				out = append(out, '\\', 'b')
			case '\f':
				out = append(out, '\\', 'f')
			case '\n':
				out = append(out, '\\', 'n')
			case '\r':
				out = append(out, '\\', 'r')
			case '\t':
				out = append(out, '\\', 't')
			default:
				out = append(out, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			out = append(out, s[start:i]...)
			out = append(out, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			out = append(out, s[start:i]...)
			out = append(out, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	out = append(out, s[start:]...)
	return append(out, '"')
}
