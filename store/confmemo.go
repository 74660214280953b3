package store

import (
	"bytes"
	"encoding/json"
	"sync"
)

// cubeStage is the stage whose output's confidence orders a cube cell's
// quotes, as report orders them.
const cubeStage = "classify"

// confMemo remembers, for items whose classify output a write of this
// handle stored as a reference to a cached answer, that reference and the
// output's confidence. Folding the item's fact into the cube, a commit or
// two later, needs the confidence: read from the file it is a lookup of
// the answer (a page of a large bucket, read with pread) and a decode,
// about a tenth of the commits of a night on a large file, which are what
// a night waits on. The reference is checked against the one stored when
// the fold reads it, so an output changed since by any path is read from
// the file as before. Only references are kept: a packed record may refer
// to the item's text and read differently once the text changes, while
// an answer changes under its key only when putAnswer replaces a damaged
// one (it keeps the first readable answer), which forgets every note.
// A fold that takes a note does not read the answer, so it does not see
// the answer damaged since (the commit used to fail on it; sawtooth
// verify still finds it, and the next reads of the item fail on it).
type confMemo struct {
	mu   sync.Mutex
	byID map[string]confNote
}

type confNote struct {
	ref  string // the stored output: tagAnswer and the answer's reference
	conf float64
}

// maxConfNotes bounds the memo: the items between a classify commit and
// the fold of their fact are a few commits' worth; past the bound (a run
// whose last stage is far behind, or items that never reach it) the
// memo starts again, and folds read the file.
const maxConfNotes = 1 << 14

// note remembers item id's classify output out, stored as v.
func (m *confMemo) note(id, v []byte, out json.RawMessage) {
	if len(v) == 0 || v[0] != tagAnswer {
		return
	}
	conf := confidenceOf(out)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byID == nil || len(m.byID) >= maxConfNotes {
		m.byID = make(map[string]confNote)
	}
	m.byID[string(id)] = confNote{ref: string(v), conf: conf}
}

// take is the confidence noted for item id, when its stored classify
// output v is the one noted; the note is dropped either way, as a fact
// is folded once.
func (m *confMemo) take(id, v []byte) (float64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, ok := m.byID[string(id)]
	if !ok {
		return 0, false
	}
	delete(m.byID, string(id))
	return n.conf, bytes.Equal([]byte(n.ref), v)
}

// forget drops every note: a write transaction that failed may have
// noted outputs it never stored.
func (m *confMemo) forget() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.byID = nil
}

// confidenceOf is a classify output's confidence as report reads it: 0
// when it has none or is not an object.
func confidenceOf(out json.RawMessage) float64 {
	var o struct {
		Confidence float64 `json:"confidence"`
	}
	_ = json.Unmarshal(out, &o)
	return o.Confidence
}
