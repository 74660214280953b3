package postgres

// An item's record is stored binary (schema 13) instead of as JSON: its
// strings length-prefixed, without the keys and quotes JSON spells out
// for every item ("id", "text", "fields", each field's name in quotes),
// 40 to 60 bytes of a 250-byte record. It reads faster than the JSON it
// replaces: no string to unescape. A record whose strings are not all
// valid UTF-8 is stored as JSON, as before: json.Marshal replaces such
// bytes, and a record must read back as it read from JSON.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"unicode/utf8"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// tagRecord begins a binary record: uvarint-length-prefixed id and text,
// a uvarint count of fields and their name-value pairs, the same of
// types, then the line as a varint. A JSON record begins with '{'.
const tagRecord byte = 0x03

var errBadRecord = errors.New("binary record that does not decode")

// encodeRecord is the stored form of r.
func encodeRecord(r pipeline.Record) ([]byte, error) {
	if !recordUTF8(r) {
		return json.Marshal(r)
	}
	n := 1 + 2*binary.MaxVarintLen64 + len(r.ID) + len(r.Text) + 3*binary.MaxVarintLen64
	for k, v := range r.Fields {
		n += 2*binary.MaxVarintLen64 + len(k) + len(v)
	}
	for k, v := range r.Types {
		n += 2*binary.MaxVarintLen64 + len(k) + len(v)
	}
	b := make([]byte, 1, n)
	b[0] = tagRecord
	b = appendStr(b, r.ID)
	b = appendStr(b, r.Text)
	b = binary.AppendUvarint(b, uint64(len(r.Fields)))
	for _, k := range slices.Sorted(maps.Keys(r.Fields)) {
		b = appendStr(appendStr(b, k), r.Fields[k])
	}
	b = binary.AppendUvarint(b, uint64(len(r.Types)))
	for _, k := range slices.Sorted(maps.Keys(r.Types)) {
		b = appendStr(appendStr(b, k), string(r.Types[k]))
	}
	return binary.AppendVarint(b, int64(r.Line)), nil
}

// tagNamedRecord begins a binary record of schema step 18: the form of
// tagRecord without the id (the row's key) and with each field's and
// type's name as its uvarint number in field_name (names.go).
const tagNamedRecord byte = 0x04

// encodeNamedRecord is the tagNamedRecord form of r, when every name of
// r has a number in names and its strings are valid UTF-8; otherwise
// encodeRecord's form.
func encodeNamedRecord(r pipeline.Record, names *fieldNames) ([]byte, error) {
	if !recordUTF8(r) {
		return encodeRecord(r)
	}
	fields := slices.Sorted(maps.Keys(r.Fields))
	types := slices.Sorted(maps.Keys(r.Types))
	nums := make([]uint64, 0, len(fields)+len(types))
	for _, k := range slices.Concat(fields, types) {
		num, ok := names.number(k)
		if !ok {
			return encodeRecord(r)
		}
		nums = append(nums, num)
	}
	n := 1 + 3*binary.MaxVarintLen64 + len(r.Text) + 2*binary.MaxVarintLen64*len(nums)
	for _, v := range r.Fields {
		n += len(v)
	}
	for _, v := range r.Types {
		n += len(v)
	}
	b := make([]byte, 1, n)
	b[0] = tagNamedRecord
	b = appendStr(b, r.Text)
	b = binary.AppendUvarint(b, uint64(len(fields)))
	for i, k := range fields {
		b = appendStr(binary.AppendUvarint(b, nums[i]), r.Fields[k])
	}
	b = binary.AppendUvarint(b, uint64(len(types)))
	for i, k := range types {
		b = appendStr(binary.AppendUvarint(b, nums[len(fields)+i]), string(r.Types[k]))
	}
	return binary.AppendVarint(b, int64(r.Line)), nil
}

// storedAsJSON reports whether the stored record rec is JSON: a record
// with invalid UTF-8, which reads back with it replaced.
func storedAsJSON(rec []byte) bool {
	return len(rec) == 0 || rec[0] != tagRecord && rec[0] != tagNamedRecord
}

// recordUTF8 reports whether every string of r is valid UTF-8.
func recordUTF8(r pipeline.Record) bool {
	if !utf8.ValidString(r.ID) || !utf8.ValidString(r.Text) {
		return false
	}
	for k, v := range r.Fields {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return false
		}
	}
	for k, v := range r.Types {
		if !utf8.ValidString(k) || !utf8.ValidString(string(v)) {
			return false
		}
	}
	return true
}

