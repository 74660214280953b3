package store

import (
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// The answer cache and the money ledger. Both are written only by Commit,
// in the transaction of the transitions they come from, and created on
// first use, so files written before them read as empty.
//
//	answers/<stage>  cache key -> cachedAnswer (JSON): the output and what it was billed
//	ledger           stage -> spent, saved (nanodollars), paid, cached (4 big-endian int64)
var (
	_ pipeline.AnswerCache  = (*DB)(nil)
	_ pipeline.Ledgers      = (*DB)(nil)
	_ pipeline.QueueCounter = (*DB)(nil)
)

var bucketLedger = []byte("ledger")

// answersBucket is a stage's cached answers. Inside a write transaction
// opened by update, lookups read keys that transaction did not put with
// pread, from the file as last committed (pread.go): putAnswer is the
// only write to these buckets, and it records the keys it puts. A write
// of any other kind (a delete, a rewrite in place) would need recording
// too, or that transaction's lookups would read the committed bytes.
func answersBucket(stage string) []byte { return []byte("answers/" + stage) }

// cachedAnswer is one stored answer in format 1 (see decodeAnswer).
type cachedAnswer struct {
	Output json.RawMessage `json:"output"`
	Usage  pipeline.Usage  `json:"usage"`
}

// CachedAnswer returns the answer committed under (stage, key) by a
// transition that carried the key, with the usage it was billed.
func (db *DB) CachedAnswer(stage, key string) (pipeline.Result, bool, error) {
	var (
		res   pipeline.Result
		found bool
	)
	err := db.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(answersBucket(stage))
		if b == nil {
			return nil
		}
		k := answerKey(key)
		if db.format < sharedFormat-1 {
			k = []byte(key) // a format 1 file, read-only
		}
		v := db.answerGet(tx, b, k)
		if v == nil {
			return nil
		}
		var err error
		if res, err = db.decodeAnswer(tx, v); err != nil {
			return pipeline.Damaged("", stage, err, "cached answer %s at %s is damaged, so the stage asks again and its answer replaces this one", key, stage)
		}
		found = true
		return nil
	})
	return res, found, err
}

// Ledgers returns each stage's lifetime spend, savings and answer counts,
// as committed. A stage that never spent nor saved is absent.
func (db *DB) Ledgers() (map[string]pipeline.Ledger, error) {
	out := map[string]pipeline.Ledger{}
	err := db.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLedger)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			out[string(k)] = decodeLedger(v).Ledger()
			return nil
		})
	})
	return out, err
}

// QueuedThrough is how many items are queued at stage or at an earlier
// one: what is left to go through it.
func (db *DB) QueuedThrough(stage string) (int, error) {
	si, ok := db.index[stage]
	if !ok {
		return 0, fmt.Errorf("unknown stage %q (stages: %s)", stage, stageNames(db.stages))
	}
	n := 0
	err := db.view(func(tx *bolt.Tx) error {
		for i := 0; i <= si; i++ {
			if b := tx.Bucket(todoBucket(db.stages[i].Name)); b != nil {
				n += b.Stats().KeyN
			}
		}
		return nil
	})
	return n, err
}

// decodeLedger reads a ledger value: four big-endian int64s.
func decodeLedger(v []byte) pipeline.LedgerSum {
	if len(v) != 32 {
		return pipeline.LedgerSum{}
	}
	get := func(i int) int64 { return int64(binary.BigEndian.Uint64(v[i*8:])) }
	return pipeline.LedgerSum{Spent: pipeline.NanoUSD(get(0)), Saved: pipeline.NanoUSD(get(1)), Paid: get(2), Cached: get(3)}
}

func encodeLedger(e pipeline.LedgerSum) []byte {
	v := make([]byte, 32)
	for i, n := range []int64{int64(e.Spent), int64(e.Saved), e.Paid, e.Cached} {
		binary.BigEndian.PutUint64(v[i*8:], uint64(n))
	}
	return v
}

// applies reports whether t will be applied (its item is queued at its
// stage and sequence), before apply changes the state.
func (w *writer) applies(t *pipeline.Transition) bool {
	si, ok := w.db.index[t.Stage]
	if !ok {
		return false
	}
	s, ok := w.state([]byte(t.ID))
	return ok && s.Status == pipeline.StatusQueued && s.Stage == si && s.Seq == t.Seq
}

// record adds an applied transition's money to the stage's ledger, in
// the transition's transaction (apply keeps its answer under its cache
// key).
func (w *writer) record(t *pipeline.Transition) error {
	if t.CostUSD == 0 && !t.Cached && t.Usage == (pipeline.Usage{}) {
		return nil
	}
	b, err := w.tx.CreateBucketIfNotExists(bucketLedger)
	if err != nil {
		return err
	}
	e := decodeLedger(b.Get([]byte(t.Stage)))
	e.AddTransition(t)
	return b.Put([]byte(t.Stage), encodeLedger(e))
}

// ForEachAnswer calls fn with every answer cached at stage, in key
// order: what `sawtooth copy` moves.
func (db *DB) ForEachAnswer(stage string, fn func(key string, res pipeline.Result) error) error {
	return db.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(answersBucket(stage))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			res, err := db.decodeAnswer(tx, v)
			if err != nil {
				return pipeline.Damaged("", stage, err, "cached answer %s at %s is damaged", answerKeyString(k), stage)
			}
			return fn(answerKeyString(k), res)
		})
	})
}

// RestoreAnswers caches answers (key -> answer) at stage, in one
// transaction; a key already cached keeps its answer.
func (db *DB) RestoreAnswers(stage string, answers map[string]pipeline.Result) error {
	if _, ok := db.index[stage]; !ok {
		return fmt.Errorf("unknown stage %q (stages: %s)", stage, stageNames(db.stages))
	}
	return db.update(func(tx *bolt.Tx) error {
		w := db.writer(tx)
		for key, res := range answers {
			if _, err := w.putAnswer(stage, key, res); err != nil {
				return fmt.Errorf("cache answer %s at %s: %w", key, stage, err)
			}
		}
		return nil
	})
}

// AddLedgers adds ls to the stages' lifetime ledgers.
func (db *DB) AddLedgers(ls map[string]pipeline.Ledger) error {
	return db.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketLedger)
		if err != nil {
			return err
		}
		for stage, l := range ls {
			e := decodeLedger(b.Get([]byte(stage)))
			e.AddLedger(l)
			if err := b.Put([]byte(stage), encodeLedger(e)); err != nil {
				return err
			}
		}
		return nil
	})
}
