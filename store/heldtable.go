// This file hands a stage's answer table from the reading of the field
// names to the walk that follows it.

package store

import (
	"sync"

	bolt "go.etcd.io/bbolt"
)

// An export of every item reads the field names first (FieldNames), then
// walks the items (ForEachItem), and both read the answers the outputs
// refer to: the names from each referred answer, the walk from a table
// of every answer (answertable.go). At a million items that was two
// passes over 13,600 leaf pages that lie apart in the file, each a page
// fault, and the walk's pass (a second of CPU) came before its first
// row. Now the names are read from the table, and the table is kept for
// the walk: the answers' pages are read once per export.
//
// A kept table is the answers of one committed state of the file: bbolt
// gives every read transaction the id of the last commit, so a walk
// whose transaction has the same id reads the same answers and may use
// it. A walk takes it whether or not it fits (a later commit makes it
// stale), so a table is held from the reading of the names to the walk
// that follows, or until the handle is closed.

// heldTables are the answer tables kept for the next walk, by stage.
type heldTables struct {
	mu sync.Mutex
	m  map[string]heldTable
}

// heldTable is a table and the id of the transaction it was read in.
type heldTable struct {
	txid int
	t    *answerTable
}

// keep holds t, read in tx from stage's answers, for the next walk.
func (h *heldTables) keep(tx *bolt.Tx, stage string, t *answerTable) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]heldTable{}
	}
	h.m[stage] = heldTable{txid: tx.ID(), t: t}
}

// take is the table held for stage when it was read from the state of
// the file tx reads, nil when there is none; either way none is held for
// stage after it.
func (h *heldTables) take(tx *bolt.Tx, stage string) *answerTable {
	h.mu.Lock()
	defer h.mu.Unlock()
	held, ok := h.m[stage]
	delete(h.m, stage)
	if !ok || held.txid != tx.ID() {
		return nil
	}
	return held.t
}

// drop forgets every held table.
func (h *heldTables) drop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.m = nil
}

// heldFor is the table held for stage's answers when walk w reads the
// file as it was when it was read and w's other tables leave room for
// it, nil otherwise.
func heldFor(stage string, w *walker) *answerTable {
	if w == nil {
		return nil
	}
	t := w.db.held.take(w.tx, stage)
	if t == nil || w.tables+t.bytes() > tableBytes {
		return nil
	}
	w.tables += t.bytes()
	return t
}
