package store

import (
	"encoding/binary"
)

// state is the state bucket's value: a fixed binary record so the hot
// path does no JSON work.
type state struct {
	Stage  int // index into the definition
	Status Status
	Seq    uint64 // todo key while Queued
	Hash   string // text hash of the record, 32 hex chars
}

const stateLen = 1 + 1 + 1 + 8 + 32

func (s state) encode() []byte {
	b := make([]byte, stateLen)
	b[0] = 1
	b[1] = byte(s.Stage)
	b[2] = byte(s.Status)
	binary.BigEndian.PutUint64(b[3:11], s.Seq)
	copy(b[11:], s.Hash)
	return b
}

func decodeState(b []byte) (state, bool) {
	if len(b) != stateLen || b[0] != 1 {
		return state{}, false
	}
	return state{
		Stage:  int(b[1]),
		Status: Status(b[2]),
		Seq:    binary.BigEndian.Uint64(b[3:11]),
		Hash:   string(b[11:]),
	}, true
}
