package report

import (
	"bytes"
	"encoding/json"
	"slices"
	"unicode/utf8"

	"github.com/sawtooth-dev/sawtooth/internal/jsonquote"
	"github.com/sawtooth-dev/sawtooth/internal/jsonscan"
)

// How the row pass tells whether a stored JSON value is already what
// decoding it and marshalling it again gives, so it goes out as it is.

// plainJSONString says whether the JSON string raw reads back as itself
// through encoding/json: nothing that encoding/json would write another
// way (an escape it does not use, a character it escapes left bare,
// invalid UTF-8).
func plainJSONString(raw []byte) bool {
	end, ok := plainStringEnd(raw, 0)
	return ok && end == len(raw)
}

// plainStringEnd is the end of the JSON string at raw[i] when it is
// plain (plainJSONString), ok false when it is not plain or not a whole
// string. It finds both in one pass: the row pass scanned each string
// value of an output twice, once for its end and once to see it could
// go out as it is.
func plainStringEnd(raw []byte, i int) (end int, ok bool) {
	if i >= len(raw) || raw[i] != '"' {
		return 0, false
	}
	s := raw[i+1:]
	for j := 0; j < len(s); {
		j += jsonquote.PlainLen(s[j:])
		if j == len(s) {
			break
		}
		c := s[j]
		switch {
		case c == '"':
			return i + 1 + j + 1, true
		case c == '\\':
			n := escapeLen(s[j:])
			if n == 0 {
				return 0, false
			}
			j += n
		case c < utf8.RuneSelf:
			if c < 0x20 || c == '<' || c == '>' || c == '&' {
				return 0, false
			}
			j++
		default:
			r, size := utf8.DecodeRune(s[j:])
			if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
				return 0, false
			}
			j += size
		}
	}
	return 0, false
}

// escapeLen is the length of the escape at the start of s when it is one
// encoding/json writes (jsonquote.Append), 0 when not.
func escapeLen(s []byte) int {
	if len(s) < 2 {
		return 0
	}
	switch s[1] {
	case '"', '\\', 'b', 'f', 'n', 'r', 't':
		return 2
	case 'u':
		if len(s) < 6 {
			return 0
		}
		switch u := string(s[2:6]); u {
		case "003c", "003e", "0026", "2028", "2029":
			return 6
		default:
			if u[0] != '0' || u[1] != '0' || !isLowerHex(u[2]) || !isLowerHex(u[3]) {
				return 0
			}
			v := unhex(u[2])<<4 | unhex(u[3])
			if v >= 0x20 || v == '\b' || v == '\f' || v == '\n' || v == '\r' || v == '\t' {
				return 0
			}
			return 6
		}
	}
	return 0
}

func isLowerHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}

// unquotable says whether unquotePlain reads the JSON string raw as
// encoding/json does: valid UTF-8, and only escapes encoding/json writes.
func unquotable(raw []byte) bool {
	s := raw[1 : len(raw)-1]
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '\\':
			n := escapeLen(s[i:])
			if n == 0 {
				return false
			}
			i += n
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				return false
			}
			i += size
		}
	}
	return true
}

// unquotePlain is the string an unquotable raw holds.
func unquotePlain(raw []byte) string {
	s := raw[1 : len(raw)-1]
	if bytes.IndexByte(s, '\\') < 0 {
		return string(s)
	}
	return string(appendUnquoted(make([]byte, 0, len(s)), s))
}

// appendUnquoted appends what s, the inside of an unquotable JSON string,
// holds.
func appendUnquoted(b, s []byte) []byte {
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			b = append(b, s[i])
			i++
			continue
		}
		switch c := s[i+1]; c {
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			switch u := string(s[i+2 : i+6]); u {
			case "2028":
				b = append(b, "\u2028"...)
			case "2029":
				b = append(b, "\u2029"...)
			default:
				b = append(b, unhex(u[2])<<4|unhex(u[3]))
			}
			i += 6
			continue
		default:
			b = append(b, c)
		}
		i += 2
	}
	return b
}

// canonicalJSON says whether raw, a valid JSON object or array, is
// already what decoding it and marshalling it again (numbers through
// numberText) gives: no whitespace, object keys in sorted order and
// none twice, strings and numbers that read back as themselves.
func canonicalJSON(raw []byte) bool {
	end, ok := canonicalValue(raw, 0, 0)
	return ok && end == len(raw)
}

