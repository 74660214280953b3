package postgres

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/sawtooth-dev/sawtooth/internal/jsonscan"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// decodeRecord reads a stored pipeline.Record: a binary one
// (binrecord.go), or JSON exactly as json.Unmarshal into a zero Record
// would, error included. Whole-table reads (export,
// the report's streaming pass) decode a million records, and
// encoding/json spends most of their time there: records as
// json.Marshal wrote them (compact, known keys, plain strings) are read
// directly, and anything else goes to json.Unmarshal.
//
// It reads the forms of schema steps up to 17; readRecord reads those
// and the numbered names of step 18.
func decodeRecord(raw []byte, r *pipeline.Record) error {
	if len(raw) > 0 && raw[0] == tagRecord {
		return decodeBinaryRecord(raw, r, nil)
	}
	if len(raw) > 0 && raw[0] == tagNamedRecord {
		return errNamedRecord
	}
	if fastRecord(raw, r) {
		return nil
	}
	*r = pipeline.Record{}
	return json.Unmarshal(raw, r)
}

// errNamedRecord is decodeRecord's error for a record that names its
// fields by number: only a DB, which has the numbers, reads it.
var errNamedRecord = errors.New("a record of field numbers read without the field_name table")

// readRecord reads the stored record raw of item id in every form.
func (db *DB) readRecord(id string, raw []byte, r *pipeline.Record) error {
	if len(raw) > 0 && raw[0] == tagNamedRecord {
		return decodeNamedRecord(raw, id, db.names, r, nil)
	}
	return decodeRecord(raw, r)
}

// recordDamage is readRecord's error err for item id as the readers
// report it: damage (what says how), unless the record could not be read
// for want of its field names (a *nameReadError, returned as it is).
func recordDamage(id string, err error, what string) error {
	var ne *nameReadError
	if errors.As(err, &ne) {
		return err
	}
	return pipeline.Damaged(id, "", err, "%s", what)
}

// fastRecord decodes raw into r when it is a compact JSON object of
// Record's own keys, each once, spelt exactly, with plain strings (see
// strReader.plain) and a plain integer line:
// a form whose meaning json.Unmarshal shares. It reports false for
// anything else, r then half filled.
func fastRecord(raw []byte, r *pipeline.Record) bool {
	*r = pipeline.Record{}
	return scanRecord(raw, r, nil, nil)
}

