// This file counts how many batch jobs asked for each item at its stage,
// so that an item whose answers never commit (cut off every time, lost
// to a kill) is not paid for again and again, round after round, by
// every worker of a fleet.
//
//	batch-sends   item id -> stage index (1 byte), sends (uvarint),
//	              the todo sequence ReturnBatch gave it (uvarint)
//
// A count holds while the item goes from its stage's queue into a job
// and back by ReturnBatch alone: ReserveBatch drops it when the item was
// queued any other way since (its todo sequence is not the one recorded:
// a rerun, a requeue, an edit, an online retry), and a result committed
// at the stage drops it too.

package store

import (
	"encoding/binary"

	"github.com/sawtooth-dev/sawtooth/pipeline"

	bolt "go.etcd.io/bbolt"
)

var bucketBatchSends = []byte("batch-sends")

// sends is an item's entry of batch-sends.
type sends struct {
	stage int
	n     int
	seq   uint64
}

func getSends(tx *bolt.Tx, id []byte) (sends, bool) {
	b := tx.Bucket(bucketBatchSends)
	if b == nil {
		return sends{}, false
	}
	v := b.Get(id)
	if len(v) < 1 {
		return sends{}, false
	}
	n, k := binary.Uvarint(v[1:])
	if k <= 0 {
		return sends{}, false
	}
	seq, j := binary.Uvarint(v[1+k:])
	if j <= 0 {
		return sends{}, false
	}
	return sends{stage: int(v[0]), n: int(n), seq: seq}, true
}

func putSends(tx *bolt.Tx, id []byte, s sends) error {
	b, err := tx.CreateBucketIfNotExists(bucketBatchSends)
	if err != nil {
		return err
	}
	v := make([]byte, 1, 1+2*binary.MaxVarintLen64)
	v[0] = byte(s.stage)
	v = binary.AppendUvarint(v, uint64(s.n))
	v = binary.AppendUvarint(v, s.seq)
	return b.Put(id, v)
}

func dropSends(tx *bolt.Tx, id []byte) error {
	if b := tx.Bucket(bucketBatchSends); b != nil && b.Get(id) != nil {
		return b.Delete(id)
	}
	return nil
}

// keepSends is ReserveBatch's check of item id, queued at stage si with
// todo sequence seq: its count holds only if ReturnBatch queued it there.
func keepSends(tx *bolt.Tx, id []byte, si int, seq uint64) error {
	if s, ok := getSends(tx, id); ok && (s.stage != si || s.seq != seq) {
		return dropSends(tx, id)
	}
	return nil
}

// countSends adds one send to each item job j holds at stage si: the
// job was just found to exist at the API (created, or re-attached).
func (w *writer) countSends(j pipeline.BatchJob, si int) error {
	for _, id := range j.Items {
		st, ok := w.state([]byte(id))
		if !ok || st.Status != pipeline.StatusInBatch || st.Stage != si || st.Seq != j.Num {
			continue
		}
		s, ok := getSends(w.tx, []byte(id))
		if !ok || s.stage != si {
			s = sends{stage: si}
		}
		s.n++
		if err := putSends(w.tx, []byte(id), s); err != nil {
			return err
		}
	}
	return nil
}

// returnedSends records the todo sequence seq that ReturnBatch gave item
// id back at stage si, so that its count holds into the next job.
func returnedSends(tx *bolt.Tx, id []byte, si int, seq uint64) error {
	s, ok := getSends(tx, id)
	if !ok || s.stage != si {
		return nil
	}
	s.seq = seq
	return putSends(tx, id, s)
}

// BatchSends returns, for each item job num holds, how many batch jobs
// were created holding it at the job's stage (this one included once the
// API named it) since it last entered that stage's queue other than
// by a job giving it back. Items never sent are left out.
func (db *DB) BatchSends(num uint64) (map[string]int, error) {
	job, err := db.BatchJobByNum(num)
	if err != nil {
		return nil, err
	}
	si := db.index[job.Stage]
	out := map[string]int{}
	err = db.view(func(tx *bolt.Tx) error {
		for _, id := range job.Items {
			if s, ok := getSends(tx, []byte(id)); ok && s.stage == si && s.n > 0 {
				out[id] = s.n
			}
		}
		return nil
	})
	return out, err
}