// canonicalValue checks the value at raw[i], returning the index past it.
func canonicalValue(raw []byte, i, depth int) (int, bool) {
	if i >= len(raw) || depth > 100 {
		return i, false
	}
	switch c := raw[i]; {
	case c == '"':
		end, _ := stringEnd(raw, i)
		return end, plainJSONString(raw[i:end])
	case c == '{' || c == '[':
		close := byte('}')
		if c == '[' {
			close = ']'
		}
		i++
		var prev []byte
		for first := true; ; first = false {
			if i < len(raw) && raw[i] == close && first {
				return i + 1, true
			}
			if c == '{' {
				if i >= len(raw) || raw[i] != '"' {
					return i, false
				}
				end, _ := stringEnd(raw, i)
				if !plainJSONString(raw[i:end]) || end-i < 2 || bytes.IndexByte(raw[i:end], '\\') >= 0 {
					return i, false
				}
				// encoding/json sorts the decoded keys: compare what is
				// between the quotes (a key with an escape decodes to
				// other bytes, and went to the decoder above).
				key := raw[i+1 : end-1]
				if (prev != nil && bytes.Compare(key, prev) <= 0) || end >= len(raw) || raw[end] != ':' {
					return i, false
				}
				prev, i = key, end+1
			}
			var ok bool
			if i, ok = canonicalValue(raw, i, depth+1); !ok || i >= len(raw) {
				return i, false
			}
			switch raw[i] {
			case ',':
				i++
			case close:
				return i + 1, true
			default:
				return i, false
			}
		}
	case c == 't' || c == 'f' || c == 'n':
		end := skipValue(raw, i)
		return end, true
	default:
		end := skipValue(raw, i)
		return end, canonicalNumber(raw[i:end]) || numberText(json.Number(raw[i:end])) == string(raw[i:end])
	}
}

// maxPlainDigits is the most significant digits canonicalNumber accepts: a
// decimal of up to 15 reads back from its float64 as itself, and
// FormatNumber rounds to 12 first.
const maxPlainDigits = 12

// canonicalNumber says whether the JSON number raw is already what
// numberText gives, so it can be copied instead of parsed and formatted
// again (the confidences, counts and ratings of every row): an integer
// of at most 18 digits without a leading zero, other than -0, or a
// decimal of at most maxPlainDigits significant digits, at most
// maxLeadingZeros zeros before them, no exponent, and no trailing zero.
// false says nothing: numberText decides.
func canonicalNumber(raw []byte) bool {
	i := 0
	if i < len(raw) && raw[i] == '-' {
		i++
	}
	start := i
	for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
		i++
	}
	intDigits := i - start
	if intDigits == 0 || (intDigits > 1 && raw[start] == '0') {
		return false
	}
	if i == len(raw) {
		return intDigits <= 18 && string(raw) != "-0"
	}
	if raw[i] != '.' {
		return false
	}
	i++
	frac := i
	for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
		i++
	}
	if i != len(raw) || i == frac || raw[i-1] == '0' {
		return false
	}
	// Significant digits: those after the leading zeros of the integer
	// part and fraction together.
	digits := raw[start:]
	sig, zeros, lead := 0, 0, true
	for _, c := range digits {
		if c == '.' {
			continue
		}
		if lead && c == '0' {
			zeros++
			continue
		}
		lead = false
		sig++
	}
	return sig <= maxPlainDigits && zeros <= maxLeadingZeros
}

// maxLeadingZeros is the most zeros canonicalNumber accepts before a
// decimal's first significant digit (the integer part's 0 among them):
// at most 300 keeps it at or above 1e-300, where a float64 still holds 15
// digits; below about 2.2e-308 it holds fewer, and below about 5e-324 it
// reads as 0, so numberText gives other digits.
const maxLeadingZeros = 300

// canonicalObjectMax is the most fields appendCanonical sorts in one
// object; a larger one goes to the decoder, which sorts as well.
const canonicalObjectMax = 64

// appendCanonical appends the JSON object or array raw as decoding it and
// marshalling it again (numbers through numberText) writes it, when that
// is raw's own bytes rearranged: object keys sorted, numbers rewritten,
// whitespace dropped. Outputs are mostly canonical already, but a model's
// or SDK's object (classify's usage) keeps its keys in the order it wrote
// them, and decoding every such value cost a fifth of an export's CPU.
// ok is false when raw needs the decoder: a string or key that
// encoding/json writes another way, a repeated or empty key, deep
// nesting, a number numberText does not keep valid, or invalid JSON.
func appendCanonical(b, raw []byte) ([]byte, bool) {
	start := len(b)
	b, end, ok := appendCanonicalAt(b, raw, jsonscan.SkipSpace(raw, 0), 0)
	if !ok || jsonscan.SkipSpace(raw, end) != len(raw) {
		return b[:start], false
	}
	return b, true
}