// recordFieldKeys adds the names of raw's input fields to keys, as
// decodeRecord's Fields would have them, building no value.
func (db *DB) recordFieldKeys(id string, raw []byte, keys map[string]bool) error {
	switch {
	case len(raw) > 0 && raw[0] == tagRecord:
		return decodeBinaryRecord(raw, nil, keys)
	case len(raw) > 0 && raw[0] == tagNamedRecord:
		return decodeNamedRecord(raw, id, db.names, nil, keys)
	}
	var added []string
	if scanRecord(raw, nil, keys, &added) {
		return nil
	}
	// The scan stopped part way: the names it added may be ones
	// json.Unmarshal drops (a later "fields":null), so they go, and
	// the record's own names come from its decoding.
	for _, k := range added {
		delete(keys, k)
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
// field names to keys, each name keys did not hold also to *added;
// false when raw is not in the plain form, keys then perhaps holding
// names of a "fields" object a later key replaces.
func scanRecord(raw []byte, r *pipeline.Record, keys map[string]bool, added *[]string) bool {
	if len(raw) < 2 || raw[0] != '{' || raw[len(raw)-1] != '}' {
		return false
	}
	i := 1
	if raw[i] == '}' {
		return i == len(raw)-1
	}
	var seen [5]bool
	var st strReader
	for {
		key, next, ok := st.plain(raw, i)
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
			if v, i, ok = st.plain(raw, i); ok && r != nil {
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
					*added = append(*added, string(k))
				}
			}
			if r != nil {
				r.Fields = map[string]string{}
				set = func(k, v []byte) { r.Fields[string(k)] = string(v) }
			}
			i, ok = st.plainObject(raw, i, set)
		case "types":
			slot = 3
			set := func(_, _ []byte) {}
			if r != nil {
				r.Types = map[string]pipeline.FieldType{}
				set = func(k, v []byte) { r.Types[string(k)] = pipeline.FieldType(v) }
			}
			i, ok = st.plainObject(raw, i, set)
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

// strReader reads the JSON strings of one record. Most are read in place;
// one with escapes is decoded into buf, which holds every such string of
// the record until the record is done (its callers copy them out).
type strReader struct{ buf []byte }

// plain reads the JSON string at raw[i] as encoding/json would when it
// has no control characters, its escapes are JSON's (\u of a surrogate
// half aside) and it is valid UTF-8 (json.Unmarshal would replace invalid
// bytes): its text and the index past its closing quote.
func (st *strReader) plain(raw []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(raw) || raw[i] != '"' {
		return nil, i, false
	}
	ascii := true
	for j := i + 1; j < len(raw); j++ {
		switch c := raw[j]; {
		case c == '"':
			s = raw[i+1 : j]
			return s, j + 1, ascii || utf8.Valid(s)
		case c == '\\':
			return st.unescape(raw, i, j)
		case c < 0x20:
			return nil, i, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, i, false
}

// unescape is plain of the string at raw[i] whose first escape is at
// raw[j].
func (st *strReader) unescape(raw []byte, i, j int) ([]byte, int, bool) {
	start := len(st.buf)
	st.buf = append(st.buf, raw[i+1:j]...)
	for j < len(raw) {
		c := raw[j]
		switch {
		case c == '"':
			s := st.buf[start:]
			return s, j + 1, utf8.Valid(s)
		case c < 0x20:
			return nil, i, false
		case c != '\\':
			st.buf = append(st.buf, c)
			j++
			continue
		}
		if j+1 >= len(raw) {
			return nil, i, false
		}
		switch e := raw[j+1]; e {
		case '"', '\\', '/':
			st.buf = append(st.buf, e)
		case 'b':
			st.buf = append(st.buf, '\b')
		case 'f':
			st.buf = append(st.buf, '\f')
		case 'n':
			st.buf = append(st.buf, '\n')
		case 'r':
			st.buf = append(st.buf, '\r')
		case 't':
			st.buf = append(st.buf, '\t')
		case 'u':
			r, ok := hex4(raw[j+2:])
			if !ok || utf16.IsSurrogate(r) {
				return nil, i, false
			}
			st.buf = utf8.AppendRune(st.buf, r)
			j += 6
			continue
		default:
			return nil, i, false
		}
		j += 2
	}
	return nil, i, false
}

// hex4 reads the four hexadecimal digits b starts with.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// plainObject reads a JSON object of plain string values at raw[i],
// calling set for each pair in order, and returns the index past it.
func (st *strReader) plainObject(raw []byte, i int, set func(k, v []byte)) (int, bool) {
	if i >= len(raw) || raw[i] != '{' {
		return i, false
	}
	i++
	if i < len(raw) && raw[i] == '}' {
		return i + 1, true
	}
	for {
		k, next, ok := st.plain(raw, i)
		if !ok || next >= len(raw) || raw[next] != ':' {
			return i, false
		}
		v, next, ok := st.plain(raw, next+1)
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
// Outputs that a strict reader of JSON's grammar walks whole are read
// in that one walk; any other is decoded.
func objectKeys(raw []byte, keys map[string]bool) bool {
	if strictObjectKeys(raw, keys) {
		return true
	}
	// As json.Decoder reads it: the first value, trailing bytes aside;
	// null is no keys.
	var m map[string]json.RawMessage
	if json.NewDecoder(bytes.NewReader(raw)).Decode(&m) != nil {
		return false
	}
	for k := range m {
		keys[k] = true
	}
	return true
}

// strictObjectKeys adds the keys of raw when it is one valid JSON object
// (whitespace around it aside) that jsonscan.Value reads; false otherwise,
// some of its keys perhaps added (the first value's, as a decoder
// would).
func strictObjectKeys(raw []byte, keys map[string]bool) bool {
	i := jsonscan.SkipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return false
	}
	i = jsonscan.SkipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return jsonscan.SkipSpace(raw, i+1) == len(raw)
	}
	for {
		end, ok := jsonscan.String(raw, i)
		if !ok || !addKey(raw[i:end], keys) {
			return false
		}
		if i = jsonscan.SkipSpace(raw, end); i >= len(raw) || raw[i] != ':' {
			return false
		}
		if i, ok = jsonscan.Value(raw, i+1, 1); !ok {
			return false
		}
		if i = jsonscan.SkipSpace(raw, i); i >= len(raw) {
			return false
		}
		switch raw[i] {
		case ',':
			i = jsonscan.SkipSpace(raw, i+1)
		case '}':
			return jsonscan.SkipSpace(raw, i+1) == len(raw)
		default:
			return false
		}
	}
}

// addKey adds the JSON string str (quotes included, valid) to keys as
// encoding/json reads it.
func addKey(str []byte, keys map[string]bool) bool {
	k := str[1 : len(str)-1]
	if bytes.IndexByte(k, '\\') < 0 && utf8.Valid(k) {
		if !keys[string(k)] { // the lookup does not allocate
			keys[string(k)] = true
		}
		return true
	}
	var s string
	if json.Unmarshal(str, &s) != nil {
		return false
	}
	keys[s] = true
	return true
}
