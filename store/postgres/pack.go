package postgres

// This file stores outputs packed (schema 13): the JSON an output is,
// byte for byte, without what every output of a stage repeats. An
// output is a small JSON object whose keys are most of its bytes (a
// classify output is 190 bytes, 90 of them its keys and punctuation),
// and PostgreSQL compresses no value under 2 KB. Packed, a value is a
// kind byte and its bytes; the keys the built-in stages write are one
// byte each (packKeys); a small integer is a uvarint; a string equal to
// the item's text (what sanitizing a clean text gives, at the stages
// marks allows) is one byte. Strings and numbers keep their literals, so
// unpacking writes the JSON back exactly; an output that does not come
// back byte for byte (whitespace, a duplicate of nothing packable) is
// stored as before, whole or marked. The tag byte cannot begin a JSON
// value, nor a marked output, so every form reads as what it is.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/sawtooth-dev/sawtooth/internal/jsonscan"
)

// tagPacked begins a packed output.
const tagPacked byte = 0x03

// Kinds of a packed value.
const (
	kEnd       byte = iota // the end of an object's or array's members
	kNull                  // null
	kFalse                 // false
	kTrue                  // true
	kUint                  // uvarint: a non-negative integer of at most 18 digits, no leading zero
	kNumber                // uvarint length, the number's literal
	kString                // uvarint length, the string's bytes between its quotes, escapes as written
	kTextEsc               // the item's text as json.Marshal writes it
	kTextPlain             // the item's text without HTML escapes
	kArray                 // values, then kEnd
	kObject                // key-value pairs, then a key of 0
)

// packKeys are the object keys the built-in stages write (sanitize,
// classify and its usage, aggregate's fact), stored as one byte: key i
// is written as uvarint 2i+2. Any other key is written as 2n+1 and its
// n bytes. Never reorder or remove an entry: stored outputs name them
// by position. Append only, and only in a new schema version.
var packKeys = []string{
	"text", "chars", "truncated", "original_chars", "changes",
	"label", "confidence", "reason", "model", "model_version", "usage", "repair",
	"prompt_tokens", "candidate_tokens", "total_tokens", "cached_tokens",
	"groups", "rating", "month",
}

var packKeyIndex = func() map[string]int {
	m := make(map[string]int, len(packKeys))
	for i, k := range packKeys {
		m[k] = i
	}
	return m
}()

// maxPackDepth bounds the nesting a packed value may have: unpacking
// recurses, and damaged bytes must not exhaust the stack.
const maxPackDepth = 64

var errBadPack = errors.New("packed output that does not unpack")

// packOutput is out packed, or nil when it is not compact JSON (a
// string or number JSON's grammar refuses included: stored as before,
// every reader refuses it as before), does not come back byte for byte
// or would not be shorter. text is the item's text, referred to
// only when withText (the stages marks allows: their readers have it).
func packOutput(out []byte, text string, withText bool) []byte {
	if len(out) == 0 || out[0] != '{' {
		return nil
	}
	p := packer{buf: make([]byte, 1, len(out)), raw: out}
	p.buf[0] = tagPacked
	if withText {
		p.textEsc = quoteText(text, markEscaped)
		p.textPlain = quoteText(text, markPlain)
	}
	if next, ok := p.value(0, 0); !ok || next != len(out) || len(p.buf) >= len(out) {
		return nil
	}
	back, err := unpack(p.buf, text)
	if err != nil || !bytes.Equal(back, out) {
		return nil
	}
	return p.buf
}

// packer writes the packed form of the compact JSON raw into buf.
type packer struct {
	buf, raw           []byte
	textEsc, textPlain []byte // nil: no text to refer to
}

