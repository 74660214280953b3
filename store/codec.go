package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sawtooth-dev/sawtooth/internal/jsonquote"
	bolt "go.etcd.io/bbolt"
)

// The record format (format 2). Every value of items, out/<stage> and
// answers/<stage> starts with a tag byte saying how the rest is written:
//
//	tagPacked  packed JSON (below): the JSON the caller gave, byte for byte
//	tagRaw     the JSON as given, for the rare value that does not come back
//	           byte for byte from packing (whitespace, unusual escapes)
//	tagAnswer  out/<stage> only: the output is the answer cached under the
//	           key that follows, or (format 4) under the one 32-byte key
//	           that begins with the 16 bytes that follow, or (format 6)
//	           the 8 bytes (answers are never deleted; see referredAnswer)
//	tagCached  answers/<stage> only: uvarint length, the usage as a record,
//	           then the output as a record
//	tagUsageIn answers/<stage> only (format 7): uvarint offset, uvarint
//	           length, then the output as a record; the usage is the packed
//	           record of those bytes of the output's record (usageIn)
//	tagFlate   a long record of another tag, deflated (flate.go)
//	tagLong    items only: uvarint key of the first chunk in longs, uvarint
//	           count of chunks, then the record's bytes past them; chunks
//	           and bytes together are a record of another tag (long.go)
//
// A value of format 1 (written before the format key) is plain JSON, so it
// starts with '{' or another JSON byte and never with a tag: readers take
// both, and the migration rewrites the old ones.
//
// Packed JSON keeps the JSON's order and number literals; object keys and
// short strings that repeat (labels, model names, field names, dates) are
// a uvarint into the dict bucket; a string equal to the item's id or text
// is one byte, one that begins the text (a text cut short) a length, an
// integer equal to the text's length in runes one byte. A record that
// says nothing but the item's text through those (what sanitizing a
// clean text gives) is the same bytes for every item: see shared.go.
const (
	tagPacked byte = 0x01
	tagRaw    byte = 0x02
	tagAnswer byte = 0x03
	tagCached byte = 0x04
	tagFlate  byte = 0x05 // a deflated record (format 4, flate.go)
	tagLong   byte = 0x06 // items only: a record kept in chunks (format 5, long.go)
	// tagUsageIn is an answer whose output holds its usage (format 7).
	tagUsageIn byte = 0x07
)

// Packed value kinds.
const (
	pNull byte = iota
	pFalse
	pTrue
	pUint   // uvarint: a non-negative integer written plainly
	pNumber // uvarint length, the literal
	pString // uvarint length, the bytes
	pDict   // uvarint dict id
	pID     // the item's id
	pText   // the item's text
	pArray  // uvarint count, values
	pObject // uvarint count, then key (a string value) and value pairs
	pPrefix // uvarint length: that many bytes of the item's text (a cut text)
	pRunes  // the item's text's length in runes, an integer (format 3)
	pEdit   // an edit of the item's text (format 4, edit.go)
)

// packCtx is what a record may refer to instead of repeating it: the
// item's id, and its text (read only when a long string may equal it).
type packCtx struct {
	id   string
	text func() string
}

// encodeRecord is the stored form of the JSON value raw.
func (db *DB) encodeRecord(tx *bolt.Tx, raw []byte, ctx packCtx) ([]byte, error) {
	out := []byte{tagPacked}
	out, err := db.pack(tx, out, raw, ctx)
	if err == nil {
		// Keep it only if it reads back byte for byte.
		back, derr := db.decodeRecord(tx, out, ctx)
		if derr == nil && bytes.Equal(back, raw) {
			return db.deflate(out), nil
		}
	}
	return db.deflate(append([]byte{tagRaw}, raw...)), nil
}

// deflate is v deflated when it is long and the file's format has
// deflated records.
func (db *DB) deflate(v []byte) []byte {
	if db.format < editFormat {
		return v
	}
	return deflateRecord(v)
}

// decodeRecord is the JSON of a stored record (format 1 or 2). The
// result never aliases v.
func (db *DB) decodeRecord(tx *bolt.Tx, v []byte, ctx packCtx) ([]byte, error) {
	out, err := db.appendRecord(tx, nil, v, ctx)
	if err == nil && out == nil {
		out = []byte{} // an empty raw record is an empty value, not none
	}
	return out, err
}

