// This file keeps batch jobs (the Gemini Batch API as a stage mode) with
// the bbolt store's semantics (store/batch.go tells a job's life), for
// many workers at once:
//
//   - a job is a batch_job row: its record (pipeline.BatchJob as JSON),
//     whether it is closed, and who drives it (owner, lease_until on the
//     database clock);
//   - an item a job holds keeps its queue row, which names the job in
//     batch: claims and other reservations pass it by. CommitBatch
//     deletes the row as it applies the item's result, so a result lands
//     once whoever commits it; ReturnBatch puts the row back at the end
//     of the queue;
//   - one worker drives a job at a time. ReserveBatch gives the new job
//     to the worker that reserved it, HoldBatches renews its lease and
//     takes over the jobs whose driver's lease ended, and every change to
//     an open job is refused with pipeline.ErrBatchHeld while another
//     worker's lease holds it. MarkBatchCreate is such a change, so two
//     workers never both send create for one intent: one that takes over
//     an intent whose create was sent finds CreateSent recorded and looks
//     for the job by its display name before creating.

package postgres

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// DefaultBatchLease is how long a worker holds a batch job it reserved or
// took before it is renewed, until a HoldBatches names another.
const DefaultBatchLease = 2 * time.Minute

const (
	keyBatchNonce    = "batch-nonce"
	keyBatchEndpoint = "batch-endpoint"
)

// leaseArg is the lease of the jobs this handle reserves or takes, in
// microseconds.
func (db *DB) leaseArg() int64 {
	if us := db.batchLease.Load(); us > 0 {
		return us
	}
	return DefaultBatchLease.Microseconds()
}

// ReserveBatch records a new job's intent: up to max items queued at
// stage and claimable (oldest first) are held by the job, which this
// worker holds. It returns the job, or ok false when no item is free.
func (db *DB) ReserveBatch(stage string, max int, now time.Time) (job pipeline.BatchJob, ok bool, err error) {
	si, err := db.stageIndex(stage)
	if err != nil {
		return job, false, err
	}
	if max <= 0 {
		return job, false, fmt.Errorf("batch size %d: use a positive number", max)
	}
	ctx := db.ctx
	err = db.tx(ctx, func(tx pgx.Tx) error {
		job, ok = pipeline.BatchJob{}, false
		rows, _ := tx.Query(ctx, `SELECT q.seq, q.item_id FROM todo q WHERE q.stage = $1 AND q.batch IS NULL AND `+claimableSQL+`
			ORDER BY q.seq LIMIT $2 FOR UPDATE OF q SKIP LOCKED`, si, max)
		var seqs []int64
		var seq int64
		var id string
		if _, err := pgx.ForEachRow(rows, []any{&seq, &id}, func() error {
			seqs, job.Items = append(seqs, seq), append(job.Items, id)
			return nil
		}); err != nil || len(seqs) == 0 {
			return err
		}
		nonce, err := batchNonce(ctx, tx)
		if err != nil {
			return err
		}
		var num int64
		if err := tx.QueryRow(ctx, `SELECT nextval('batch_job_seq')`).Scan(&num); err != nil {
			return err
		}
		// The attempt is the fencing token of online claims: one taken
		// before the reservation can no longer commit the item.
		if _, err := tx.Exec(ctx, `UPDATE todo SET batch = $1, attempt = attempt + 1, owner = NULL, session = NULL
			WHERE seq = ANY($2)`, num, seqs); err != nil {
			return err
		}
		h := sha256.New()
		for _, id := range job.Items {
			h.Write([]byte(id))
			h.Write([]byte{0})
		}
		var endpoint []byte
		if err := tx.QueryRow(ctx, `SELECT value FROM meta WHERE key = $1`, keyBatchEndpoint).Scan(&endpoint); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		job.Num, job.Stage, job.Created, job.CreateTracked = uint64(num), stage, now.UTC(), true
		job.Endpoint = string(endpoint)
		job.DisplayName = fmt.Sprintf("sawtooth-%s-%s-%d-%s", nonce, stage, num, hex.EncodeToString(h.Sum(nil)[:4]))
		rec, err := json.Marshal(job)
		if err != nil {
			return err
		}
		ok = true
		_, err = tx.Exec(ctx, `INSERT INTO batch_job (num, stage, owner, lease_until, record)
			VALUES ($1, $2, $3, `+leaseSQL(4)+`, $5)`, num, stage, db.owner, db.leaseArg(), rec)
		return err
	})
	if err != nil {
		return pipeline.BatchJob{}, false, fmt.Errorf("reserve a batch job of %s in %s: %w", stage, db.path, err)
	}
	return job, ok, nil
}

