// This file reads ahead the cached answers a walk's outputs refer to.

package store

import (
	"bytes"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// A real run's outputs at an LLM stage are nearly all references to the
// stage's cached answers (encodeOutput), and the answers are keyed by a
// hash of the question: read along with the items in id order, each
// answer is a page anywhere in the file. With the walk releasing the
// mapping's pages as it goes (walk.go), every item faulted one back in:
// at a million items that was most of an export's 35 s.
//
// answersAhead turns those lookups into sorted passes. It scans the
// stage's outputs ahead of the walk, a chunk at a time, sorts the
// chunk's references, reads the answers they refer to in the answers'
// key order (a forward pass over the bucket: neighbouring pages, each
// mapped once) and copies them out, so the walk finds each item's answer
// in memory. A chunk holds at most aheadBytes of answers: the chunk
// after one that filled it is made smaller, and the references past the
// limit are looked up one by one as before, so memory stays bounded
// whatever an answer's size (the chunks grow back once answers fit).

// aheadMax and aheadMin bound the references a chunk reads ahead
// (aheadMax at a million items is 16 passes over the answers), and
// aheadBytes the answers it holds; tests make them small.
var (
	aheadMax   = 1 << 16
	aheadMin   = 1 << 10
	aheadBytes = 16 << 20
)

// aheadAfter is how many references a walk looks up one by one before
// it reads ahead: a walk that stops early (a job check samples one
// item) or a small file does not pay for reading every answer. Tests
// make it 0.
var aheadAfter = 1 << 10

// aheadReleaseEvery is how many answers a chunk's pass reads between two
// releases of the mapping's pages (walk.go). The pass's answers are a
// leaf page apart, and each touch maps the cached pages around it (the
// kernel's fault-around, larger still on kernels that cache files in
// large folios): at a walk's releaseEvery, 4,096 of them kept 120 MB of
// the file resident in a million items' export.
const aheadReleaseEvery = 512

// answersAhead reads ahead the answers one stage's outputs refer to, for
// a walk that asks for them in ascending id order (answer).
type answersAhead struct {
	answers *bolt.Bucket
	stage   string
	scan    *bolt.Cursor // out/<stage>, ahead of the walk
	w       *walker      // releases the pages the passes touch
	asked   int          // references asked before reading ahead (aheadAfter)
	table   *answerTable // every answer, when they fit (answertable.go)
	tried   bool         // the table has been read, or found too large
	started bool         // scan has read its first entry
	done    bool         // scan has passed the bucket's last entry
	last    []byte       // the last id scanned: the chunk covers ids up to it
	size    int          // references in the next chunk

	ids   []byte       // the chunk's ids, one after another
	refs  []byte       // their references, one after another
	ents  []aheadEntry // the chunk's references, in id order
	order []int32      // ents' indexes in reference order
	buf   []byte       // the answers read ahead
	pos   int          // the first entry the walk has not passed
}

// aheadEntry is one output of a chunk that refers to an answer: its id
// is ids[idStart:idEnd], its reference refs[refStart:refEnd], and the
// answer buf[start:end]; start is noAnswer when the bucket has none and
// notAhead when the chunk's bytes ran out before it. The offsets fit in
// 32 bits: each buffer stops growing past aheadBytes, and grows by one
// key or one answer of at most aheadBytes beyond it.
type aheadEntry struct {
	idStart, idEnd, refStart, refEnd int32
	start, end                       int32
}

const (
	noAnswer = -1
	notAhead = -2
)

// readAhead is an answersAhead for stage's outputs, nil when the stage
// has no cached answers.
func readAhead(tx *bolt.Tx, stage string, w *walker) *answersAhead {
	answers, outs := tx.Bucket(answersBucket(stage)), tx.Bucket(outBucket(stage))
	if answers == nil || outs == nil {
		return nil
	}
	return &answersAhead{answers: answers, stage: stage, scan: outs.Cursor(), w: w, size: aheadMax}
}

// answer is the stored answer that the output v of item id refers to,
// found reports whether it was read ahead: when it was not (v is not a
// reference, or the chunk ran out of room), the caller looks it up. a is
// nil when the answer is missing. Ids must be asked in ascending order,
// and v must be what out/<stage> holds for id in the same transaction.
func (p *answersAhead) answer(id, v []byte) (a []byte, found bool) {
	if p == nil || len(v) == 0 || v[0] != tagAnswer {
		return nil, false
	}
	if !p.tried && p.asked == 0 {
		// A table held for this walk is used from its first reference:
		// the lookups one by one each map the pages around an answer
		// (at a million items the first 1,024 kept 60 MB more of the
		// file resident).
		p.table = heldFor(p.stage, p.w)
		p.tried = p.table != nil
	}
	if !p.tried && p.asked < aheadAfter {
		p.asked++
		return nil, false
	}
	if !p.tried {
		p.tried = true
		p.table = readTable(p.answers, p.w)
	}
	if p.table != nil {
		return p.table.answer(v[1:]), true
	}
	for {
		for p.pos < len(p.ents) && bytes.Compare(p.id(p.pos), id) < 0 {
			p.pos++
		}
		if p.pos < len(p.ents) || p.done || (p.started && bytes.Compare(id, p.last) <= 0) {
			break
		}
		p.fill()
	}
	if p.pos == len(p.ents) || !bytes.Equal(p.id(p.pos), id) {
		return nil, false
	}
	switch e := p.ents[p.pos]; e.start {
	case notAhead:
		return nil, false
	case noAnswer:
		return nil, true
	case e.end:
		return []byte{}, true // an empty answer is there, not missing (nil)
	default:
		return p.buf[e.start:e.end:e.end], true
	}
}

func (p *answersAhead) id(i int) []byte  { return p.ids[p.ents[i].idStart:p.ents[i].idEnd] }
func (p *answersAhead) ref(i int) []byte { return p.refs[p.ents[i].refStart:p.ents[i].refEnd] }

// fill scans the next chunk of outputs and reads the answers they refer
// to in the answers' key order.
func (p *answersAhead) fill() {
	p.ids, p.refs, p.ents, p.buf, p.pos = p.ids[:0], p.refs[:0], p.ents[:0], p.buf[:0], 0
	var k, v []byte
	if p.started {
		k, v = p.scan.Next()
	} else {
		k, v = p.scan.First()
		p.started = true
	}
	for ; k != nil; k, v = p.scan.Next() {
		p.last = append(p.last[:0], k...)
		if len(v) > 1 && v[0] == tagAnswer {
			e := aheadEntry{idStart: int32(len(p.ids)), refStart: int32(len(p.refs))}
			p.ids, p.refs = append(p.ids, k...), append(p.refs, v[1:]...)
			e.idEnd, e.refEnd = int32(len(p.ids)), int32(len(p.refs))
			p.ents = append(p.ents, e)
		}
		if len(p.ents) == p.size || len(p.ids)+len(p.refs) >= aheadBytes {
			break // the ids and references count against the bytes too
		}
	}
	if k == nil {
		p.done = true
	}
	p.order = p.order[:0]
	for i := range p.ents {
		p.order = append(p.order, int32(i))
	}
	slices.SortFunc(p.order, func(x, y int32) int { return bytes.Compare(p.ref(int(x)), p.ref(int(y))) })
	seek := answerSeeker{c: p.answers.Cursor()}
	prev, seeks, fitted := -1, 0, -1
	for n, i := range p.order {
		e := &p.ents[i]
		switch {
		case prev >= 0 && bytes.Equal(p.ref(prev), p.ref(int(i))):
			e.start, e.end = p.ents[prev].start, p.ents[prev].end
		case len(p.buf) >= aheadBytes:
			e.start = notAhead
			if fitted < 0 {
				fitted = n
			}
		default:
			if seeks++; p.w != nil && seeks%aheadReleaseEvery == 0 {
				p.w.releaseIfResident()
			}
			switch a := seek.answer(p.ref(int(i))); {
			case a == nil:
				e.start = noAnswer
			case len(a) > aheadBytes:
				e.start = notAhead // alone larger than a chunk's bytes
			default:
				e.start = int32(len(p.buf))
				p.buf = append(p.buf, a...)
				e.end = int32(len(p.buf))
			}
		}
		prev = int(i)
	}
	// The next chunk holds as many references as fitted this one, or
	// twice as many as this one held when they took at most half the
	// bytes (back up to aheadMax after a stretch of long answers, without
	// swinging between a size that fits and twice it).
	if fitted >= 0 {
		p.size = max(fitted, aheadMin)
	} else if len(p.ents) == p.size && len(p.buf) <= aheadBytes/2 {
		p.size = min(2*p.size, aheadMax)
	}
}

// answerSeeker finds the answers that references asked in ascending
// order refer to, as referredAnswer does. Sorted references are a few
// keys apart: stepping the cursor to the next one stays on the leaf page
// it is on, where a seek from the root touches a page at every level of
// the tree (at a million items a third of an export's time in the
// answers' passes).
type answerSeeker struct {
	c    *bolt.Cursor
	k, v []byte
	at   bool // c has been positioned
}

// seekSteps is how many keys the cursor steps before it seeks instead.
const seekSteps = 8

// answer is referredAnswer(b, ref) for the bucket b of s's cursor; refs
// must be asked in ascending order.
func (s *answerSeeker) answer(ref []byte) []byte {
	for n := 0; s.at && s.k != nil && n < seekSteps && bytes.Compare(s.k, ref) < 0; n++ {
		s.k, s.v = s.c.Next()
	}
	if !s.at || (s.k != nil && bytes.Compare(s.k, ref) < 0) {
		// s.k is still below ref (or the cursor was never placed): the
		// first key at or after ref is further on. At the bucket's end
		// (s.k == nil) no key is at or after ref.
		s.k, s.v = s.c.Seek(ref)
		s.at = true
	}
	// s.k is the first key at or after ref: every key before the one the
	// last call found is below the last ref, so below this one.
	if len(ref) != answerRefLen && len(ref) != shortRefLen {
		if !bytes.Equal(s.k, ref) {
			return nil
		}
		return s.v
	}
	if !bytes.HasPrefix(s.k, ref) {
		return nil
	}
	return s.v
}
