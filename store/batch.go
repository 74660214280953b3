// This file keeps batch jobs (the Gemini Batch API as a stage mode): the
// job records, the items a live job holds, and the commit of its results.
//
//	batches   big-endian job number -> BatchJob (JSON)
//	meta      batch-nonce: random hex naming this database's jobs;
//	          batch-endpoint: the API root URL new jobs are created at
//
// The life of a job, each step one transaction:
//
//  1. ReserveBatch records the intent (number, display name, item ids)
//     and moves the items out of todo/<stage> into the job: their state
//     becomes InBatch at that stage with Seq the job number, so the online
//     dispatcher never sees them and no other job takes them. This happens
//     before the job is created at the API.
//  2. MarkBatchCreate records that create is being sent, SetBatchName
//     the API's name once it returned.
//  3. UpdateBatch records states and counts as the job is polled.
//  4. CommitBatch applies results as pipeline.Transitions; a result for an
//     item no longer in that job (answered online, re-queued, re-ingested)
//     is ignored and counted.
//  5. ReturnBatch puts the job's unanswered items back in the queue and
//     closes the job.
//
// A crash between any two steps leaves a record that says what to do: an
// intent without a name means "look for the display name at the API
// before creating" (create is not idempotent), and if a create was sent
// (CreateSent), "look again until a create still in flight then would
// have shown"; a named open job means "poll it".

package store

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

var (
	bucketBatches    = []byte("batches")
	keyBatchNonce    = []byte("batch-nonce")
	keyBatchEndpoint = []byte("batch-endpoint")
)

// ReserveBatch records a new job's intent: up to max items queued at stage
// (oldest first) leave the queue and are held by the job. It returns the
// job, or ok false when the queue is empty.
func (db *DB) ReserveBatch(stage string, max int, now time.Time) (job pipeline.BatchJob, ok bool, err error) {
	si, known := db.index[stage]
	if !known {
		return pipeline.BatchJob{}, false, fmt.Errorf("unknown stage %q (stages: %s)", stage, stageNames(db.stages))
	}
	if max <= 0 {
		return pipeline.BatchJob{}, false, fmt.Errorf("batch size %d: use a positive number", max)
	}
	err = db.update(func(tx *bolt.Tx) error {
		job, ok = pipeline.BatchJob{}, false
		w := db.writer(tx)
		jobs, err := tx.CreateBucketIfNotExists(bucketBatches)
		if err != nil {
			return err
		}
		nonce, err := batchNonce(tx)
		if err != nil {
			return err
		}
		todo := w.bucket(todoBucket(stage))
		var ids [][]byte
		c := todo.Cursor()
		for k, v := c.First(); k != nil && len(ids) < max; k, v = c.Next() {
			ids = append(ids, bytes.Clone(v))
		}
		if len(ids) == 0 {
			return nil
		}
		num, err := jobs.NextSequence()
		if err != nil {
			return err
		}
		h := sha256.New()
		for _, id := range ids {
			s, found := w.state(id)
			if !found || s.Status != pipeline.StatusQueued || s.Stage != si {
				return pipeline.Damaged(string(id), stage, nil, "todo/%s holds it, but it is not queued there", stage)
			}
			if err := keepSends(tx, id, si, s.Seq); err != nil {
				return err
			}
			if err := todo.Delete(u64(s.Seq)); err != nil {
				return err
			}
			if err := w.putState(id, state{Stage: si, Status: pipeline.StatusInBatch, Seq: num, Hash: s.Hash, Shared: s.Shared}); err != nil {
				return err
			}
			job.Items = append(job.Items, string(id))
			h.Write(id)
			h.Write([]byte{0})
		}
		job.Num, job.Stage, job.Created, job.CreateTracked = num, stage, now.UTC(), true
		job.Endpoint = string(tx.Bucket(bucketMeta).Get(keyBatchEndpoint))
		job.DisplayName = fmt.Sprintf("sawtooth-%s-%s-%d-%s", nonce, stage, num, hex.EncodeToString(h.Sum(nil)[:4]))
		ok = true
		return putJob(jobs, job)
	})
	return job, ok, err
}

// SetBatchEndpoint records url as the API root URL the jobs reserved
// from now on are created at (BatchJob.Endpoint). Idempotent.
func (db *DB) SetBatchEndpoint(url string) error {
	return db.update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if string(meta.Get(keyBatchEndpoint)) == url {
			return nil
		}
		return meta.Put(keyBatchEndpoint, []byte(url))
	})
}

