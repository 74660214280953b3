package pipeline

import (
	"context"
	"fmt"
	"sync"
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
// that died comes back when its session or lease ends).
const endPoll = 10 * time.Millisecond

// dispatchClaims is dispatch for a Store that implements Claimer: it
// claims entries of stage i with a lease, at most a pool's worth at a
// time (so an idle worker elsewhere finds work; more for a stage whose
// calls are quick, see claimSize), and hands them to the workers. Other
// processes add to the queue too, so an empty claim is no sign of the
// end: the stage ends when this process's upstream stage has ended and
// the store holds no entry at this stage or before it (leased by anyone
// or not), or at once when a stage of this process has parked, or the
// store is given up (see StoreLostError). Meanwhile it polls every Poll
// (from endPoll up, once upstream has ended). An entry claimed more than
// MaxClaims times (its workers died or lost their leases each time: it
// may be what kills them) is dead-lettered.
func (r *Runner) dispatchClaims(ctx context.Context, i int, upstream <-chan struct{}, work chan<- Claim, book *leaseBook) {
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
			if !r.storeFailing(&failingSince, sent, "claim work of "+name, err) || !sleep(ctx, clock, r.Poll) {
				return
			}
			continue
		}
		failingSince = time.Time{}
		r.storeGate.answered()
		book.add(claims, sent)
		if !r.handOut(ctx, i, claims, work, book) {
			return
		}
		if len(claims) > 0 {
			wait = endPoll
			continue
		}
		if upstreamDone && r.parked() != nil {
			// This process stopped taking work upstream (a parked
			// stage): it finishes what it has, not other workers' work.
			return
		}
		if upstreamDone && !r.workLeft(i, &failingSince) {
			return
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

// handOut gives the claimed items to the stage's workers, dead-lettering
// those claimed more than MaxClaims times, and reports false when ctx
// ended first (what was not handed out is given back).
func (r *Runner) handOut(ctx context.Context, i int, claims []Claim, work chan<- Claim, book *leaseBook) bool {
	name := r.Stages[i].Stage.Name()
	for j, q := range claims {
		if q.Attempt > int64(r.MaxClaims) {
			now := r.clock().Now()
			r.send(i, Transition{Stage: name, ID: q.Item.ID, Seq: q.Seq, Outcome: DeadLettered, Dead: DeadLetter{
				Class: ClassPermanent, Cause: CauseClaimsExhausted, Attempts: int(q.Attempt), First: now, Last: now,
				Message: fmt.Sprintf("claimed %d times and never finished: the workers holding it died or lost their lease each time (the item may be what crashes them)", q.Attempt),
			}}, q.Attempt)
			continue
		}
		select {
		case work <- q:
		case <-ctx.Done():
			book.giveBack(claims[j:])
			return false
		}
	}
	return true
}

// workLeft reports whether stage i or a stage before it still has work
// once nothing is left upstream in this process: false when every queue
// up to it is empty, or when the store has failed for too long to ask.
// A store that cannot answer now counts as work left: poll again.
func (r *Runner) workLeft(i int, failingSince *time.Time) bool {
	asked := r.clock().Now()
	left, err := r.unfinished(i)
	if err != nil {
		return r.storeFailing(failingSince, asked, "count the queues up to "+r.Stages[i].Stage.Name(), err)
	}
	r.storeGate.answered()
	return left != 0
}

// storeFailing records a failed request to the store, sent at sent, in
// a run of failures that began at *since (zero: this one begins it),
// and reports whether to try again: a transient failure (a server
// restarting, a connection reset) is retried for StoreRetry; past that
// the worker gives the store up (loseStore) and the caller stops.
func (r *Runner) storeFailing(since *time.Time, sent time.Time, what string, err error) bool {
	r.storeGate.failed()
	if since.IsZero() {
		*since = sent
	}
	failing := r.clock().Now().Sub(*since)
	if failing < r.StoreRetry {
		r.log().Warn("the store failed; trying again", "op", what, "failing for", failing.Round(time.Millisecond), "err", err)
		return true
	}
	r.loseStore(&StoreLostError{Op: what, For: failing, Err: err})
	return false
}

// storeGate holds a fleet worker's new calls while its store fails: an
// answer bought then could not be committed, and the longer the store
// stays away, the likelier its lease ends and another worker pays for
// the item again. The zero value is a store that answers.
type storeGate struct {
	mu sync.Mutex
	// back is closed when the store answers again; nil while it does.
	back chan struct{}
}

// failed records a request to the store that failed.
func (g *storeGate) failed() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.back == nil {
		g.back = make(chan struct{})
	}
}

// answered records a request to the store that succeeded: held calls go.
func (g *storeGate) answered() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.back != nil {
		close(g.back)
		g.back = nil
	}
}

