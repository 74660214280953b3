package batch

import (
	"context"
	"fmt"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// An item whose answers never commit (cut off or off the schema every
// time, a row error each time, results lost to kills) goes back to the
// queue and into the next job, paid each time: round after round, and on
// a store that workers share, by every worker's rounds. The store counts
// how many jobs were created holding each item at its stage
// (Store.BatchSends); past Config.MaxSends it goes to the stage's dead
// letters instead of into another job.

// sendsOf reads how many jobs asked for each item job num holds.
func (d *Driver) sendsOf(num uint64) (map[string]int, error) {
	sends, err := d.db.BatchSends(num)
	if err != nil {
		return nil, fmt.Errorf("%w: batch job %d: read how often its items were sent: %w", errStore, num, err)
	}
	return sends, nil
}

// sentOut is the dead letter of item it, sent in n jobs at the stage
// without an answer the run could commit; last is why the last one did
// not answer it (nil: no result for it).
func (d *Driver) sentOut(ctx context.Context, it pipeline.Item, n int, last error, now time.Time) pipeline.Transition {
	why, class := "no result for it", pipeline.ClassTransient
	if last != nil {
		why, class = last.Error(), pipeline.ClassOf(ctx, last)
	}
	return pipeline.Transition{Stage: d.stage.Name(), ID: it.ID, Outcome: pipeline.DeadLettered, Dead: pipeline.DeadLetter{
		Class: class, Cause: pipeline.CauseOf(last), Attempts: n, First: now.UTC(), Last: now.UTC(),
		Message: fmt.Sprintf("item %s: sent in %d batch jobs at %s without an answer the run could commit (the last: %s); not sent again, so it is not paid for again: requeue it to give it %d more, or run the stage online or in auto mode",
			it.ID, n, d.stage.Name(), why, d.cfg.MaxSends),
	}}
}