// appendRecord appends the JSON of a stored record to dst, as
// decodeRecord reads it: a walk decodes an item's records into one
// buffer instead of one allocation (and its growth) each.
func (db *DB) appendRecord(tx *bolt.Tx, dst, v []byte, ctx packCtx) ([]byte, error) {
	if len(v) == 0 {
		return nil, errors.New("empty record")
	}
	switch v[0] {
	case tagPacked:
		u := unpacker{db: db, tx: tx, in: v[1:], out: dst, ctx: ctx}
		if err := u.value(0); err != nil {
			return nil, err
		}
		if len(u.in) != 0 {
			return nil, errors.New("trailing bytes after the record")
		}
		return u.out, nil
	case tagRaw:
		return append(dst, v[1:]...), nil
	case tagFlate:
		inner, err := inflateRecord(v)
		if err != nil {
			return nil, err
		}
		return db.appendRecord(tx, dst, inner, ctx)
	case tagLong:
		inner, err := longRecord(tx, v)
		if err != nil {
			return nil, err
		}
		return db.appendRecord(tx, dst, inner, ctx)
	case tagAnswer, tagCached, tagUsageIn:
		return nil, fmt.Errorf("record tag %d where a value is expected", v[0])
	}
	return append(dst, v...), nil // format 1: plain JSON
}

// pack appends the packed form of the JSON value raw to out. It reads
// JSON as encoding/json writes it (compact); anything else is an error,
// and the caller keeps such a value as it is.
func (db *DB) pack(tx *bolt.Tx, out, raw []byte, ctx packCtx) ([]byte, error) {
	p := packer{db: db, tx: tx, in: raw, out: out, ctx: ctx}
	if err := p.value(0); err != nil {
		return nil, err
	}
	if len(p.in) != 0 {
		return nil, errors.New("more than one JSON value")
	}
	return p.out, nil
}

// maxDepth bounds nesting so a hostile value cannot exhaust the stack.
const maxDepth = 200

var errNotCompact = errors.New("not compact JSON")

type packer struct {
	db  *DB
	tx  *bolt.Tx
	in  []byte
	out []byte
	ctx packCtx
}

func (p *packer) value(depth int) error {
	if depth > maxDepth || len(p.in) == 0 {
		return errNotCompact
	}
	switch c := p.in[0]; {
	case c == '"':
		s, err := p.string()
		if err != nil {
			return err
		}
		return p.str(s)
	case c == '{' || c == '[':
		return p.container(depth)
	case c == 'n':
		return p.word("null", pNull)
	case c == 't':
		return p.word("true", pTrue)
	case c == 'f':
		return p.word("false", pFalse)
	case c == '-' || c >= '0' && c <= '9':
		i := 0
		for i < len(p.in) && strings.IndexByte("0123456789+-.eE", p.in[i]) >= 0 {
			i++
		}
		lit := string(p.in[:i])
		p.in = p.in[i:]
		if n, err := strconv.ParseUint(lit, 10, 64); err == nil && strconv.FormatUint(n, 10) == lit {
			if p.ctx.text != nil && n == uint64(utf8.RuneCountInString(p.ctx.text())) {
				p.out = append(p.out, pRunes)
				return nil
			}
			p.out = binary.AppendUvarint(append(p.out, pUint), n)
		} else {
			p.out = appendBytes(append(p.out, pNumber), lit)
		}
		return nil
	}
	return errNotCompact
}

func (p *packer) word(w string, kind byte) error {
	if !bytes.HasPrefix(p.in, []byte(w)) {
		return errNotCompact
	}
	p.in = p.in[len(w):]
	p.out = append(p.out, kind)
	return nil
}

// string reads a JSON string.
func (p *packer) string() (string, error) {
	escaped := false
	for i := 1; i < len(p.in); i++ {
		switch p.in[i] {
		case '\\':
			escaped = true
			i++
		case '"':
			lit := p.in[:i+1]
			p.in = p.in[i+1:]
			if !escaped {
				return string(lit[1:i]), nil
			}
			var s string
			err := json.Unmarshal(lit, &s)
			return s, err
		}
	}
	return "", errNotCompact
}

