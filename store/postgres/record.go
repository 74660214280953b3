package postgres

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// decodeRecord reads a stored pipeline.Record exactly as json.Unmarshal
// into a zero Record would, error included. Whole-table reads (export,
// the report's streaming pass) decode a million records, and
// encoding/json spends most of their time there: records as
// json.Marshal wrote them (compact, known keys, strings without
// escapes) are read directly, and anything else goes to json.Unmarshal.
func decodeRecord(raw []byte, r *pipeline.Record) error {
	if fastRecord(raw, r) {
		return nil
	}
	*r = pipeline.Record{}
	return json.Unmarshal(raw, r)
}

// fastRecord decodes raw into r when it is a compact JSON object of
// Record's own keys, each once, spelt exactly, with plain strings (no
// escapes, no control characters, valid UTF-8) and a plain integer line:
// a form whose meaning json.Unmarshal shares. It reports false for
// anything else, r then half filled.
func fastRecord(raw []byte, r *pipeline.Record) bool {
	*r = pipeline.Record{}
	return scanRecord(raw, r, nil)
}

// recordFieldKeys adds the names of raw's input fields to keys, as
// decodeRecord's Fields would have them, building no value.
func recordFieldKeys(raw []byte, keys map[string]bool) error {
	if scanRecord(raw, nil, keys) {
		return nil
	}
	var r pipeline.Record
	if err := json.Unmarshal(raw, &r); err != nil {
		return err
	}
	for k := range r.Fields {
		keys[k] = true
	}
	return nil
}

// scanRecord is fastRecord filling r, or with r nil only adding the
// field names to keys; false when raw is not in the plain form.
func scanRecord(raw []byte, r *pipeline.Record, keys map[string]bool) bool {
	if len(raw) < 2 || raw[0] != '{' || raw[len(raw)-1] != '}' {
		return false
	}
	i := 1
	if raw[i] == '}' {
		return i == len(raw)-1
	}
	var seen [5]bool
	for {
		key, next, ok := plainString(raw, i)
		if !ok || next >= len(raw) || raw[next] != ':' {
			return false
		}
		i = next + 1
		slot := -1
		switch string(key) {
		case "id", "text":
			slot = 0
			if key[0] == 't' {
				slot = 1
			}
			var v []byte
			if v, i, ok = plainString(raw, i); ok && r != nil {
				if slot == 0 {
					r.ID = string(v)
				} else {
					r.Text = string(v)
				}
			}
		case "fields":
			slot = 2
			set := func(k, _ []byte) {
				if !keys[string(k)] { // the lookup does not allocate
					keys[string(k)] = true
				}
			}
			if r != nil {
				r.Fields = map[string]string{}
				set = func(k, v []byte) { r.Fields[string(k)] = string(v) }
			}
			i, ok = plainObject(raw, i, set)
		case "types":
			slot = 3
			set := func(_, _ []byte) {}
			if r != nil {
				r.Types = map[string]pipeline.FieldType{}
				set = func(k, v []byte) { r.Types[string(k)] = pipeline.FieldType(v) }
			}
			i, ok = plainObject(raw, i, set)
		case "line":
			slot = 4
			var n int
			if n, i, ok = plainInt(raw, i); ok && r != nil {
				r.Line = n
			}
		}
		if slot < 0 || !ok || seen[slot] {
			return false
		}
		seen[slot] = true
		if i >= len(raw) {
			return false
		}
		switch raw[i] {
		case ',':
			i++
		case '}':
			return i == len(raw)-1
		default:
			return false
		}
	}
}

// plainString reads the JSON string at raw[i] when it has no escapes or
// control characters and is valid UTF-8 (json.Unmarshal would replace
// invalid bytes): its bytes and the index past its closing quote.
func plainString(raw []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(raw) || raw[i] != '"' {
		return nil, i, false
	}
	ascii := true
	for j := i + 1; j < len(raw); j++ {
		switch c := raw[j]; {
		case c == '"':
			s = raw[i+1 : j]
			return s, j + 1, ascii || utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, i, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, i, false
}

// plainObject reads a JSON object of plain string values at raw[i],
// calling set for each pair in order, and returns the index past it.
func plainObject(raw []byte, i int, set func(k, v []byte)) (int, bool) {
	if i >= len(raw) || raw[i] != '{' {
		return i, false
	}
	i++
	if i < len(raw) && raw[i] == '}' {
		return i + 1, true
	}
	for {
		k, next, ok := plainString(raw, i)
		if !ok || next >= len(raw) || raw[next] != ':' {
			return i, false
		}
		v, next, ok := plainString(raw, next+1)
		if !ok || next >= len(raw) {
			return i, false
		}
		set(k, v)
		switch raw[next] {
		case ',':
			i = next + 1
		case '}':
			return next + 1, true
		default:
			return i, false
		}
	}
}

// plainInt reads a JSON integer of at most 18 digits at raw[i] (no
// fraction, no exponent, no leading zero): it fits an int exactly.
func plainInt(raw []byte, i int) (int, int, bool) {
	neg := i < len(raw) && raw[i] == '-'
	if neg {
		i++
	}
	start, n := i, 0
	for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
		n = n*10 + int(raw[i]-'0')
		i++
	}
	digits := i - start
	if digits == 0 || digits > 18 || (digits > 1 && raw[start] == '0') {
		return 0, i, false
	}
	if neg {
		n = -n
	}
	return n, i, true
}

// objectKeys adds the top-level keys of a stage output to keys as
// report's export reads them (encoding/json's reading of the first JSON
// value), skipping the values; false when raw holds no JSON object.
func objectKeys(raw []byte, keys map[string]bool) bool {
	i := skipSpace(raw, 0)
	if !json.Valid(raw) || raw[i] != '{' {
		// As json.Decoder reads it: the first value, trailing bytes
		// aside; null is no keys.
		var m map[string]json.RawMessage
		if json.NewDecoder(bytes.NewReader(raw)).Decode(&m) != nil {
			return false
		}
		for k := range m {
			keys[k] = true
		}
		return true
	}
	for i = skipSpace(raw, i+1); raw[i] == '"'; {
		end := stringEnd(raw, i)
		k := raw[i+1 : end-1]
		if bytes.IndexByte(k, '\\') < 0 && utf8.Valid(k) {
			if !keys[string(k)] { // the lookup does not allocate
				keys[string(k)] = true
			}
		} else {
			var s string
			if json.Unmarshal(raw[i:end], &s) != nil {
				return false
			}
			keys[s] = true
		}
		i = skipSpace(raw, skipValue(raw, skipSpace(raw, skipSpace(raw, end)+1)))
		if raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	return true
}

// The skips below walk JSON that json.Valid accepted.

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd is the index past the string starting at b[i].
func stringEnd(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue is the index past the value starting at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = stringEnd(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for ; i < len(b); i++ {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
	}
	return i
}
