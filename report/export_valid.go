package report

// A strict reader of JSON's grammar for the row pass: it proves an
// output valid as it finds its fields, which json.Valid did in a pass
// of its own at several times the cost. An output it does not accept
// takes the way it took before (json.Valid, then a decoder), so an
// invalid one fails as it did.

// validValue is the index just past the JSON value at b[i] (leading
// whitespace skipped), and whether it is valid.
func validValue(b []byte, i, depth int) (int, bool) {
	i = skipSpace(b, i)
	if i >= len(b) || depth > 1000 {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		return validString(b, i)
	case c == '{' || c == '[':
		return validContainer(b, i, depth)
	case c == 't':
		return validWord(b, i, "true")
	case c == 'f':
		return validWord(b, i, "false")
	case c == 'n':
		return validWord(b, i, "null")
	default:
		return validNumber(b, i)
	}
}

func validWord(b []byte, i int, w string) (int, bool) {
	if len(b)-i >= len(w) && string(b[i:i+len(w)]) == w {
		return i + len(w), true
	}
	return i, false
}

// validContainer reads the object or array at b[i].
func validContainer(b []byte, i, depth int) (int, bool) {
	obj := b[i] == '{'
	close := byte(']')
	if obj {
		close = '}'
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == close {
		return i + 1, true
	}
	for {
		var ok bool
		if obj {
			if i >= len(b) || b[i] != '"' {
				return i, false
			}
			if i, ok = validString(b, i); !ok {
				return i, false
			}
			if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
				return i, false
			}
			i++
		}
		if i, ok = validValue(b, i, depth+1); !ok {
			return i, false
		}
		if i = skipSpace(b, i); i >= len(b) {
			return i, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case close:
			return i + 1, true
		default:
			return i, false
		}
	}
}

// validString reads the string at b[i]: no control characters, only
// JSON's escapes.
func validString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1, true
		case c < 0x20:
			return j, false
		case c == '\\':
			if j+1 >= len(b) {
				return j, false
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j++
			case 'u':
				if j+5 >= len(b) {
					return j, false
				}
				for _, h := range b[j+2 : j+6] {
					if !isHex(h) {
						return j, false
					}
				}
				j += 5
			default:
				return j, false
			}
		}
	}
	return len(b), false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// validNumber reads the number at b[i]: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func validNumber(b []byte, i int) (int, bool) {
	digits := func(i int) (int, bool) {
		j := i
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		return j, j > i
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else if j, ok := digits(i); ok {
		i = j
	} else {
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		j, ok := digits(i + 1)
		if !ok {
			return j, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j, ok := digits(i)
		if !ok {
			return j, false
		}
		i = j
	}
	return i, true
}