// value packs the JSON value at raw[i] and returns the index past it;
// false when raw is not compact JSON there.
func (p *packer) value(i, depth int) (int, bool) {
	if i >= len(p.raw) || depth > maxPackDepth {
		return i, false
	}
	raw := p.raw
	switch c := raw[i]; {
	case c == '{':
		p.buf = append(p.buf, kObject)
		i++
		if i < len(raw) && raw[i] == '}' {
			p.buf = append(p.buf, 0)
			return i + 1, true
		}
		for {
			end, ok := jsonscan.String(raw, i)
			if !ok || end >= len(raw) || raw[end] != ':' {
				return i, false
			}
			key := raw[i+1 : end-1]
			if k, ok := packKeyIndex[string(key)]; ok {
				p.buf = binary.AppendUvarint(p.buf, uint64(2*k+2))
			} else {
				p.buf = binary.AppendUvarint(p.buf, uint64(2*len(key)+1))
				p.buf = append(p.buf, key...)
			}
			if i, ok = p.value(end+1, depth+1); !ok || i >= len(raw) {
				return i, false
			}
			switch raw[i] {
			case ',':
				i++
			case '}':
				p.buf = append(p.buf, 0)
				return i + 1, true
			default:
				return i, false
			}
		}
	case c == '[':
		p.buf = append(p.buf, kArray)
		i++
		if i < len(raw) && raw[i] == ']' {
			p.buf = append(p.buf, kEnd)
			return i + 1, true
		}
		for {
			var ok bool
			if i, ok = p.value(i, depth+1); !ok || i >= len(raw) {
				return i, false
			}
			switch raw[i] {
			case ',':
				i++
			case ']':
				p.buf = append(p.buf, kEnd)
				return i + 1, true
			default:
				return i, false
			}
		}
	case c == '"':
		end, ok := jsonscan.String(raw, i)
		if !ok {
			return i, false
		}
		switch lit := raw[i:end]; {
		case p.textEsc != nil && bytes.Equal(lit, p.textEsc):
			p.buf = append(p.buf, kTextEsc)
		case p.textPlain != nil && bytes.Equal(lit, p.textPlain):
			p.buf = append(p.buf, kTextPlain)
		default:
			p.buf = append(p.buf, kString)
			p.buf = binary.AppendUvarint(p.buf, uint64(len(lit)-2))
			p.buf = append(p.buf, lit[1:len(lit)-1]...)
		}
		return end, true
	case c == 'n' || c == 't' || c == 'f':
		for _, w := range []struct {
			lit  string
			kind byte
		}{{"null", kNull}, {"true", kTrue}, {"false", kFalse}} {
			if bytes.HasPrefix(raw[i:], []byte(w.lit)) {
				p.buf = append(p.buf, w.kind)
				return i + len(w.lit), true
			}
		}
		return i, false
	case c == '-' || ('0' <= c && c <= '9'):
		end, ok := jsonscan.Value(raw, i, 0)
		if !ok {
			return i, false
		}
		if n, next, ok := plainInt(raw, i); ok && next == end && c != '-' {
			p.buf = append(p.buf, kUint)
			p.buf = binary.AppendUvarint(p.buf, uint64(n))
		} else {
			// Kept as written.
			p.buf = append(p.buf, kNumber)
			p.buf = binary.AppendUvarint(p.buf, uint64(end-i))
			p.buf = append(p.buf, raw[i:end]...)
		}
		return end, true
	}
	return i, false
}

// storedJSON is the JSON of an output stored whole or packed, as the
// readers without the item's record have it (the last stage's and
// classify's outputs, never stored with the text cut out); what does
// not unpack is left as it is, for its reader to refuse as JSON.
func storedJSON(data []byte) []byte {
	if !isPacked(data) {
		return data
	}
	if out, err := unpack(data, ""); err == nil {
		return out
	}
	return data
}

// appendQuoted appends text as a JSON string in tag's way, as
// quoteText writes it: directly when no byte of it needs escaping
// (nearly every text), else through quoteText.
func appendQuoted(dst []byte, text string, tag byte) []byte {
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case c < 0x20, c == '"', c == '\\', c >= utf8.RuneSelf,
			tag == markEscaped && (c == '<' || c == '>' || c == '&'):
			return append(dst, quoteText(text, tag)...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, text...)
	return append(dst, '"')
}

// isPacked reports whether data is a packed output.
func isPacked(data []byte) bool { return len(data) > 0 && data[0] == tagPacked }

// unpack is the JSON a packed output data stands for, for an item whose
// text is text.
func unpack(data []byte, text string) ([]byte, error) {
	// Room for the keys and punctuation packing took out (a classify
	// output unpacks to 2.5 times its size) and the text put back.
	u := unpacker{data: data, i: 1, text: text, out: make([]byte, 0, 3*len(data)+len(text)+8)}
	if !isPacked(data) || !u.value(0) || u.i != len(data) {
		return nil, errBadPack
	}
	return u.out, nil
}

// unpacker writes the JSON of data[i:] to out.
type unpacker struct {
	data []byte
	i    int
	text string
	out  []byte
}

// uvarint reads a uvarint no larger than the bytes left (a length or,
// through a length's bound, a count of bytes).
func (u *unpacker) uvarint() (uint64, bool) {
	n, w := binary.Uvarint(u.data[u.i:])
	if w <= 0 {
		return 0, false
	}
	u.i += w
	return n, true
}

// bytesOf reads n bytes.
func (u *unpacker) bytesOf(n uint64) ([]byte, bool) {
	if n > uint64(len(u.data)-u.i) {
		return nil, false
	}
	b := u.data[u.i : u.i+int(n)]
	u.i += int(n)
	return b, true
}