// appendCanonicalAt appends the value at raw[i] canonically, returning
// the index past it.
func appendCanonicalAt(b, raw []byte, i, depth int) ([]byte, int, bool) {
	if i >= len(raw) || depth > 100 {
		return b, i, false
	}
	switch c := raw[i]; {
	case c == '"':
		end, ok := jsonscan.String(raw, i)
		if !ok || !plainJSONString(raw[i:end]) {
			return b, i, false
		}
		return append(b, raw[i:end]...), end, true
	case c == '{':
		return appendCanonicalObject(b, raw, i, depth)
	case c == '[':
		b = append(b, '[')
		i = jsonscan.SkipSpace(raw, i+1)
		if i < len(raw) && raw[i] == ']' {
			return append(b, ']'), i + 1, true
		}
		for {
			var ok bool
			if b, i, ok = appendCanonicalAt(b, raw, i, depth+1); !ok {
				return b, i, false
			}
			if i = jsonscan.SkipSpace(raw, i); i >= len(raw) {
				return b, i, false
			}
			switch raw[i] {
			case ',':
				b = append(b, ',')
				i = jsonscan.SkipSpace(raw, i+1)
			case ']':
				return append(b, ']'), i + 1, true
			default:
				return b, i, false
			}
		}
	default:
		end, ok := jsonscan.Value(raw, i, depth)
		if !ok {
			return b, i, false
		}
		v := raw[i:end]
		switch {
		case c == 't' || c == 'f' || c == 'n' || canonicalNumber(v):
			return append(b, v...), end, true
		}
		n := numberText(json.Number(v))
		if e, ok := jsonscan.Value([]byte(n), 0, 0); !ok || e != len(n) || (n[0] != '-' && (n[0] < '0' || n[0] > '9')) {
			return b, i, false // json.Marshal refuses it: the decoder's way gives that error
		}
		return append(b, n...), end, true
	}
}

// canonicalField is one field of an object appendCanonicalObject sorts.
type canonicalField struct {
	key        []byte // between the quotes, no escapes
	start, end int    // the value's bytes in raw
}

// appendCanonicalObject appends the object at raw[i] with its keys in
// encoding/json's order (sorted by their bytes, as strings compare).
func appendCanonicalObject(b, raw []byte, i, depth int) ([]byte, int, bool) {
	var buf [16]canonicalField
	fields := buf[:0]
	i = jsonscan.SkipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return append(b, "{}"...), i + 1, true
	}
	for {
		if i >= len(raw) || raw[i] != '"' || len(fields) == canonicalObjectMax {
			return b, i, false
		}
		end, ok := jsonscan.String(raw, i)
		if !ok || end-i < 3 || bytes.IndexByte(raw[i:end], '\\') >= 0 || !plainJSONString(raw[i:end]) {
			return b, i, false
		}
		key := raw[i+1 : end-1]
		if i = jsonscan.SkipSpace(raw, end); i >= len(raw) || raw[i] != ':' {
			return b, i, false
		}
		start := jsonscan.SkipSpace(raw, i+1)
		stop, ok := jsonscan.Value(raw, start, depth+1)
		if !ok {
			return b, i, false
		}
		fields = append(fields, canonicalField{key: key, start: start, end: stop})
		if i = jsonscan.SkipSpace(raw, stop); i >= len(raw) {
			return b, i, false
		}
		if raw[i] == '}' {
			i++
			break
		}
		if raw[i] != ',' {
			return b, i, false
		}
		i = jsonscan.SkipSpace(raw, i+1)
	}
	slices.SortFunc(fields, func(x, y canonicalField) int { return bytes.Compare(x.key, y.key) })
	b = append(b, '{')
	for k, f := range fields {
		if k > 0 {
			if bytes.Equal(f.key, fields[k-1].key) {
				return b, i, false // the decoder keeps the last: leave it that way
			}
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, f.key...)
		b = append(b, '"', ':')
		var ok bool
		if b, _, ok = appendCanonicalAt(b, raw[:f.end], f.start, depth+1); !ok {
			return b, i, false
		}
	}
	return append(b, '}'), i, true
}