func (p *packer) container(depth int) error {
	open := p.in[0]
	kind, end := pArray, byte(']')
	if open == '{' {
		kind, end = pObject, '}'
	}
	p.in = p.in[1:]
	// The count comes first: pack the members aside.
	inner := packer{db: p.db, tx: p.tx, in: p.in, ctx: p.ctx}
	n := uint64(0)
	for len(inner.in) > 0 && inner.in[0] != end {
		if n > 0 {
			if inner.in[0] != ',' {
				return errNotCompact
			}
			inner.in = inner.in[1:]
		}
		if kind == pObject {
			if len(inner.in) == 0 || inner.in[0] != '"' {
				return errNotCompact
			}
			k, err := inner.string()
			if err != nil {
				return err
			}
			if err := inner.str(k); err != nil {
				return err
			}
			if len(inner.in) == 0 || inner.in[0] != ':' {
				return errNotCompact
			}
			inner.in = inner.in[1:]
		}
		if err := inner.value(depth + 1); err != nil {
			return err
		}
		n++
	}
	if len(inner.in) == 0 {
		return errNotCompact
	}
	p.in = inner.in[1:]
	p.out = binary.AppendUvarint(append(p.out, kind), n)
	p.out = append(p.out, inner.out...)
	return nil
}

func (p *packer) str(s string) error {
	switch {
	case s == "":
	case s == p.ctx.id:
		p.out = append(p.out, pID)
		return nil
	case len(s) >= minTextRef && p.ctx.text != nil && strings.HasPrefix(p.ctx.text(), s):
		if len(s) == len(p.ctx.text()) {
			p.out = append(p.out, pText)
		} else {
			p.out = binary.AppendUvarint(append(p.out, pPrefix), uint64(len(s)))
		}
		return nil
	case len(s) >= minEdit && p.ctx.text != nil && p.db.format >= editFormat:
		if out, ok := appendEdit(p.out, s, p.ctx.text()); ok {
			p.out = out
			return nil
		}
	}
	id, ok, err := p.db.dict.intern(p.tx, s)
	if err != nil {
		return err
	}
	if ok {
		p.out = binary.AppendUvarint(append(p.out, pDict), id)
		return nil
	}
	p.out = appendBytes(append(p.out, pString), s)
	return nil
}

func appendBytes(out []byte, s string) []byte {
	return append(binary.AppendUvarint(out, uint64(len(s))), s...)
}

type unpacker struct {
	db  *DB
	tx  *bolt.Tx
	in  []byte
	out []byte
	ctx packCtx
	// runes is the text's length in runes plus one once counted (zero:
	// not yet): a sanitize output that changed nothing refers to it
	// twice, and counting is a pass over the text.
	runes int
}

var errShort = errors.New("record is cut short")

func (u *unpacker) uvarint() (uint64, error) {
	n, rest, err := uvarintAt(u.in)
	u.in = rest
	return n, err
}

// uvarintAt reads the varint at the front of in, and returns what
// follows it (in itself on an error). Most lengths and dict ids are one
// byte, read without binary.Uvarint's call: an export reads several per
// field of every item.
func uvarintAt(in []byte) (n uint64, rest []byte, err error) {
	if len(in) > 0 && in[0] < 0x80 {
		return uint64(in[0]), in[1:], nil
	}
	n, k := binary.Uvarint(in)
	if k <= 0 {
		return 0, in, errShort
	}
	return n, in[k:], nil
}

func (u *unpacker) bytes() ([]byte, error) {
	n, err := u.uvarint()
	if err != nil || uint64(len(u.in)) < n {
		return nil, errShort
	}
	b := u.in[:n]
	u.in = u.in[n:]
	return b, nil
}

