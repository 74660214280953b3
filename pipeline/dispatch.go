package pipeline

import (
	"context"
	"fmt"
)

// dispatch walks stage i's queue forward in Seq order and hands each entry
// to a worker. It reads the store again when its cursor runs dry, waits
// for the upstream stage to commit more (notify) or finish, and returns
// when the queue is dry after upstream finished, or ctx is done.
func (r *Runner) dispatch(ctx context.Context, i int, upstream <-chan struct{}, work chan<- Claim) {
	name := r.Stages[i].Stage.Name()
	c := r.counters[i]
	var cursor uint64
	upstreamDone := false
	for {
		if ctx.Err() != nil {
			return
		}
		batch, err := r.Store.Queued(name, cursor, DefaultFetch)
		if err != nil {
			r.fail(fmt.Errorf("read queue %s: %w", name, err))
			return
		}
		for _, q := range batch {
			select {
			case work <- Claim{Queued: q}:
				cursor = q.Seq
			case <-ctx.Done():
				return
			}
		}
		if len(batch) > 0 {
			continue
		}
		if upstreamDone {
			return
		}
		select {
		case <-c.notify:
		case <-upstream:
			upstreamDone = true
		case <-ctx.Done():
			return
		}
	}
}