// down returns a channel closed when the store answers again, or nil
// while it answers (a nil channel never fires in a select).
func (g *storeGate) down() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.back
}

// waitStore returns once the store answers (at once while it does), or
// false when ctx or call ends first (the run stops, the lease is lost).
func (r *Runner) waitStore(ctx, call context.Context) bool {
	back := r.storeGate.down()
	if back == nil {
		return true
	}
	select {
	case <-back:
		return true
	case <-ctx.Done():
	case <-call.Done():
	}
	return false
}

// StoreLostError is Runner.Run's error when a fleet worker (a Store with
// Claimer) gave its store up: a claim, count or commit kept failing for
// StoreRetry. The worker stopped claiming, let its calls in flight run
// until they finished or their leases ended, kept trying to commit its
// answers until their leases ended (as the database has them: its last
// renewal + the lease) and dropped what was still uncommitted then:
// those items return to the queue, for any worker. It is a resumable stop: errors.Is(err,
// ErrStopped) holds.
type StoreLostError struct {
	// Op is what failed ("claim work of classify", "commit 3 results").
	Op string
	// For is how long it had failed when the worker gave up.
	For time.Duration
	// Err is the last failure.
	Err error
	// LeasesLost is the leases this worker gave up in the run (their
	// calls canceled, or their results not committed): their items are
	// called again by whoever claims them next.
	LeasesLost int64
}

// Error says what failed, for how long, and what became of the work.
func (e *StoreLostError) Error() string {
	return fmt.Sprintf("could not %s for %s (last error: %v); stopped claiming, and %d leases were given up at their end: their items return to the queue, nothing is lost",
		e.Op, e.For.Round(100*time.Millisecond), e.Err, e.LeasesLost)
}

// Unwrap returns the last failure.
func (e *StoreLostError) Unwrap() error { return e.Err }

// Is makes a lost store a resumable stop: errors.Is(err, ErrStopped).
func (e *StoreLostError) Is(target error) bool { return target == ErrStopped }

// loseStore gives the store up, once: no more claims (the dispatchers
// stop) and no more renewals, so every lease this process holds ends
// within a lease. Calls in flight go on until they finish or their
// lease ends (the expiry watch cancels them), and the committer tries
// their results until then, never after.
func (r *Runner) loseStore(e *StoreLostError) {
	r.storeMu.Lock()
	first := r.storeLost == nil
	if first {
		r.storeLost = e
	}
	r.storeMu.Unlock()
	if first {
		r.log().Error("giving the store up: no more claims; calls in flight finish or are canceled at their lease end, answers are tried until their lease ends", "op", e.Op, "failing for", e.For.Round(time.Millisecond), "err", e.Err)
		r.stopClaims()
	}
}

