package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// FormatVersion is the record format this package writes (codec.go):
// packed records, 16-byte hashes in state, 32-byte answer keys, each
// answer stored once. A file without the format key is format 1 (plain
// JSON records, hex keys), which a writable Open migrates.
const FormatVersion = 2

var keyFormat = []byte("format")

// migrateHook, when set (tests only), runs inside the migration's
// transaction after the records are rewritten and before it commits.
var migrateHook func()

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

// migrate rewrites a format 1 file to FormatVersion in one transaction:
// a crash or a kill before it commits leaves the file as it was, and the
// next writable open starts again. Its memory holds the rewritten pages
// until the commit, about the size of the new records.
func (db *DB) migrate() error {
	return db.update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if f, err := fileFormat(meta); err != nil || f >= FormatVersion {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketDict); err != nil {
			return err
		}
		if err := db.migrateItems(tx); err != nil {
			return fmt.Errorf("migrate items: %w", err)
		}
		if err := db.migrateStates(tx); err != nil {
			return fmt.Errorf("migrate state: %w", err)
		}
		refs := map[[32]byte][]byte{} // an answer's output -> its key
		for _, s := range db.stages {
			if err := db.migrateAnswers(tx, s.Name, refs); err != nil {
				return fmt.Errorf("migrate answers/%s: %w", s.Name, err)
			}
			if err := db.migrateOutputs(tx, s.Name, refs); err != nil {
				return fmt.Errorf("migrate out/%s: %w", s.Name, err)
			}
			clear(refs)
		}
		if migrateHook != nil {
			migrateHook()
		}
		return meta.Put(keyFormat, []byte(strconv.Itoa(FormatVersion)))
	})
}

// rewrite calls fn for every key of b and stores what it returns, nil
// meaning unchanged. The cursor is repositioned after each write, as
// bbolt asks.
func rewrite(b *bolt.Bucket, fn func(k, v []byte) ([]byte, error)) error {
	b.FillPercent = fillPercent
	c := b.Cursor()
	for k, v := c.First(); k != nil; {
		nv, err := fn(k, v)
		if err != nil {
			return fmt.Errorf("%q: %w", k, err)
		}
		if nv == nil {
			k, v = c.Next()
			continue
		}
		key := bytes.Clone(k)
		if err := b.Put(key, nv); err != nil {
			return err
		}
		c.Seek(key)
		k, v = c.Next()
	}
	return nil
}

func isLegacyJSON(v []byte) bool { return len(v) > 0 && v[0] > tagCached }

func (db *DB) migrateItems(tx *bolt.Tx) error {
	return rewrite(tx.Bucket(bucketItems), func(k, v []byte) ([]byte, error) {
		if !isLegacyJSON(v) {
			return nil, nil
		}
		var r pipeline.Record
		if err := json.Unmarshal(v, &r); err != nil {
			return nil, err
		}
		return db.encodeItem(tx, r)
	})
}

func (db *DB) migrateStates(tx *bolt.Tx) error {
	return rewrite(tx.Bucket(bucketState), func(k, v []byte) ([]byte, error) {
		s, ok := decodeState(v)
		if !ok {
			return nil, fmt.Errorf("corrupt state record")
		}
		if nv := s.encode(); !bytes.Equal(nv, v) {
			return nv, nil
		}
		return nil, nil
	})
}

// migrateAnswers moves answers/<stage> to 32-byte keys and packed values
// through a scratch bucket (the new keys sort among the old ones), and
// fills refs with each answer's output hash.
func (db *DB) migrateAnswers(tx *bolt.Tx, stage string, refs map[[32]byte][]byte) error {
	name := answersBucket(stage)
	old := tx.Bucket(name)
	if old == nil {
		return nil
	}
	scratch := []byte("migrating/" + string(name))
	_ = tx.DeleteBucket(scratch)
	tmp, err := tx.CreateBucket(scratch)
	if err != nil {
		return err
	}
	err = old.ForEach(func(k, v []byte) error {
		res, err := db.decodeAnswer(tx, v)
		if err != nil {
			return fmt.Errorf("%q: %w", k, err)
		}
		nv, err := db.encodeAnswer(tx, res)
		if err != nil {
			return err
		}
		key := answerKey(string(k)) // format 1 keys are the stage's strings
		h := sha256.Sum256(res.Output)
		if _, dup := refs[h]; !dup {
			refs[h] = key
		}
		return tmp.Put(key, nv)
	})
	if err != nil {
		return err
	}
	if err := tx.DeleteBucket(name); err != nil {
		return err
	}
	nb, err := tx.CreateBucket(name)
	if err != nil {
		return err
	}
	nb.FillPercent = 1 // written in key order
	if err := tmp.ForEach(func(k, v []byte) error { return nb.Put(bytes.Clone(k), bytes.Clone(v)) }); err != nil {
		return err
	}
	return tx.DeleteBucket(scratch)
}

// migrateOutputs packs out/<stage>, an output equal to a cached answer
// becoming a reference to it.
func (db *DB) migrateOutputs(tx *bolt.Tx, stage string, refs map[[32]byte][]byte) error {
	b := tx.Bucket(outBucket(stage))
	if b == nil {
		return nil
	}
	return rewrite(b, func(k, v []byte) ([]byte, error) {
		if !isLegacyJSON(v) {
			return nil, nil
		}
		if key, ok := refs[sha256.Sum256(v)]; ok {
			return append([]byte{tagAnswer}, key...), nil
		}
		return db.encodeRecord(tx, v, packCtx{id: string(k), text: db.textOf(tx, k)})
	})
}
