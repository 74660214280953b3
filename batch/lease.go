package batch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// DefaultLease is Config.Lease's default.
const DefaultLease = 2 * time.Minute

// Leaser is a Store that several workers share (PostgreSQL). Each open
// job is driven by one worker at a time, the one holding its lease:
// ReserveBatch gives a new job to the worker that reserved it, and the
// store refuses a change to a job another worker drives with
// pipeline.ErrBatchHeld (MarkBatchCreate also one this worker's lease no
// longer covers, so two workers never both send create for one intent).
type Leaser interface {
	// HoldBatches renews this worker's lease on its open jobs of stage,
	// takes those nobody holds (their driver's lease ended) and returns
	// every job it holds, oldest first, and how many open jobs of stage
	// other workers hold. Jobs reserved later get lease too.
	HoldBatches(stage string, lease time.Duration) (held []pipeline.BatchJob, others int, err error)
}

// hold renews the leases on the driver's jobs when due (or at once when
// force), starts watching the jobs it took over from a worker whose lease
// ended, and stops watching those another worker took. A Store that is
// not a Leaser belongs to this driver alone: nothing to do.
func (d *Driver) hold(ctx context.Context, now time.Time, force bool) error {
	l, ok := d.db.(Leaser)
	if !ok || !force && now.Before(d.holdAt) {
		return nil
	}
	held, others, err := l.HoldBatches(d.stage.Name(), d.cfg.Lease)
	if err != nil {
		return fmt.Errorf("%w: %w", errStore, err)
	}
	d.holdAt, d.others = now.Add(d.cfg.Lease/3), others
	mine := make(map[uint64]bool, len(held))
	took := false
	for _, j := range held {
		mine[j.Num] = true
		if t, ok := d.jobs[j.Num]; ok {
			t.job = j
			continue
		}
		if err := d.track(ctx, j); err != nil {
			return err
		}
		took = true
		d.cfg.Log.Info("batch: job taken over from a worker whose lease ended", "job", j.Num, "name", j.Name, "display_name", j.DisplayName)
	}
	for num := range d.jobs {
		if !mine[num] {
			delete(d.jobs, num)
			d.answered(num)
			d.release(num)
			d.cfg.Log.Info("batch: job left to the worker that took it over", "job", num)
		}
	}
	if took {
		if err := d.relearnAsked(); err != nil {
			return fmt.Errorf("%w: %w", errStore, err)
		}
	}
	return nil
}

// track starts watching open job j: an intent without a name may exist
// at the API and is looked up before anything is created.
func (d *Driver) track(ctx context.Context, j pipeline.BatchJob) error {
	if err := d.dial(ctx, j.Endpoint); err != nil {
		return err
	}
	d.jobs[j.Num] = &tracked{job: j, interval: d.cfg.Poll, unsure: j.Name == ""}
	return nil
}

// heldElsewhere reports whether err says a job is driven by another
// worker: the driver holds again, and leaves the job if it lost it.
func heldElsewhere(err error) bool { return errors.Is(err, pipeline.ErrBatchHeld) }
