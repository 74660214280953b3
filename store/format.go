package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// FormatVersion is the record format this package writes (codec.go):
// packed records, 16-byte hashes in state, 32-byte answer keys, each
// answer stored once, text-only outputs shared (shared.go). A file without the format key is format 1 (plain
// JSON records, hex keys): read-only opens read it as it is, and a
// writable open or Compact upgrades it (upgradeInto).
const FormatVersion = 7

// usageInFormat is the first format whose answers may keep their usage
// as a part of their output's record (tagUsageIn). A format 6 file is a
// valid format 7 file: its answers keep their usage beside the output.
const usageInFormat = 7

// shortRefFormat is the first format whose outputs may refer to their
// cached answer by the first shortRefLen bytes of its key (answerRef). A
// format 5 file is a valid format 6 (and 7) file: its references are longer,
// and answerRef shortens a reference only when no other key begins
// with the same shortRefLen bytes, which a format 5 file did not ensure.
const shortRefFormat = 6

// editFormat is the first format whose records may hold a string as an
// edit of the item's text (edit.go) and be deflated (flate.go). A format 2 or 3 file is a valid
// format 4 file, and a format 4 file a valid format 5 file (longFormat),
// so each is raised as sharedFormat's are.
const editFormat = 4

// sharedFormat is the first format whose files keep text-only outputs
// as shared records (shared.go, the pRunes kind, version 3 states). A
// format 2 file is a valid format 3 file: a writable open only raises its
// format key, so that an older sawtooth refuses it instead of misreading
// the new records.
const sharedFormat = 3

var keyFormat = []byte("format")

// fileFormat is the file's record format.
func fileFormat(meta *bolt.Bucket) (int, error) {
	v := meta.Get(keyFormat)
	if v == nil {
		return 1, nil
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("bad record format %q", v)
	}
	return n, nil
}

// upgradeInto copies the format 1 file src into the empty bbolt file dst
// in format 2, in transactions of about compactTxMax bytes, so memory
// stays bounded whatever the file's size. src is only read. Buckets are
// copied in name order, which puts answers/ before items and both before
// out/: an output equal to a cached answer becomes a reference to it,
// and one that holds the item's text refers to the copied record.
func upgradeInto(dst, src *bolt.DB, stages []StageDef) error {
	to := &DB{bolt: dst, stages: stages, dict: newDict(), format: FormatVersion}
	c := copier{dst: to}
	if err := c.begin(); err != nil {
		return err
	}
	defer func() { _ = c.tx.Rollback() }()
	refs := map[string]map[[32]byte][]byte{} // stage -> output hash -> answer key
	err := src.View(func(stx *bolt.Tx) error {
		return stx.ForEach(func(name []byte, b *bolt.Bucket) error {
			n := string(name)
			if _, err := c.tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
			if err := c.tx.Bucket(name).SetSequence(b.Sequence()); err != nil {
				return err
			}
			conv, err := c.converter(n, refs)
			if err != nil {
				return err
			}
			return b.ForEach(func(k, v []byte) error {
				if v == nil {
					return fmt.Errorf("bucket %s: nested bucket %q: not a sawtooth database", n, k)
				}
				nk, nv := k, v
				if conv != nil {
					if nk, nv, err = conv(k, v); err != nil {
						return fmt.Errorf("upgrade %s %q: %w", n, k, err)
					}
				}
				return c.put(name, nk, nv)
			})
		})
	})
	if err != nil {
		return err
	}
	if err := c.tx.Bucket(bucketMeta).Put(keyFormat, []byte(strconv.Itoa(FormatVersion))); err != nil {
		return err
	}
	return c.tx.Commit()
}

// copier writes into dst in transactions of about compactTxMax bytes.
type copier struct {
	dst  *DB
	tx   *bolt.Tx
	size int
}

func (c *copier) begin() error {
	var err error
	c.tx, err = c.dst.bolt.Begin(true)
	c.size = 0
	return err
}

func (c *copier) put(bucket, k, v []byte) error {
	if c.size > compactTxMax {
		if err := c.tx.Commit(); err != nil {
			return err
		}
		if err := c.begin(); err != nil {
			return err
		}
	}
	c.size += len(k) + len(v)
	b := c.tx.Bucket(bucket)
	b.FillPercent = 1 // written in key order, or nearly
	return b.Put(bytes.Clone(k), bytes.Clone(v))
}

// converter is how the records of bucket name change from format 1 to
// 2; nil copies them as they are.
func (c *copier) converter(name string, refs map[string]map[[32]byte][]byte) (func(k, v []byte) ([]byte, []byte, error), error) {
	db := c.dst
	stage, isAnswers := strings.CutPrefix(name, "answers/")
	outStage, isOut := strings.CutPrefix(name, "out/")
	switch {
	case name == string(bucketItems):
		return func(k, v []byte) ([]byte, []byte, error) {
			var r pipeline.Record
			if err := json.Unmarshal(v, &r); err != nil {
				return nil, nil, err
			}
			nv, err := db.encodeItem(c.tx, r)
			return k, nv, err
		}, nil
	case name == string(bucketState):
		return func(k, v []byte) ([]byte, []byte, error) {
			s, ok := decodeState(v)
			if !ok {
				return nil, nil, fmt.Errorf("corrupt state record")
			}
			return k, s.encode(), nil
		}, nil
	case isAnswers:
		m := map[[32]byte][]byte{}
		refs[stage] = m
		return func(k, v []byte) ([]byte, []byte, error) {
			res, err := db.decodeAnswer(nil, v)
			if err != nil {
				return nil, nil, err
			}
			nv, err := db.encodeAnswer(c.tx, res)
			key := answerKey(string(k)) // format 1 keys are the stage's strings
			if h := sha256.Sum256(res.Output); m[h] == nil {
				m[h] = key
			}
			return key, nv, err
		}, nil
	case isOut:
		m := refs[outStage]
		return func(k, v []byte) ([]byte, []byte, error) {
			if key, ok := m[sha256.Sum256(v)]; ok {
				return k, append([]byte{tagAnswer}, key...), nil
			}
			tx := c.tx
			nv, err := db.encodeRecord(tx, v, packCtx{id: string(k), text: db.textOf(tx, k)})
			return k, nv, err
		}, nil
	}
	return nil, nil
}

// isLegacyJSON reports whether v is a format 1 record: plain JSON, whose
// first byte is never one of the tags.
func isLegacyJSON(v []byte) bool { return len(v) > 0 && v[0] > tagUsageIn }
