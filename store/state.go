package store

import (
	"encoding/binary"
	"encoding/hex"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// state is the state bucket's value: a fixed binary record so the hot
// path does no JSON work. Its first byte is its version: 1 keeps the
// hash as 32 hex characters (format 1), 2 as its 16 bytes, 3 is 2 with
// one more byte, Shared (format 3), written only when it is not zero.
type state struct {
	Stage  int // index into the definition
	Status pipeline.Status
	Seq    uint64 // todo key while Queued
	Hash   string // content hash of the record, 32 hex chars
	// Shared has bit i set when the item's output at stage i is that
	// stage's shared record (shared.go) instead of an entry of
	// out/<stage>. Only stages the item has passed have a bit set.
	Shared uint8
}

const (
	stateLenV1 = 1 + 1 + 1 + 8 + 32
	stateLen   = 1 + 1 + 1 + 8 + 16
	stateLenV3 = stateLen + 1
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
	if s.Shared != 0 {
		b := make([]byte, stateLenV3)
		b[0] = 3
		s.put(b)
		copy(b[11:], raw)
		b[stateLen] = s.Shared
		return b
	}
	b := make([]byte, stateLen)
	b[0] = 2
	s.put(b)
	copy(b[11:], raw)
	return b
}

// canShare reports whether s's encoding keeps Shared: a hash this
// version writes (the first encoding, kept for any other hash, is the
// longest and has no Shared byte).
func (s state) canShare() bool { return len(s.encode()) != stateLenV1 }

func (s state) put(b []byte) {
	b[1] = byte(s.Stage)
	b[2] = byte(s.Status)
	binary.BigEndian.PutUint64(b[3:11], s.Seq)
}

func decodeState(b []byte) (state, bool) {
	var hash string
	var shared uint8
	switch {
	case len(b) == stateLenV1 && b[0] == 1:
		hash = string(b[11:])
	case len(b) == stateLen && b[0] == 2:
		hash = hex.EncodeToString(b[11:])
	case len(b) == stateLenV3 && b[0] == 3:
		hash = hex.EncodeToString(b[11:stateLen])
		shared = b[stateLen]
	default:
		return state{}, false
	}
	return state{
		Stage:  int(b[1]),
		Status: pipeline.Status(b[2]),
		Seq:    binary.BigEndian.Uint64(b[3:11]),
		Hash:   hash,
		Shared: shared,
	}, true
}