func appendStr(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// binReader reads a binary record.
type binReader struct {
	b []byte
	// s is b as a string when the record is decoded into a
	// pipeline.Record: its text and values are substrings of it, one
	// allocation for all of them rather than one each.
	s string
	i int
}

func (br *binReader) uvarint() (uint64, bool) {
	n, w := binary.Uvarint(br.b[br.i:])
	if w <= 0 {
		return 0, false
	}
	br.i += w
	return n, true
}

// span reads a length-prefixed string, giving its bounds in b.
func (br *binReader) span() (start, end int, ok bool) {
	n, ok := br.uvarint()
	if !ok || n > uint64(len(br.b)-br.i) {
		return 0, 0, false
	}
	start = br.i
	br.i += int(n)
	return start, br.i, true
}

// text reads a length-prefixed string out of s.
func (br *binReader) text() (string, bool) {
	start, end, ok := br.span()
	return br.s[start:end], ok
}

// count reads a count of name-value pairs; one larger than the bytes
// left could hold is damage.
func (br *binReader) count() (int, bool) {
	n, ok := br.uvarint()
	if !ok || n > uint64(len(br.b)-br.i)/2 {
		return 0, false
	}
	return int(n), true
}

// decodeBinaryRecord reads a tagRecord record into r (nil: only the
// field names into keys).
func decodeBinaryRecord(raw []byte, r *pipeline.Record, keys map[string]bool) error {
	br := binReader{b: raw, s: string(raw), i: 1}
	id, ok := br.text()
	if !ok {
		return errBadRecord
	}
	return br.decodeRest(id, (*binReader).text, r, keys)
}

// decodeNamedRecord reads a tagNamedRecord record of item id into r (nil:
// only the field names into keys), its names numbered in names.
// A failed read of the names is a *nameReadError, not errBadRecord.
func decodeNamedRecord(raw []byte, id string, names *fieldNames, r *pipeline.Record, keys map[string]bool) error {
	br := binReader{b: raw, i: 1}
	if r != nil {
		br.s = string(raw)
	}
	var readErr error
	err := br.decodeRest(id, func(br *binReader) (string, bool) {
		num, ok := br.uvarint()
		if !ok {
			return "", false
		}
		name, ok, err := names.name(num)
		if err != nil {
			readErr = err
		}
		return name, ok
	}, r, keys)
	if readErr != nil {
		return readErr
	}
	return err
}

// decodeRest reads a binary record past its id, its names by key, into
// r (br.s set), or with r nil only its field names into keys.
func (br *binReader) decodeRest(id string, key func(*binReader) (string, bool), r *pipeline.Record, keys map[string]bool) error {
	textStart, textEnd, ok := br.span()
	if !ok {
		return errBadRecord
	}
	nf, ok := br.count()
	if !ok {
		return errBadRecord
	}
	var fields map[string]string
	if r != nil && nf > 0 {
		fields = make(map[string]string, nf)
	}
	for range nf {
		k, ok := key(br)
		if !ok {
			return errBadRecord
		}
		start, end, ok := br.span()
		if !ok {
			return errBadRecord
		}
		switch {
		case r != nil:
			fields[k] = br.s[start:end]
		case !keys[k]:
			keys[k] = true
		}
	}
	nt, ok := br.count()
	if !ok {
		return errBadRecord
	}
	var types map[string]pipeline.FieldType
	if r != nil && nt > 0 {
		types = make(map[string]pipeline.FieldType, nt)
	}
	for range nt {
		k, ok := key(br)
		if !ok {
			return errBadRecord
		}
		start, end, ok := br.span()
		if !ok {
			return errBadRecord
		}
		if r != nil {
			types[k] = pipeline.FieldType(br.s[start:end])
		}
	}
	line, w := binary.Varint(br.b[br.i:])
	if w <= 0 || br.i+w != len(br.b) {
		return errBadRecord
	}
	if r == nil {
		return nil
	}
	// As json.Unmarshal of what json.Marshal wrote: each name once.
	if len(fields) != nf || len(types) != nt {
		return errBadRecord
	}
	*r = pipeline.Record{ID: id, Text: br.s[textStart:textEnd], Fields: fields, Types: types, Line: int(line)}
	return nil
}