// batchNonce returns this database's random job-name prefix, creating it
// once: two databases on one API project never share a display name.
func batchNonce(ctx context.Context, tx pgx.Tx) (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING`,
		keyBatchNonce, []byte(hex.EncodeToString(b[:]))); err != nil {
		return "", err
	}
	var v []byte
	err := tx.QueryRow(ctx, `SELECT value FROM meta WHERE key = $1`, keyBatchNonce).Scan(&v)
	return string(v), err
}

// SetBatchEndpoint records url as the API root URL the jobs reserved
// from now on are created at (BatchJob.Endpoint). Idempotent.
func (db *DB) SetBatchEndpoint(url string) error {
	_, err := db.pool.Exec(db.ctx, `INSERT INTO meta (key, value) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value WHERE meta.value <> EXCLUDED.value`, keyBatchEndpoint, []byte(url))
	if err != nil {
		return fmt.Errorf("record the batch endpoint in %s: %w", db.path, err)
	}
	return nil
}

// HoldBatches renews this worker's lease on its open jobs of stage, takes
// the open ones nobody holds (their driver's lease ended), and returns
// every job it now holds, oldest first, and how many open jobs of stage
// other workers hold. Jobs this handle reserves or takes later get lease
// too. A job held before and not returned now was taken by another
// worker: leave it.
func (db *DB) HoldBatches(stage string, lease time.Duration) (held []pipeline.BatchJob, others int, err error) {
	if _, err := db.stageIndex(stage); err != nil {
		return nil, 0, err
	}
	if lease <= 0 {
		return nil, 0, fmt.Errorf("hold batch jobs of %s: %w (got %v)", stage, errLease, lease)
	}
	db.batchLease.Store(lease.Microseconds())
	ctx := db.ctx
	err = db.tx(ctx, func(tx pgx.Tx) error {
		held = nil
		rows, _ := tx.Query(ctx, `UPDATE batch_job SET owner = $2, lease_until = `+leaseSQL(3)+`
			WHERE stage = $1 AND NOT closed AND (owner = $2 OR owner IS NULL OR lease_until <= now())
			RETURNING record`, stage, db.owner, lease.Microseconds())
		var raw []byte
		if _, err := pgx.ForEachRow(rows, []any{&raw}, func() error {
			var j pipeline.BatchJob
			if err := json.Unmarshal(raw, &j); err != nil {
				return fmt.Errorf("a batch job of %s: bad record: %w", stage, err)
			}
			held = append(held, j)
			return nil
		}); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT count(*) FROM batch_job WHERE stage = $1 AND NOT closed AND owner <> $2`,
			stage, db.owner).Scan(&others)
	})
	if err != nil {
		return nil, 0, fmt.Errorf("hold batch jobs of %s in %s: %w", stage, db.path, err)
	}
	slices.SortFunc(held, func(a, b pipeline.BatchJob) int { return cmp.Compare(a.Num, b.Num) })
	return held, others, nil
}