// batchNonce returns this database's random job-name prefix, creating it
// once: two databases on one API project never share a display name.
func batchNonce(tx *bolt.Tx) (string, error) {
	meta := tx.Bucket(bucketMeta)
	if v := meta.Get(keyBatchNonce); v != nil {
		return string(v), nil
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	n := hex.EncodeToString(b[:])
	return n, meta.Put(keyBatchNonce, []byte(n))
}

func putJob(b *bolt.Bucket, j pipeline.BatchJob) error {
	v, err := json.Marshal(j)
	if err != nil {
		return err
	}
	return b.Put(u64(j.Num), v)
}

// updateJob applies fn to job num's record in one transaction.
func (db *DB) updateJob(num uint64, fn func(w *writer, j *pipeline.BatchJob) error) (pipeline.BatchJob, error) {
	var job pipeline.BatchJob
	err := db.update(func(tx *bolt.Tx) error {
		jobs := tx.Bucket(bucketBatches)
		var v []byte
		if jobs != nil {
			v = jobs.Get(u64(num))
		}
		if v == nil {
			return &pipeline.NoBatchJobError{Num: num}
		}
		job = pipeline.BatchJob{}
		if err := json.Unmarshal(v, &job); err != nil {
			return fmt.Errorf("batch job %d: bad record: %w", num, err)
		}
		if err := fn(db.writer(tx), &job); err != nil {
			return err
		}
		return putJob(jobs, job)
	})
	return job, err
}

// SetBatchName records the API's name and state for job num after create.
func (db *DB) SetBatchName(num uint64, name, state string, now time.Time) (pipeline.BatchJob, error) {
	return db.updateJob(num, func(w *writer, j *pipeline.BatchJob) error {
		if j.Name != "" && j.Name != name {
			return &pipeline.TwoBatchJobsError{Num: num, Have: j.Name, Want: name}
		}
		if j.Name == "" {
			// The job exists at the API: its items count one send each
			// (batchsends.go). A create refused (a 429) made none.
			if err := w.countSends(*j, w.db.index[j.Stage]); err != nil {
				return err
			}
		}
		j.Name, j.State, j.Submitted, j.Updated = name, state, now.UTC(), now.UTC()
		return nil
	})
}

// MarkBatchCreate records, just before create is sent, that job num may
// exist at the API from now on, and what it reserved against a budget
// (BatchJob.ReservedUSD). It refuses a job that already has a name (a
// second create would make a second job).
func (db *DB) MarkBatchCreate(num uint64, reservedUSD float64, now time.Time) (pipeline.BatchJob, error) {
	return db.updateJob(num, func(_ *writer, j *pipeline.BatchJob) error {
		if j.Name != "" {
			return fmt.Errorf("batch job %d is already created as %s: not sending create again", num, j.Name)
		}
		if !j.Open() {
			return fmt.Errorf("batch job %d is closed: not sending create", num)
		}
		j.CreateSent, j.ReservedUSD = now.UTC(), reservedUSD
		return nil
	})
}

// UpdateBatch records a polled state of job num, its counts and
// job-level error (kept when apiErr is "").
func (db *DB) UpdateBatch(num uint64, state string, counts pipeline.BatchCounts, apiErr string, now time.Time) (pipeline.BatchJob, error) {
	return db.updateJob(num, func(_ *writer, j *pipeline.BatchJob) error {
		j.State, j.Counts, j.Updated = state, counts, now.UTC()
		if apiErr != "" {
			j.APIError = apiErr
		}
		return nil
	})
}

// CommitBatch applies results of job num. Each transition's Seq is
// ignored: a transition applies only if its item is still held by this
// job (InBatch at the job's stage with the job's number); otherwise it is
// counted as ignored. A held item is put back in its queue and the
// transition applied to it in the same transaction, so a batch result goes
// through exactly the code an online result does (outputs, the next
// stage's queue, dead letters, the tally). A Billed transition records
// only what its item's request was billed, in the ledger and the job's
// usage; the item stays in the job. A commit to a job the API named
// is its results' (create-time commits precede the name): it sets
// ResultsCommitted. It returns how many applied.
func (db *DB) CommitBatch(num uint64, ts []pipeline.Transition) (applied int, err error) {
	_, err = db.updateJob(num, func(w *writer, j *pipeline.BatchJob) error {
		applied = 0
		j.ResultsCommitted = j.ResultsCommitted || j.Name != ""
		si := w.db.index[j.Stage]
		for _, t := range ts {
			id := []byte(t.ID)
			s, ok := w.state(id)
			if t.Stage != j.Stage || !ok || s.Status != pipeline.StatusInBatch || s.Stage != si || s.Seq != j.Num {
				j.Ignored++
				continue
			}
			if t.Outcome == pipeline.Billed {
				if err := w.addUsage(t.Stage, t.Usage); err != nil {
					return err
				}
				if err := w.record(&t); err != nil {
					return err
				}
				j.Usage = j.Usage.Add(t.Usage)
				continue
			}
			if err := w.enqueue(id, si, s.Hash, s.Shared); err != nil {
				return err
			}
			back, _ := w.state(id)
			t.Seq = back.Seq
			if err := w.apply(&t); err != nil {
				return err
			}
			if err := dropSends(w.tx, id); err != nil {
				return err
			}
			// The answer cache and the ledger, as Commit keeps them.
			if err := w.record(&t); err != nil {
				return err
			}
			applied++
			switch t.Outcome {
			case pipeline.Succeeded:
				j.Answered++
			case pipeline.DeadLettered:
				j.Dead++
			}
			j.Usage = j.Usage.Add(t.Result.Usage)
		}
		return w.packSettled()
	})
	return applied, err
}

// ReturnBatch puts job num's items that it still holds back at the end of
// their stage's queue and closes the job with note. Idempotent; returns
// how many items moved.
func (db *DB) ReturnBatch(num uint64, note string, now time.Time) (int, error) {
	n := 0
	_, err := db.updateJob(num, func(w *writer, j *pipeline.BatchJob) error {
		n = 0
		si := w.db.index[j.Stage]
		for _, id := range j.Items {
			s, ok := w.state([]byte(id))
			if !ok || s.Status != pipeline.StatusInBatch || s.Stage != si || s.Seq != j.Num {
				continue
			}
			if err := w.enqueue([]byte(id), si, s.Hash, s.Shared); err != nil {
				return err
			}
			back, _ := w.state([]byte(id))
			if err := returnedSends(w.tx, []byte(id), si, back.Seq); err != nil {
				return err
			}
			n++
		}
		j.Returned += n
		if j.Open() {
			j.Closed, j.Note = now.UTC(), note
		}
		return nil
	})
	return n, err
}

// BatchJobs returns every job record, oldest first (open ones only when
// openOnly).
func (db *DB) BatchJobs(openOnly bool) ([]pipeline.BatchJob, error) {
	var out []pipeline.BatchJob
	err := db.view(func(tx *bolt.Tx) error {
		jobs := tx.Bucket(bucketBatches)
		if jobs == nil {
			return nil
		}
		return jobs.ForEach(func(k, v []byte) error {
			var j pipeline.BatchJob
			if err := json.Unmarshal(v, &j); err != nil {
				return fmt.Errorf("batch job %d: bad record: %w", binary.BigEndian.Uint64(k), err)
			}
			if !openOnly || j.Open() {
				out = append(out, j)
			}
			return nil
		})
	})
	return out, err
}

// BatchJobByNum returns job num's record.
func (db *DB) BatchJobByNum(num uint64) (pipeline.BatchJob, error) {
	var j pipeline.BatchJob
	err := db.view(func(tx *bolt.Tx) error {
		var v []byte
		if jobs := tx.Bucket(bucketBatches); jobs != nil {
			v = jobs.Get(u64(num))
		}
		if v == nil {
			return &pipeline.NoBatchJobError{Num: num}
		}
		return json.Unmarshal(v, &j)
	})
	return j, err
}

// BatchItems returns the items job num still holds, each with its record
// and earlier stages' outputs, in the job's order. The bytes are copied
// out of the transaction.
func (db *DB) BatchItems(num uint64) ([]pipeline.Item, error) {
	job, err := db.BatchJobByNum(num)
	if err != nil {
		return nil, err
	}
	si := db.index[job.Stage]
	var out []pipeline.Item
	err = db.view(func(tx *bolt.Tx) error {
		states := tx.Bucket(bucketState)
		for _, id := range job.Items {
			s, ok := decodeState(states.Get([]byte(id)))
			if !ok || s.Status != pipeline.StatusInBatch || s.Stage != si || s.Seq != num {
				continue
			}
			var it pipeline.Item
			var err error
			if it.Record, _, err = db.record(tx, []byte(id)); err != nil {
				return fmt.Errorf("batch job %d: %w", num, err)
			}
			if si > 0 {
				if it.Outputs, err = db.outputs(tx, []byte(id), it.Record.Text, si); err != nil {
					return fmt.Errorf("batch job %d: %w", num, err)
				}
				it.Prev = it.Outputs[db.stages[si-1].Name]
			}
			out = append(out, it)
		}
		return nil
	})
	return out, err
}

// InBatchCount returns how many items each stage's open jobs hold, from
// the kept counts (see Counts).
func (db *DB) InBatchCount() (map[string]int, error) {
	var kc itemCounts
	err := db.view(func(tx *bolt.Tx) error {
		var err error
		kc, err = db.current(tx)
		return err
	})
	out := map[string]int{}
	for i, s := range kc.stages {
		if s.held != 0 {
			out[db.stages[i].Name] = int(s.held)
		}
	}
	return out, err
}

// checkHeld is Check for an item InBatch: its job must exist, be open and
// list it.
func checkHeld(tx *bolt.Tx, id []byte, s state, stage string, add func(string, ...any)) {
	var v []byte
	if jobs := tx.Bucket(bucketBatches); jobs != nil {
		v = jobs.Get(u64(s.Seq))
	}
	var j pipeline.BatchJob
	if v == nil || json.Unmarshal(v, &j) != nil {
		add("item %q: in batch job %d at %s, which is not recorded", id, s.Seq, stage)
		return
	}
	if !j.Open() || j.Stage != stage || !slices.Contains(j.Items, string(id)) {
		add("item %q: in batch job %d at %s, which is closed or does not list it", id, s.Seq, stage)
	}
}
