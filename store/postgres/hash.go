package postgres

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"maps"
	"slices"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// contentHash covers everything a stage or the aggregate can read of a
// record: its text and every field (not Line). It is the bbolt store's
// hash, byte for byte, so a pipeline copied between the stores keeps
// telling unchanged records from edited ones.
func contentHash(r pipeline.Record) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	put := func(s string) {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	put(r.Text)
	for _, k := range slices.Sorted(maps.Keys(r.Fields)) {
		put(k)
		put(r.Fields[k])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// changedFields names what differs between two versions of a record:
// pipeline.TextField for the text, and each field added, removed or
// changed.
func changedFields(old, cur pipeline.Record) []string {
	var out []string
	if old.Text != cur.Text {
		out = append(out, pipeline.TextField)
	}
	for k, v := range cur.Fields {
		if ov, ok := old.Fields[k]; !ok || ov != v {
			out = append(out, k)
		}
	}
	for k := range old.Fields {
		if _, ok := cur.Fields[k]; !ok {
			out = append(out, k)
		}
	}
	return out
}