// updateJob applies fn to job num's record in one transaction, with the
// job's row locked. An open job another worker's lease holds is refused
// (pipeline.ErrBatchHeld), and so, when mustHold, is one whose lease this
// worker does not hold live; otherwise this worker holds it from now on.
func (db *DB) updateJob(num uint64, mustHold bool, fn func(tx pgx.Tx, j *pipeline.BatchJob) error) (pipeline.BatchJob, error) {
	var job pipeline.BatchJob
	ctx := db.ctx
	err := db.tx(ctx, func(tx pgx.Tx) error {
		var raw []byte
		var owner *string
		var live, closed bool
		err := tx.QueryRow(ctx, `SELECT record, owner, lease_until > now(), closed FROM batch_job WHERE num = $1 FOR UPDATE`, int64(num)).
			Scan(&raw, &owner, &live, &closed)
		if errors.Is(err, pgx.ErrNoRows) {
			return &pipeline.NoBatchJobError{Num: num}
		}
		if err != nil {
			return err
		}
		mine := owner != nil && *owner == db.owner
		switch {
		case !closed && live && !mine:
			return fmt.Errorf("batch job %d is driven by %s: %w (it is left to that worker until its lease ends)", num, *owner, pipeline.ErrBatchHeld)
		case !closed && mustHold && !(live && mine):
			return fmt.Errorf("batch job %d: this worker's lease on it ended: %w (hold it again before sending create)", num, pipeline.ErrBatchHeld)
		}
		job = pipeline.BatchJob{}
		if err := json.Unmarshal(raw, &job); err != nil {
			return fmt.Errorf("batch job %d: bad record: %w", num, err)
		}
		if err := fn(tx, &job); err != nil {
			return err
		}
		rec, err := json.Marshal(job)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE batch_job SET record = $2, closed = $3, owner = $4,
			lease_until = CASE WHEN owner = $4 THEN lease_until ELSE `+leaseSQL(5)+` END WHERE num = $1`,
			int64(num), rec, !job.Open(), db.owner, db.leaseArg())
		return err
	})
	if err != nil {
		return pipeline.BatchJob{}, err
	}
	return job, nil
}

// SetBatchName records the API's name and state for job num after create.
func (db *DB) SetBatchName(num uint64, name, state string, now time.Time) (pipeline.BatchJob, error) {
	return db.updateJob(num, false, func(tx pgx.Tx, j *pipeline.BatchJob) error {
		if j.Name != "" && j.Name != name {
			return &pipeline.TwoBatchJobsError{Num: num, Have: j.Name, Want: name}
		}
		if j.Name == "" {
			// The job exists at the API: its items count one send each
			// (batchsends.go). A create refused (a 429) made none.
			si, err := db.stageIndex(j.Stage)
			if err != nil {
				return err
			}
			if err := countSends(db.ctx, tx, num, si); err != nil {
				return err
			}
		}
		j.Name, j.State, j.Submitted, j.Updated = name, state, now.UTC(), now.UTC()
		return nil
	})
}

// MarkBatchCreate records, just before create is sent, that job num may
// exist at the API from now on, and what it reserved against a budget.
// It refuses a job that already has a name, a closed one, and one whose
// lease this worker does not hold (HoldBatches, ReserveBatch): only the
// job's driver sends create, and only while its lease lasts.
func (db *DB) MarkBatchCreate(num uint64, reservedUSD float64, now time.Time) (pipeline.BatchJob, error) {
	return db.updateJob(num, true, func(_ pgx.Tx, j *pipeline.BatchJob) error {
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
	return db.updateJob(num, false, func(_ pgx.Tx, j *pipeline.BatchJob) error {
		j.State, j.Counts, j.Updated = state, counts, now.UTC()
		if apiErr != "" {
			j.APIError = apiErr
		}
		return nil
	})
}

// BatchJobs returns every job record, oldest first (open ones only when
// openOnly).
func (db *DB) BatchJobs(openOnly bool) ([]pipeline.BatchJob, error) {
	rows, _ := db.pool.Query(db.ctx, `SELECT num, record FROM batch_job WHERE NOT (closed AND $1) ORDER BY num`, openOnly)
	var out []pipeline.BatchJob
	var num int64
	var raw []byte
	_, err := pgx.ForEachRow(rows, []any{&num, &raw}, func() error {
		var j pipeline.BatchJob
		if err := json.Unmarshal(raw, &j); err != nil {
			return fmt.Errorf("batch job %d: bad record: %w", num, err)
		}
		out = append(out, j)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list batch jobs in %s: %w", db.path, err)
	}
	return out, nil
}

// BatchJobByNum returns job num's record.
func (db *DB) BatchJobByNum(num uint64) (pipeline.BatchJob, error) {
	var raw []byte
	err := db.pool.QueryRow(db.ctx, `SELECT record FROM batch_job WHERE num = $1`, int64(num)).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return pipeline.BatchJob{}, &pipeline.NoBatchJobError{Num: num}
	}
	if err != nil {
		return pipeline.BatchJob{}, fmt.Errorf("read batch job %d in %s: %w", num, db.path, err)
	}
	var j pipeline.BatchJob
	if err := json.Unmarshal(raw, &j); err != nil {
		return j, fmt.Errorf("batch job %d: bad record: %w", num, err)
	}
	return j, nil
}

// BatchItems returns the items job num still holds, each with its record
// and earlier stages' outputs, in the job's order.
func (db *DB) BatchItems(num uint64) ([]pipeline.Item, error) {
	job, err := db.BatchJobByNum(num)
	if err != nil {
		return nil, err
	}
	si, err := db.stageIndex(job.Stage)
	if err != nil {
		return nil, fmt.Errorf("batch job %d: %w", num, err)
	}
	rows, _ := db.pool.Query(db.ctx, `SELECT x.item_id, i.record, o.data
		FROM todo x JOIN item i USING (item_id) `+outputsSQL+` WHERE x.batch = $2 AND x.stage = $1`, si, int64(num))
	held := map[string]pipeline.Item{}
	var id string
	var record, row []byte
	_, err = pgx.ForEachRow(rows, []any{&id, &record, &row}, func() error {
		it, err := db.item(id, record, row, si)
		if err != nil {
			return fmt.Errorf("item %q: %w", id, err)
		}
		held[id] = it
		row = nil
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the items of batch job %d in %s: %w", num, db.path, err)
	}
	out := make([]pipeline.Item, 0, len(held))
	for _, id := range job.Items {
		if it, ok := held[id]; ok {
			out = append(out, it)
		}
	}
	return out, nil
}

// InBatchCount returns how many items each stage's open jobs hold.
func (db *DB) InBatchCount() (map[string]int, error) {
	rows, _ := db.pool.Query(db.ctx, `SELECT stage, count(*) FROM todo WHERE batch IS NOT NULL GROUP BY stage`)
	out := map[string]int{}
	var si int16
	var n int
	_, err := pgx.ForEachRow(rows, []any{&si, &n}, func() error {
		if int(si) < len(db.stages) {
			out[db.stages[si].Name] = n
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count the items in batch jobs in %s: %w", db.path, err)
	}
	return out, nil
}
