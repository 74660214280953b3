package store

import (
	"encoding/binary"
	"errors"
	"strings"
)

// A string an item's stage made from its text by small changes (sanitize
// collapsing whitespace, dropping control characters, then cutting the
// text to its budget) is stored as an edit of the text (the pEdit kind,
// record format 4): a uvarint count of steps, each a literal (uvarint
// length, bytes) written out, then a uvarint count of text bytes skipped
// and a uvarint count of text bytes copied. A long review sanitized took
// as many bytes again in out/sanitize, and a record past a page took two
// pages of its own; as an edit it is a few dozen bytes.
//
// The encoder is greedy: it copies the longest run the text and the
// string share, then finds the fewest literal bytes and skipped text
// bytes after which they share editSync bytes again, within editWindow.
// It gives up (the string is stored as it is) when the edit would not be
// less than half the string.
const (
	minEdit    = 64  // shorter strings are not worth the search
	editSync   = 8   // bytes that must agree again after a change
	editWindow = 256 // how far a change may reach (text skipped, literal bytes)
)

// appendEdit appends s as an edit of text (pEdit and its steps) to out,
// and reports whether it did.
func appendEdit(out []byte, s, text string) ([]byte, bool) {
	var steps []byte
	n := uint64(0)
	for i, j := 0, 0; i < len(s); n++ {
		lit, skip := editResync(s[i:], text[j:])
		c := commonPrefix(s[i+lit:], text[j+skip:])
		steps = appendBytes(steps, s[i:i+lit])
		steps = binary.AppendUvarint(steps, uint64(skip))
		steps = binary.AppendUvarint(steps, uint64(c))
		if 2*len(steps) >= len(s) {
			return out, false
		}
		i += lit + c
		j += skip + c
	}
	// The kind and the count are part of the edit too.
	head := binary.AppendUvarint([]byte{pEdit}, n)
	if 2*(len(head)+len(steps)) >= len(s) {
		return out, false
	}
	return append(append(out, head...), steps...), true
}

// editResync returns the fewest literal bytes of s and text bytes
// skipped after which the two agree on editSync bytes (or on all that is
// left of s). When no such point lies within editWindow, the whole
// window of s is literal.
func editResync(s, text string) (lit, skip int) {
	for lit = 0; lit < len(s) && lit <= editWindow; lit++ {
		want := s[lit:min(len(s), lit+editSync)]
		if i := strings.Index(text[:min(len(text), editWindow+len(want))], want); i >= 0 {
			return lit, i
		}
	}
	return min(len(s), editWindow+1), 0
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

var errEditPastText = errors.New("an edit refers to more of the item's text than it has")

// appendEdited appends the string the edit at in makes of text to dst,
// and returns the rest of in.
func appendEdited(dst, in []byte, text string) ([]byte, []byte, error) {
	n, k := binary.Uvarint(in)
	if k <= 0 {
		return nil, nil, errShort
	}
	in = in[k:]
	j := uint64(0)
	for range n {
		l, k := binary.Uvarint(in)
		if k <= 0 || uint64(len(in)-k) < l {
			return nil, nil, errShort
		}
		dst = append(dst, in[k:k+int(l)]...)
		in = in[k+int(l):]
		var counts [2]uint64
		for c := range counts {
			if counts[c], k = binary.Uvarint(in); k <= 0 {
				return nil, nil, errShort
			}
			in = in[k:]
		}
		j += counts[0]
		if j > uint64(len(text)) || counts[1] > uint64(len(text))-j {
			return nil, nil, errEditPastText
		}
		dst = append(dst, text[j:j+counts[1]]...)
		j += counts[1]
	}
	return dst, in, nil
}

// skipEdit passes over an edit's steps and returns the rest of in.
func skipEdit(in []byte) ([]byte, error) {
	n, k := binary.Uvarint(in)
	if k <= 0 {
		return nil, errShort
	}
	in = in[k:]
	for range n {
		l, k := binary.Uvarint(in)
		if k <= 0 || uint64(len(in)-k) < l {
			return nil, errShort
		}
		in = in[k+int(l):]
		for range 2 {
			if _, k = binary.Uvarint(in); k <= 0 {
				return nil, errShort
			}
			in = in[k:]
		}
	}
	return in, nil
}