// lostStore is the store given up on, nil while it is not.
func (r *Runner) lostStore() *StoreLostError {
	r.storeMu.Lock()
	defer r.storeMu.Unlock()
	return r.storeLost
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

// fleetCommitter is the committer of a fleet worker (a Store with
// Claimer). A commit that fails does not hold the committer in a retry
// loop: its answers are carried and tried again every second (at once
// when the store answers another request) with what arrived meanwhile,
// each until its lease ends as the database has it (the last renewal
// sent + Lease), never after: the database may hand the entry to another
// worker then. An answer whose lease is known lost (a renewal said
// another worker claimed the entry) is dropped at once. Commits failing
// for StoreRetry in a row give the store up.
func (r *Runner) fleetCommitter() {
	clock := r.clock()
	var (
		carried      []pending
		failingSince time.Time
		nextTry      time.Time // while commits fail: when to try again
	)
	in := r.commitCh
	for in != nil || len(carried) > 0 {
		var retry Timer
		var retryC <-chan time.Time
		var back <-chan struct{}
		if len(carried) > 0 && !nextTry.IsZero() {
			retry = clock.NewTimer(nextTry.Sub(clock.Now()))
			retryC = retry.C()
			back = r.storeGate.down()
		}
		select {
		case p, ok := <-in:
			if !ok {
				in = nil
				break
			}
			carried = append(carried, p)
		fill:
			for n := 1; n < r.BatchSize; n++ {
				select {
				case p, ok := <-in:
					if !ok {
						in = nil
						break fill
					}
					carried = append(carried, p)
				default:
					break fill
				}
			}
		case <-retryC:
		case <-back:
			nextTry = clock.Now()
		}
		if retry != nil {
			retry.Stop()
		}
		carried = r.dropLost(carried)
		// While commits fail, what arrives waits for the next try rather
		// than hammering the store.
		if len(carried) == 0 || (!nextTry.IsZero() && clock.Now().Before(nextTry)) {
			continue
		}
		sent := clock.Now()
		if err := r.commitFleet(carried); err != nil {
			r.storeFailing(&failingSince, sent, fmt.Sprintf("commit %d results", len(carried)), err)
			nextTry = sent.Add(time.Second)
			continue
		}
		r.storeGate.answered()
		failingSince, nextTry, carried = time.Time{}, time.Time{}, nil
	}
}

// dropLost settles, uncommitted, the answers in ps whose lease is gone
// (or whose claim was superseded before they were sent), and returns
// the others.
func (r *Runner) dropLost(ps []pending) []pending {
	kept := ps[:0]
	var dropped []pending
	for _, p := range ps {
		if p.stale {
			dropped = append(dropped, p)
		} else if _, ok := r.books[p.stage].holdEnd(p.t.Seq, p.attempt); ok {
			kept = append(kept, p)
		} else {
			dropped = append(dropped, p)
		}
	}
	if len(dropped) > 0 {
		r.log().Warn("answers dropped uncommitted: their leases ended while the store failed; their items return to the queue", "results", len(dropped))
		r.settle(dropped, false)
	}
	return kept
}

// commitFleet commits ps once, fenced, and settles them when it
// succeeds: the applied ones as committed, the fenced-off ones (another
// worker claimed the entry after this one's lease ended; not an error:
// that worker's result counts) as lost leases. The commit must land
// before the earliest lease of ps ends: it is canceled then.
func (r *Runner) commitFleet(ps []pending) error {
	deadline := r.clock().Now().Add(r.Lease)
	for _, p := range ps {
		if end, ok := r.books[p.stage].holdEnd(p.t.Seq, p.attempt); ok && end.Before(deadline) {
			deadline = end
		}
	}
	ts := make([]FencedTransition, len(ps))
	for j, p := range ps {
		ts[j] = FencedTransition{Transition: p.t, Attempt: p.attempt}
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline.Sub(r.clock().Now()))
	defer cancel()
	// The fleet's spend is read as the ledgers less this run's committed
	// spend (refreshFleetSpend), which must know when a commit may be
	// landing.
	cost := costOf(ps)
	r.purse.beginCommit(cost)
	rejected, err := r.Store.(Claimer).CommitFenced(ctx, ts)
	if err != nil {
		r.purse.endCommit(cost, 0)
		return err
	}
	fenced := make(map[uint64]bool, len(rejected))
	for _, s := range rejected {
		fenced[s] = true
	}
	var applied, dropped []pending
	for _, p := range ps {
		if fenced[p.t.Seq] {
			dropped = append(dropped, p)
		} else {
			applied = append(applied, p)
		}
	}
	r.purse.endCommit(cost, costOf(applied))
	for _, p := range dropped {
		r.books[p.stage].fenced(p.t.Seq, p.attempt)
	}
	r.settle(applied, true)
	r.settle(dropped, false)
	return nil
}

// claimSize is how many entries stage i claims next, roundTrip being how
// long the last claim took. A pool's worth (its workers now) is the floor: what
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
	c := r.counters[i]
	// The pool as it is now: a limited stage's grows with its limit.
	workers := int(c.workers.Load())
	if workers <= 0 {
		workers = r.Stages[i].Workers
	}
	floor := min(workers, DefaultFetch)
	calls := c.calls.Load()
	if calls == 0 || roundTrip <= 0 {
		return floor
	}
	call := c.callTime.Load() / calls
	if call <= 0 {
		return DefaultFetch
	}
	n := int64(workers) * int64(roundTrip) / call
	return int(max(int64(floor), min(n, DefaultFetch)))
}
