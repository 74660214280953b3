package pipeline

import (
	"context"
	"fmt"
	"time"
)

// queueCounter is what a fleet dispatcher asks the store to know that no
// worker anywhere still holds or will produce work for its stage: the
// entries queued at the given stages, in every process, leased or not.
// A store without it is asked for its Counts, which may count everything
// it holds (a whole table scan on PostgreSQL) on every look.
type queueCounter interface {
	CountQueued(ctx context.Context, stages []string) (int, error)
}

// counter is the fallback of queueCounter.
type counter interface {
	Counts() (Counts, error)
}

// endPoll is the first wait of a dispatcher whose upstream has ended but
// whose stage still has entries in other hands: they are usually
// committed within milliseconds, so it looks again after endPoll, then
// after twice as long each time, up to Poll (an entry held by a worker
// that died comes back only when its lease ends).
const endPoll = 10 * time.Millisecond

// dispatchClaims is dispatch for a Store that implements Claimer: it
// claims entries of stage i with a lease, at most a pool's worth at a
// time (so an idle worker elsewhere finds work; more for a stage whose
// calls are quick, see claimSize), and hands them to the workers. Other
// processes add to the queue too, so an empty claim is no sign of the
// end: the stage ends when this process's upstream stage has ended and
// the store holds no entry at this stage or before it (leased by anyone
// or not), or at once when a stage of this process has parked. Meanwhile
// it polls every Poll (from endPoll up, once upstream has ended). An
// entry claimed more than MaxClaims times (its workers died or lost
// their leases each time: it may be what kills them) is dead-lettered.
func (r *Runner) dispatchClaims(ctx context.Context, i int, upstream <-chan struct{}, work chan<- Queued, book *leaseBook) {
	sc := &r.Stages[i]
	name := sc.Stage.Name()
	c := r.counters[i]
	clock := r.clock()
	upstreamDone := false
	var failingSince time.Time
	var roundTrip time.Duration // of the last claim
	wait := endPoll             // the next wait for the end of the stage
	for {
		if ctx.Err() != nil {
			return
		}
		sent := clock.Now()
		// A database that hangs fails the claim rather than the worker.
		claimCtx, cancel := context.WithTimeout(ctx, r.Lease)
		claims, err := book.claimer.Claim(claimCtx, name, r.claimSize(i, roundTrip), r.Lease)
		cancel()
		roundTrip = clock.Now().Sub(sent)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// The database may come back: keep trying until a lease
			// would have ended (by then every call in flight has been
			// canceled), then stop the run, resumable: what this
			// process held returns to the queue as its leases end.
			if failingSince.IsZero() {
				failingSince = sent
			}
			if clock.Now().Sub(failingSince) >= r.Lease {
				r.stopFleet(fmt.Sprintf("could not claim work of %s for %s (last: %v): nothing is lost; run again once the database is back", name, r.Lease, err))
				return
			}
			r.log().Warn("could not claim work; trying again", "stage", name, "err", err)
			if !sleep(ctx, clock, r.Poll) {
				return
			}
			continue
		}
		failingSince = time.Time{}
		book.add(claims, sent)
		for j, q := range claims {
			if q.Attempt > int64(r.MaxClaims) {
				book.sent(q.Seq)
				now := clock.Now()
				r.send(i, Transition{Stage: name, ID: q.Item.ID, Seq: q.Seq, Outcome: DeadLettered, Dead: DeadLetter{
					Class: ClassPermanent, Attempts: int(q.Attempt), First: now, Last: now,
					Message: fmt.Sprintf("claimed %d times and never finished: the workers holding it died or lost their lease each time (the item may be what crashes them); inspect it with `sawtooth dlq show`, then `sawtooth retry --stage %s`", q.Attempt, name),
				}})
				continue
			}
			select {
			case work <- q.Queued:
			case <-ctx.Done():
				book.giveBack(claims[j:])
				return
			}
		}
		if len(claims) > 0 {
			wait = endPoll
			continue
		}
		if upstreamDone && r.parked() != "" {
			// This process stopped taking work upstream (a parked
			// stage): it finishes what it has, not other workers' work.
			return
		}
		if upstreamDone {
			left, err := r.unfinished(i)
			if err != nil {
				r.fail(fmt.Errorf("count the queues up to %s: %w", name, err))
				return
			}
			if left == 0 {
				return
			}
		}
		poll := r.Poll
		if upstreamDone {
			poll, wait = min(wait, r.Poll), min(2*wait, r.Poll)
		}
		t := clock.NewTimer(poll)
		select {
		case <-c.notify:
		case <-upstream:
			upstreamDone, upstream = true, nil
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return
		}
		t.Stop()
	}
}

// stopFleet stops a fleet worker's run as resumable (ErrStopped, exit 3)
// when its database fails: nothing it held is lost, its leases end and
// any worker takes the items again.
func (r *Runner) stopFleet(msg string) {
	r.park(msg)
	r.abort()
}

// unfinished counts the entries queued at stage i or before it, in every
// process. A store that cannot count is taken to have none left (one
// process: its own upstream has ended and its claim came back empty).
func (r *Runner) unfinished(i int) (int, error) {
	upto := map[string]bool{}
	names := make([]string, 0, i+1)
	for _, sc := range r.Stages[:i+1] {
		upto[sc.Stage.Name()] = true
		names = append(names, sc.Stage.Name())
	}
	if qc, ok := r.Store.(queueCounter); ok {
		// A database that hangs fails the count rather than the worker.
		ctx, cancel := context.WithTimeout(context.Background(), r.Lease)
		defer cancel()
		return qc.CountQueued(ctx, names)
	}
	cs, ok := r.Store.(counter)
	if !ok {
		return 0, nil
	}
	counts, err := cs.Counts()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range counts.Stages {
		if upto[s.Stage] {
			n += s.Queued
		}
	}
	return n, nil
}

// claimSize is how many entries stage i claims next, roundTrip being how
// long the last claim took. A pool's worth (Workers) is the floor: what
// the workers can start at once, so that entries do not wait here while
// an idle worker elsewhere finds none. But a stage whose calls are
// quicker than a claim's round trip (sanitize, aggregate: microseconds
// against a database round trip and a durable commit) would then spend
// most of its time waiting on claims, and pay a commit for every few
// entries: it claims what its workers get through in one round trip
// (Workers x round trip / mean call), up to DefaultFetch, so that the
// next claim comes back as they finish this one. Entries claimed so are
// all started within about a round trip: no other worker would have
// started them sooner.
func (r *Runner) claimSize(i int, roundTrip time.Duration) int {
	sc := &r.Stages[i]
	floor := min(sc.Workers, DefaultFetch)
	c := r.counters[i]
	calls := c.calls.Load()
	if calls == 0 || roundTrip <= 0 {
		return floor
	}
	call := c.callTime.Load() / calls
	if call <= 0 {
		return DefaultFetch
	}
	n := int64(sc.Workers) * int64(roundTrip) / call
	return int(max(int64(floor), min(n, DefaultFetch)))
}
