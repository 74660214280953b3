package store

import (
	"encoding/binary"
	"encoding/hex"
)

// state is the state bucket's value: a fixed binary record so the hot
// path does no JSON work. Its first byte is its version: 1 keeps the
// hash as 32 hex characters (format 1), 2 as its 16 bytes.
type state struct {
	Stage  int // index into the definition
	Status Status
	Seq    uint64 // todo key while Queued
	Hash   string // content hash of the record, 32 hex chars
}

const (
	stateLenV1 = 1 + 1 + 1 + 8 + 32
	stateLen   = 1 + 1 + 1 + 8 + 16
)

func (s state) encode() []byte {
	raw, err := hex.DecodeString(s.Hash)
	if err != nil || len(raw) != 16 || hex.EncodeToString(raw) != s.Hash {
		// Not a hash this version writes: keep it as it is.
		b := make([]byte, stateLenV1)
		b[0] = 1
		s.put(b)
		copy(b[11:], s.Hash)
		return b
	}
	b := make([]byte, stateLen)
	b[0] = 2
	s.put(b)
	copy(b[11:], raw)
	return b
}

func (s state) put(b []byte) {
	b[1] = byte(s.Stage)
	b[2] = byte(s.Status)
	binary.BigEndian.PutUint64(b[3:11], s.Seq)
}

func decodeState(b []byte) (state, bool) {
	var hash string
	switch {
	case len(b) == stateLenV1 && b[0] == 1:
		hash = string(b[11:])
	case len(b) == stateLen && b[0] == 2:
		hash = hex.EncodeToString(b[11:])
	default:
		return state{}, false
	}
	return state{
		Stage:  int(b[1]),
		Status: Status(b[2]),
		Seq:    binary.BigEndian.Uint64(b[3:11]),
		Hash:   hash,
	}, true
}
