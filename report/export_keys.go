package report

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/sawtooth-dev/sawtooth/internal/jsonscan"
)

// outputKeys adds the top-level keys of a stage output to keys, as
// decodeOutput would find them, without building its values: the
// columns pass of an export reads every output only for its keys.
func outputKeys(id, stage string, raw []byte, keys map[string]bool) error {
	if len(raw) == 0 {
		return nil
	}
	if !json.Valid(raw) || !addObjectKeys(raw, keys) {
		fields, err := decodeOutput(id, stage, raw)
		for k := range fields {
			keys[k] = true
		}
		return err
	}
	return nil
}

// addObjectKeys adds the keys of raw, valid JSON, to keys; false when
// raw is not an object.
func addObjectKeys(raw []byte, keys map[string]bool) bool {
	i := jsonscan.SkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return false
	}
	i = jsonscan.SkipSpace(raw, i+1)
	for i < len(raw) && raw[i] == '"' {
		end, plain := stringEnd(raw, i)
		k := raw[i+1 : end-1]
		switch {
		case plain && utf8.Valid(k):
			if !keys[string(k)] { // the lookup does not allocate
				keys[string(k)] = true
			}
		default:
			// Escapes and invalid UTF-8: as encoding/json reads them.
			var s string
			if json.Unmarshal(raw[i:end], &s) != nil {
				return false
			}
			keys[s] = true
		}
		i = skipValue(raw, jsonscan.SkipSpace(raw, jsonscan.SkipSpace(raw, end)+1)) // past the ':'
		if i = jsonscan.SkipSpace(raw, i); i < len(raw) && raw[i] == ',' {
			i = jsonscan.SkipSpace(raw, i+1)
		}
	}
	return true
}

// stringEnd is the index just past the string starting at b[i] (a
// quote), and whether it holds no escape.
func stringEnd(b []byte, i int) (int, bool) {
	plain := true
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			plain = false
			j++
		case '"':
			return j + 1, plain
		}
	}
	return len(b), plain
}

// skipValue is the index just past the value starting at b[i].
func skipValue(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch c := b[i]; {
		case c == '"':
			i, _ = stringEnd(b, i)
			if depth == 0 {
				return i
			}
			continue
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth == 0 {
				return i
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case depth == 0 && (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return i
		}
		i++
	}
	return i
}
