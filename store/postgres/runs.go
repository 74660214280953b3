package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Run statuses the store itself writes or reads.
const (
	runRunning = "running"
	// RunKilled is pipeline.RunKilled (here: a crash, a SIGKILL or a
	// lost connection).
	RunKilled = pipeline.RunKilled
)

// runLockClass is the first key of the session advisory lock a process
// holds while its run is "running"; the second is hashtext(schema:run).
// Many processes share one database, so a "running" record alone cannot
// say whether its process is alive: the lock can, as the server drops
// it with the session.
const runLockClass = 0x5a77

func (db *DB) runLockKey(run string) string { return db.schema + ":" + run }

// runLockCheck is how often a handle whose run is "running" checks that
// the session holding the run's lock is still there. A server restart or
// a dropped connection ends the session and its lock while the process
// lives on (a fleet worker rides out a restart): the run would read
// "killed" to every other process until the lock is taken again.
const runLockCheck = 2 * time.Second

// SaveRun stores (or replaces) a run record. While the last record saved
// through this DB is "running", Commit adds usage to that run too, and
// this handle holds the run's liveness lock on a session of its own.
func (db *DB) SaveRun(r pipeline.RunSummary) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	db.runMu.Lock()
	defer db.runMu.Unlock()
	if r.Status == runRunning {
		if cur := db.run.Load(); cur == nil || *cur != r.ID {
			db.releaseRunLocked()
			conn, err := db.pool.Acquire(db.ctx)
			if err != nil {
				return fmt.Errorf("save run %s: %w", r.ID, err)
			}
			if _, err := conn.Exec(db.ctx, `SELECT pg_advisory_lock($1, hashtext($2))`, runLockClass, db.runLockKey(r.ID)); err != nil {
				conn.Release()
				return fmt.Errorf("save run %s: %w", r.ID, err)
			}
			db.runConn = conn
			id := r.ID
			db.run.Store(&id)
			db.runStop = make(chan struct{})
			go db.keepRunLock(db.runStop, db.runLockEvery)
		}
	}
	if _, err := db.pool.Exec(db.ctx, `INSERT INTO run (run_id, summary) VALUES ($1, $2)
		ON CONFLICT (run_id) DO UPDATE SET summary = EXCLUDED.summary`, r.ID, b); err != nil {
		return fmt.Errorf("save run %s: %w", r.ID, err)
	}
	if r.Status != runRunning {
		if cur := db.run.Load(); cur != nil && *cur == r.ID {
			db.releaseRunLocked()
		}
	}
	return nil
}

func (db *DB) releaseRun() {
	db.runMu.Lock()
	defer db.runMu.Unlock()
	db.releaseRunLocked()
}

// releaseRunLocked drops the liveness lock. The unlock is explicit (a
// closed session's locks go only when its server process has exited,
// a moment later); if it fails the session is closed rather than
// returned to the pool still holding the lock.
func (db *DB) releaseRunLocked() {
	run := db.run.Swap(nil)
	if db.runStop != nil {
		close(db.runStop)
		db.runStop = nil
	}
	if db.runConn == nil {
		return
	}
	var ok bool
	err := db.runConn.QueryRow(db.ctx, `SELECT pg_advisory_unlock($1, hashtext($2))`, runLockClass, db.runLockKey(*run)).Scan(&ok)
	if err != nil || !ok {
		db.runConn.Hijack().Close(db.ctx)
	} else {
		db.runConn.Release()
	}
	db.runConn = nil
}

// keepRunLock checks the run's lock every period until stop closes,
// and takes it again when its session is gone.
func (db *DB) keepRunLock(stop <-chan struct{}, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		// A failure (the server away, the old session not yet gone)
		// is tried again at the next check.
		_ = db.checkRunLock()
	}
}

// errRunLockHeld: the run's lock is held by another session, most
// likely this handle's own, ended but not yet gone from the server.
var errRunLockHeld = errors.New("the run's lock is held by another session")

