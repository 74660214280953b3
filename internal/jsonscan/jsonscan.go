// Package jsonscan reads JSON's grammar (RFC 8259) in place, without
// decoding: where a value ends and whether it is valid. The export row
// pass and the PostgreSQL record reader prove an output valid as they
// find its fields with it, which json.Valid did in a pass of its own at
// several times the cost. It accepts exactly what json.Valid accepts
// (FuzzValue holds it to that), so a caller that falls back to
// encoding/json on a value it refuses fails as encoding/json would.
package jsonscan

import "github.com/sawtooth-dev/sawtooth/internal/jsonquote"

// MaxDepth bounds Value's nesting: a deeper value is refused, and its
// caller's fallback to encoding/json decides.
const MaxDepth = 1000

// SkipSpace is the index of the first byte at or after b[i] that is not
// JSON whitespace.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// Value is the index just past the JSON value at b[i] (leading
// whitespace skipped), and whether it is valid. depth is the nesting the
// value sits at (0 at the top); past MaxDepth it is refused. The bytes
// of strings are not checked as UTF-8, as json.Valid does not.
func Value(b []byte, i, depth int) (int, bool) {
	i = SkipSpace(b, i)
	if i >= len(b) || depth > MaxDepth {
		return i, false
	}
	switch b[i] {
	case '"':
		return String(b, i)
	case '{', '[':
		return container(b, i, depth)
	case 't':
		return word(b, i, "true")
	case 'f':
		return word(b, i, "false")
	case 'n':
		return word(b, i, "null")
	default:
		return number(b, i)
	}
}

func word(b []byte, i int, w string) (int, bool) {
	if len(b)-i >= len(w) && string(b[i:i+len(w)]) == w {
		return i + len(w), true
	}
	return i, false
}

// container reads the object or array at b[i].
func container(b []byte, i, depth int) (int, bool) {
	obj := b[i] == '{'
	closing := byte(']')
	if obj {
		closing = '}'
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == closing {
		return i + 1, true
	}
	for {
		var ok bool
		if obj {
			if i, ok = String(b, i); !ok {
				return i, false
			}
			if i = SkipSpace(b, i); i >= len(b) || b[i] != ':' {
				return i, false
			}
			i++
		}
		if i, ok = Value(b, i, depth+1); !ok {
			return i, false
		}
		if i = SkipSpace(b, i); i >= len(b) {
			return i, false
		}
		switch b[i] {
		case ',':
			i = SkipSpace(b, i+1)
		case closing:
			return i + 1, true
		default:
			return i, false
		}
	}
}

// String is the index just past the string at b[i] (which must be its
// opening quote), and whether it is valid: no control characters, only
// JSON's escapes.
func String(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return i, false
	}
	for i++; i < len(b); i++ {
		if i += jsonquote.PlainLen(b[i:]); i == len(b) {
			break
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		case c == '\\':
			i++
			if i >= len(b) {
				return i, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i <= 4 || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
					return i, false
				}
				i += 4
			default:
				return i, false
			}
		}
	}
	return i, false
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// number reads -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? at b[i].
func number(b []byte, i int) (int, bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i)
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

// digits is the index just past the decimal digits at b[i].
func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}