func (u *unpacker) value(depth int) bool {
	if u.i >= len(u.data) || depth > maxPackDepth {
		return false
	}
	kind := u.data[u.i]
	u.i++
	switch kind {
	case kNull:
		u.out = append(u.out, "null"...)
	case kFalse:
		u.out = append(u.out, "false"...)
	case kTrue:
		u.out = append(u.out, "true"...)
	case kUint:
		n, ok := u.uvarint()
		if !ok {
			return false
		}
		u.out = strconv.AppendUint(u.out, n, 10)
	case kNumber, kString:
		n, ok := u.uvarint()
		if !ok {
			return false
		}
		b, ok := u.bytesOf(n)
		if !ok {
			return false
		}
		if kind == kString {
			u.out = append(u.out, '"')
			u.out = append(u.out, b...)
			u.out = append(u.out, '"')
		} else {
			u.out = append(u.out, b...)
		}
	case kTextEsc, kTextPlain:
		tag := markEscaped
		if kind == kTextPlain {
			tag = markPlain
		}
		u.out = appendQuoted(u.out, u.text, tag)
	case kArray:
		u.out = append(u.out, '[')
		for first := true; ; first = false {
			if u.i >= len(u.data) {
				return false
			}
			if u.data[u.i] == kEnd {
				u.i++
				break
			}
			if !first {
				u.out = append(u.out, ',')
			}
			if !u.value(depth + 1) {
				return false
			}
		}
		u.out = append(u.out, ']')
	case kObject:
		u.out = append(u.out, '{')
		for first := true; ; first = false {
			k, ok := u.uvarint()
			if !ok {
				return false
			}
			if k == 0 {
				break
			}
			if !first {
				u.out = append(u.out, ',')
			}
			u.out = append(u.out, '"')
			if k%2 == 0 {
				idx := k/2 - 1
				if idx >= uint64(len(packKeys)) {
					return false
				}
				u.out = append(u.out, packKeys[idx]...)
			} else {
				b, ok := u.bytesOf(k / 2)
				if !ok {
					return false
				}
				u.out = append(u.out, b...)
			}
			u.out = append(u.out, '"', ':')
			if !u.value(depth + 1) {
				return false
			}
		}
		u.out = append(u.out, '}')
	default:
		return false
	}
	return true
}

// packedKeys adds the top-level keys of the packed output data to keys,
// as objectKeys would of its JSON, without writing the JSON: FieldNames
// reads every output of a pipeline. False when data does not unpack or
// holds no object. The bytes of its strings and numbers are not checked:
// packOutput packs only JSON, and a damaged one is refused by the
// reader of its value (the export), not here.
func packedKeys(data []byte, keys map[string]bool) bool {
	if !isPacked(data) || len(data) < 2 || data[1] != kObject {
		return false
	}
	// The whole value first, so that damage found late adds no key.
	u := unpacker{data: data, i: 1}
	if !u.skip(0) || u.i != len(data) {
		return false
	}
	u.i = 2
	for {
		k, _ := u.uvarint()
		if k == 0 {
			return true
		}
		if k%2 == 0 {
			if name := packKeys[k/2-1]; !keys[name] {
				keys[name] = true
			}
		} else {
			b, _ := u.bytesOf(k / 2)
			// As objectKeys reads it: escapes decoded.
			if bytes.IndexByte(b, '\\') < 0 && bytes.IndexByte(b, '"') < 0 && utf8.Valid(b) && !hasControl(b) {
				if !keys[string(b)] { // the lookup does not allocate
					keys[string(b)] = true
				}
			} else {
				str := slices.Concat([]byte{'"'}, b, []byte{'"'})
				if end, ok := jsonscan.String(str, 0); !ok || end != len(str) || !addKey(str, keys) {
					return false
				}
			}
		}
		u.skip(1)
	}
}

// hasControl reports whether b holds a byte JSON must escape in a string.
func hasControl(b []byte) bool {
	for _, c := range b {
		if c < 0x20 {
			return true
		}
	}
	return false
}

// skip is value without writing: the index past the value at data[i].
func (u *unpacker) skip(depth int) bool {
	if u.i >= len(u.data) || depth > maxPackDepth {
		return false
	}
	kind := u.data[u.i]
	u.i++
	switch kind {
	case kNull, kFalse, kTrue, kTextEsc, kTextPlain:
		return true
	case kUint:
		_, ok := u.uvarint()
		return ok
	case kNumber, kString:
		n, ok := u.uvarint()
		if ok {
			_, ok = u.bytesOf(n)
		}
		return ok
	case kArray:
		for {
			if u.i >= len(u.data) {
				return false
			}
			if u.data[u.i] == kEnd {
				u.i++
				return true
			}
			if !u.skip(depth + 1) {
				return false
			}
		}
	case kObject:
		for {
			k, ok := u.uvarint()
			if !ok {
				return false
			}
			if k == 0 {
				return true
			}
			if k%2 == 0 {
				if k/2-1 >= uint64(len(packKeys)) {
					return false
				}
			} else if _, ok := u.bytesOf(k / 2); !ok {
				return false
			}
			if !u.skip(depth + 1) {
				return false
			}
		}
	}
	return false
}