// checkRunLock makes sure the session holding the running run's lock
// is alive, and takes the lock on a new session when it is not.
func (db *DB) checkRunLock() error {
	db.runMu.Lock()
	defer db.runMu.Unlock()
	run := db.run.Load()
	if run == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(db.ctx, runLockCheck)
	defer cancel()
	if db.runConn != nil {
		if _, err := db.runConn.Exec(ctx, `SELECT 1`); err == nil {
			return nil
		}
		db.runConn.Hijack().Close(ctx)
		db.runConn = nil
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, hashtext($2))`, runLockClass, db.runLockKey(*run)).Scan(&ok); err != nil || !ok {
		conn.Release()
		if err == nil {
			err = errRunLockHeld
		}
		return err
	}
	db.runConn = conn
	return nil
}

// runAliveSQL holds for a row of a run table whose run's process holds
// the run's lock (SaveRun); class and schema are the parameters holding
// runLockClass and the pipeline's schema name.
func runAliveSQL(class, schema string) string {
	return `EXISTS (SELECT 1 FROM pg_locks l
				WHERE l.locktype = 'advisory' AND l.granted AND l.classid = ` + class + `::oid
				AND l.objid = hashtext(` + schema + ` || ':' || run_id)::oid AND l.objsubid = 2
				AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))`
}

// LiveRuns lists, in id order, the runs of the pipeline in schema whose
// process is alive (holds the run's lock, see SaveRun), read through q:
// a connection or transaction on the pipeline's database, whatever its
// search_path. A schema without a run table has none.
func LiveRuns(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, schema string) ([]string, error) {
	run := pgx.Identifier{schema, "run"}.Sanitize()
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, run).Scan(&exists); err != nil || !exists {
		return nil, err
	}
	var ids []string
	err := q.QueryRow(ctx, `SELECT coalesce(array_agg(run_id ORDER BY run_id), '{}') FROM `+run+` WHERE `+runAliveSQL("$1", "$2"),
		runLockClass, schema).Scan(&ids)
	return ids, err
}

// Runs returns up to n run records, newest first. A record still
// "running" whose process no longer holds the run's lock reads "killed",
// with the usage its committed results recorded.
func (db *DB) Runs(n int) ([]pipeline.RunSummary, error) {
	var out []pipeline.RunSummary
	err := db.snapshot(db.ctx, func(tx pgx.Tx) error {
		rows, _ := tx.Query(db.ctx, `SELECT run_id, summary, `+runAliveSQL("$2", "$3")+`
			FROM run ORDER BY run_id DESC LIMIT $1`, n, runLockClass, db.schema)
		var id string
		var raw []byte
		var alive bool
		type rec struct {
			r     pipeline.RunSummary
			alive bool
		}
		var recs []rec
		if _, err := pgx.ForEachRow(rows, []any{&id, &raw, &alive}, func() error {
			var r pipeline.RunSummary
			if err := json.Unmarshal(raw, &r); err != nil {
				return fmt.Errorf("run %q: %w", id, err)
			}
			recs = append(recs, rec{r, alive})
			return nil
		}); err != nil {
			return err
		}
		for _, x := range recs {
			if x.r.Status == runRunning && !x.alive {
				if err := db.killedRun(tx, &x.r); err != nil {
					return err
				}
			}
			out = append(out, x.r)
		}
		return nil
	})
	return out, err
}

// killedRun rewrites (in what Runs returns) a run whose process is gone:
// status killed, ended at its last sample (else its start), and the
// usage its committed results recorded.
func (db *DB) killedRun(tx pgx.Tx, r *pipeline.RunSummary) error {
	r.Status = RunKilled
	r.Message = "the process stopped without saving this run's end (killed, crashed or disconnected); its figures are what its committed results recorded"
	r.Ended = r.Started
	samples, err := db.samples(tx, r.ID)
	if err != nil {
		return err
	}
	for _, s := range samples {
		if s.At.After(r.Ended) {
			r.Ended = s.At
		}
	}
	usage, err := db.usage(db.ctx, tx, r.ID)
	if err != nil {
		return err
	}
	for stage, u := range usage {
		if r.Stages == nil {
			r.Stages = map[string]*pipeline.StageStats{}
		}
		if r.Stages[stage] == nil {
			r.Stages[stage] = &pipeline.StageStats{}
		}
		r.Stages[stage].Usage = u
	}
	return nil
}

// AppendSamples adds samples to a run's series.
func (db *DB) AppendSamples(runID string, s []pipeline.Sample) error {
	if len(s) == 0 {
		return nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = db.pool.Exec(db.ctx, `INSERT INTO sample (run_id, samples) VALUES ($1, $2)`, runID, b)
	return err
}

// Samples returns a run's series in time order.
func (db *DB) Samples(runID string) ([]pipeline.Sample, error) {
	return db.samples(db.pool, runID)
}

func (db *DB) samples(q queryer, runID string) ([]pipeline.Sample, error) {
	rows, _ := q.Query(db.ctx, `SELECT samples FROM sample WHERE run_id = $1 ORDER BY id`, runID)
	var out []pipeline.Sample
	var raw []byte
	_, err := pgx.ForEachRow(rows, []any{&raw}, func() error {
		var s []pipeline.Sample
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("samples of run %s: %w", runID, err)
		}
		out = append(out, s...)
		return nil
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out, err
}
