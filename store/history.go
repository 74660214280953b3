package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// Buckets added after schema 1 was first written: Open creates them in an
// older file it opens for writing, and readers treat them as empty when a
// read-only open finds them missing.
var (
	// history: len(id) uvarint, id, big-endian sequence ->
	// pipeline.PastDeadLetter (JSON), every dead letter an item left.
	bucketHistory = []byte("history")
	// usage: "t\0"+stage -> pipeline.Usage billed by committed transitions
	// of stage, ever; "r\0"+run+"\0"+stage -> the same for one run.
	// Three big-endian int64s each.
	bucketUsage = []byte("usage")
)

func historyPrefix(id []byte) []byte {
	return append(binary.AppendUvarint(nil, uint64(len(id))), id...)
}

func historyKey(id []byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(historyPrefix(id), seq)
}

// historyID is the item id of a history key, ok false for a damaged key.
func historyID(k []byte) ([]byte, bool) {
	n, w := binary.Uvarint(k)
	if w <= 0 || uint64(len(k)-w) != n+8 {
		return nil, false
	}
	return k[w : w+int(n)], true
}

func usageTotalKey(stage string) []byte { return []byte("t\x00" + stage) }
func usageRunKey(run, stage string) []byte {
	return []byte("r\x00" + run + "\x00" + stage)
}

func encodeUsage(u pipeline.Usage) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(u.PromptTokens))
	b = binary.BigEndian.AppendUint64(b, uint64(u.CandidateTokens))
	return binary.BigEndian.AppendUint64(b, uint64(u.TotalTokens))
}

func decodeUsage(b []byte) pipeline.Usage {
	if len(b) != 24 {
		return pipeline.Usage{}
	}
	return pipeline.Usage{
		PromptTokens:    int64(binary.BigEndian.Uint64(b)),
		CandidateTokens: int64(binary.BigEndian.Uint64(b[8:])),
		TotalTokens:     int64(binary.BigEndian.Uint64(b[16:])),
	}
}

// DeadHistory lists the dead letters item id had before a re-queue, a
// re-run or an edit sent it back to a queue, oldest first (empty when it
// never had one). Its current dead letter, if any, is Locate's.
func (db *DB) DeadHistory(id string) ([]pipeline.PastDeadLetter, error) {
	var out []pipeline.PastDeadLetter
	err := db.view(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketState).Get([]byte(id)) == nil {
			return fmt.Errorf("item %q: %w", id, ErrNotFound)
		}
		var err error
		out, err = readHistory(tx, []byte(id))
		return err
	})
	return out, err
}

func readHistory(tx *bolt.Tx, id []byte) ([]pipeline.PastDeadLetter, error) {
	b := tx.Bucket(bucketHistory)
	if b == nil {
		return nil, nil
	}
	var out []pipeline.PastDeadLetter
	prefix := historyPrefix(id)
	c := b.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var p pipeline.PastDeadLetter
		if err := json.Unmarshal(v, &p); err != nil {
			return nil, pipeline.Damaged(string(id), "", err, "dead-letter history entry is damaged")
		}
		out = append(out, p)
	}
	return out, nil
}

// Usage is the tokens billed per stage by every committed transition,
// ever: recorded in the transaction that stored the results they paid
// for, so a killed run's usage is not lost.
func (db *DB) Usage() (map[string]pipeline.Usage, error) {
	out := map[string]pipeline.Usage{}
	err := db.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketUsage)
		if b == nil {
			return nil
		}
		prefix := []byte("t\x00")
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			out[string(k[len(prefix):])] = decodeUsage(v)
		}
		return nil
	})
	return out, err
}

// Run statuses the store itself writes or reads.
const (
	runRunning = "running"
	// RunKilled is pipeline.RunKilled.
	RunKilled = pipeline.RunKilled
)

// killedRun rewrites a run record left "running" by a process that is
// gone: status killed, ended at its last sample (else its start), and the
// usage its committed results recorded.
func (db *DB) killedRun(tx *bolt.Tx, r *pipeline.RunSummary) {
	r.Status = RunKilled
	r.Message = "the process stopped without saving this run's end (killed or crashed); its figures are what its committed results recorded"
	r.Ended = r.Started
	if bk := tx.Bucket(seriesBucket(r.ID)); bk != nil {
		if _, v := bk.Cursor().Last(); v != nil {
			var s []pipeline.Sample
			if json.Unmarshal(v, &s) == nil {
				for _, x := range s {
					if x.At.After(r.Ended) {
						r.Ended = x.At
					}
				}
			}
		}
	}
	b := tx.Bucket(bucketUsage)
	if b == nil {
		return
	}
	prefix := []byte("r\x00" + r.ID + "\x00")
	c := b.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		stage := string(k[len(prefix):])
		if r.Stages == nil {
			r.Stages = map[string]*pipeline.StageStats{}
		}
		if r.Stages[stage] == nil {
			r.Stages[stage] = &pipeline.StageStats{}
		}
		r.Stages[stage].Usage = decodeUsage(v)
	}
}

// markKilledRuns runs at a writable open, when this process holds the
// file's exclusive lock: a run record still "running" belongs to a
// process that died, and is rewritten as killed.
// It writes only when there is one, so opening a file changes nothing
// otherwise.
func (db *DB) markKilledRuns() error {
	find := func(tx *bolt.Tx) []pipeline.RunSummary {
		var fixed []pipeline.RunSummary
		_ = tx.Bucket(bucketRuns).ForEach(func(k, v []byte) error {
			var r pipeline.RunSummary
			if json.Unmarshal(v, &r) == nil && r.Status == runRunning {
				db.killedRun(tx, &r)
				fixed = append(fixed, r)
			}
			return nil
		})
		return fixed
	}
	var n int
	if err := db.view(func(tx *bolt.Tx) error { n = len(find(tx)); return nil }); err != nil || n == 0 {
		return err
	}
	return db.update(func(tx *bolt.Tx) error {
		runs := tx.Bucket(bucketRuns)
		for _, r := range find(tx) {
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			if err := runs.Put([]byte(r.ID), b); err != nil {
				return err
			}
		}
		return nil
	})
}