func (u *unpacker) value(depth int) error {
	if len(u.in) == 0 {
		return errShort
	}
	if depth > maxDepth {
		return errors.New("nested too deep")
	}
	kind := u.in[0]
	u.in = u.in[1:]
	switch kind {
	case pNull:
		u.out = append(u.out, "null"...)
	case pFalse:
		u.out = append(u.out, "false"...)
	case pTrue:
		u.out = append(u.out, "true"...)
	case pUint:
		n, err := u.uvarint()
		if err != nil {
			return err
		}
		u.out = strconv.AppendUint(u.out, n, 10)
	case pRunes:
		if u.ctx.text == nil {
			return errors.New("refers to the item's text, which it has none of")
		}
		if u.runes == 0 {
			u.runes = utf8.RuneCountInString(u.ctx.text()) + 1
		}
		u.out = strconv.AppendInt(u.out, int64(u.runes-1), 10)
	case pNumber:
		b, err := u.bytes()
		if err != nil {
			return err
		}
		u.out = append(u.out, b...)
	case pString, pDict, pID, pText, pPrefix, pEdit:
		return u.strOf(kind)
	case pArray, pObject:
		return u.container(kind, depth)
	default:
		return fmt.Errorf("unknown value kind %d", kind)
	}
	return nil
}

func (u *unpacker) container(kind byte, depth int) error {
	n, err := u.uvarint()
	if err != nil {
		return err
	}
	open, sep, end := byte('['), byte(','), byte(']')
	if kind == pObject {
		open, end = '{', '}'
	}
	u.out = append(u.out, open)
	for i := uint64(0); i < n; i++ {
		if i > 0 {
			u.out = append(u.out, sep)
		}
		if kind == pObject {
			if err := u.str(); err != nil {
				return err
			}
			u.out = append(u.out, ':')
		}
		if err := u.value(depth + 1); err != nil {
			return err
		}
	}
	u.out = append(u.out, end)
	return nil
}

// str reads a string value (any of its kinds) and writes it quoted as
// encoding/json would.
func (u *unpacker) str() error {
	if len(u.in) == 0 {
		return errShort
	}
	kind := u.in[0]
	u.in = u.in[1:]
	return u.strOf(kind)
}

func (u *unpacker) strOf(kind byte) error {
	var s string
	switch kind {
	case pString:
		b, err := u.bytes()
		if err != nil {
			return err
		}
		s = string(b)
	case pDict:
		id, err := u.uvarint()
		if err != nil {
			return err
		}
		e, err := u.db.dict.lookup(u.tx, id)
		if err != nil {
			return err
		}
		u.out = append(u.out, e.quoted...)
		return nil
	case pID:
		s = u.ctx.id
	case pText:
		if u.ctx.text == nil {
			return errors.New("refers to the item's text, which it has none of")
		}
		s = u.ctx.text()
	case pPrefix:
		n, err := u.uvarint()
		if err != nil {
			return err
		}
		if u.ctx.text == nil || uint64(len(u.ctx.text())) < n {
			return errors.New("refers to more of the item's text than it has")
		}
		s = u.ctx.text()[:n]
	case pEdit:
		if u.ctx.text == nil {
			return errors.New("an edit of the item's text, which it has none of")
		}
		b, rest, err := appendEdited(nil, u.in, u.ctx.text())
		if err != nil {
			return err
		}
		u.in, s = rest, string(b)
	default:
		return fmt.Errorf("value kind %d where a string is expected", kind)
	}
	u.out = jsonquote.Append(u.out, s)
	return nil
}

// textOnly reports whether the packed record v (tagPacked) is made only
// of the item's text, its length, constants and dict strings, and
// refers to the text: it then reads as the right output for any item
// whose output packs to the same bytes.
func textOnly(v []byte) bool {
	if len(v) < 2 || v[0] != tagPacked {
		return false
	}
	in, text := v[1:], false
	var walk func(depth int) bool
	walk = func(depth int) bool {
		if len(in) == 0 || depth > maxDepth {
			return false
		}
		kind := in[0]
		in = in[1:]
		switch kind {
		case pNull, pFalse, pTrue, pRunes:
			return true
		case pText:
			text = true
			return true
		case pDict:
			_, k := binary.Uvarint(in)
			in = in[max(k, 0):]
			return k > 0
		case pArray, pObject:
			n, k := binary.Uvarint(in)
			if k <= 0 {
				return false
			}
			in = in[k:]
			for i := uint64(0); i < n; i++ {
				if kind == pObject && !walk(depth+1) {
					return false
				}
				if !walk(depth + 1) {
					return false
				}
			}
			return true
		}
		return false // a string, number, id or cut text of this item's own
	}
	return walk(0) && len(in) == 0 && text
}
