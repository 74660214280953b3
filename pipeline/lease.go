package pipeline

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Defaults of a fleet runner (a Store that implements Claimer).
const (
	// DefaultLease is Runner.Lease's default: well above a call's p99
	// latency, so a lease ends for a dead or paused worker only.
	DefaultLease = 2 * time.Minute
	// DefaultMaxClaims is Runner.MaxClaims' default.
	DefaultMaxClaims = 10
	// DefaultPoll is Runner.Poll's default.
	DefaultPoll = time.Second
	// leaseMargin is how long before renew-sent + Lease a worker that
	// could not renew treats its lease as gone (at most Lease/4): the
	// database's clock decides, and the worker must stop first.
	leaseMargin = 10 * time.Second
)

// held is one claimed entry of this process.
type held struct {
	claim Claim
	// cancel cancels the entry's call (lease lost); nil until a worker
	// starts on the entry.
	cancel context.CancelFunc
	// validUntil is renew-sent (or claim-sent) + Lease - margin on the
	// runner's clock: past it, the lease is treated as gone for a call
	// (another worker may start one); an answer already bought is held
	// until the lease's end itself (see holdEnd).
	validUntil time.Time
	// sent: a transition is on its way to the committer.
	sent bool
	// lost: the lease is gone (not renewed, or expired unrenewed).
	lost bool
}

// leaseBook is one stage's claimed entries in this process: the
// dispatcher adds what it claims, the heartbeat renews the leases (and
// cancels the calls of those it loses), the committer forgets what it
// committed, and a worker gives back what it did not finish.
type leaseBook struct {
	r       *Runner
	stage   int
	name    string
	claimer Claimer
	mu      sync.Mutex
	held    map[uint64]*held
	// changed wakes the expiry watch when a lease with an earlier end
	// than it waits for arrives.
	changed chan struct{}
}

func newLeaseBook(r *Runner, i int, c Claimer) *leaseBook {
	return &leaseBook{r: r, stage: i, name: r.Stages[i].Stage.Name(), claimer: c,
		held: map[uint64]*held{}, changed: make(chan struct{}, 1)}
}

func (r *Runner) margin() time.Duration { return min(leaseMargin, r.Lease/4) }

// add books claims made with a request sent at sent. An entry this
// process claimed before and still holds was given up by the store
// meanwhile (its session was taken for dead): the old claim's call, if
// still running, is canceled and its lease counted lost, unless its
// answer is already on its way to the committer (its fenced commit
// decides then).
func (b *leaseBook) add(claims []Claim, sent time.Time) {
	b.mu.Lock()
	until := sent.Add(b.r.Lease - b.r.margin())
	for _, c := range claims {
		if old := b.held[c.Seq]; old != nil && old.claim.Attempt != c.Attempt && !old.sent && !old.lost {
			if old.cancel != nil {
				old.cancel()
			}
			b.lostSuperseded("the store gave the entry up and this worker claimed it again")
		}
		b.held[c.Seq] = &held{claim: c, validUntil: until}
	}
	b.mu.Unlock()
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

// start returns the context of the call for entry seq's claim at
// attempt, canceled when its lease is lost; false when it already is (the
// entry waited for a worker longer than its lease, or was claimed again
// since): no call is made.
func (b *leaseBook) start(seq uint64, attempt int64, parent context.Context) (context.Context, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.held[seq]
	if h == nil || h.lost || h.claim.Attempt != attempt {
		return nil, false
	}
	ctx, cancel := context.WithCancel(parent)
	h.cancel = cancel
	return ctx, true
}

// sent marks the transition of entry seq's claim at attempt as on its
// way to the committer. A transition of an older claim (the entry was
// claimed again since) leaves the new claim's entry alone, and false is
// returned for it, as for an entry no longer held: its lease's loss was
// counted when the book learned of it, and it is dropped uncommitted.
func (b *leaseBook) sent(seq uint64, attempt int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.held[seq]
	if h == nil || h.claim.Attempt != attempt {
		return false
	}
	h.sent = true
	return true
}

// finished is a worker done with entry seq's claim at attempt: an entry
// whose result was not sent (the run is stopping, the stage parked, the
// lease was lost) is forgotten, and its lease released so another worker
// can take it now. An entry claimed again since is the new claim's, and
// kept.
func (b *leaseBook) finished(seq uint64, attempt int64) {
	b.mu.Lock()
	h := b.held[seq]
	if h == nil || h.sent || h.claim.Attempt != attempt {
		b.mu.Unlock()
		return
	}
	delete(b.held, seq)
	if h.cancel != nil {
		h.cancel()
	}
	b.mu.Unlock()
	if !h.lost {
		b.release([]Claim{h.claim})
	}
}

// giveBack releases claims the dispatcher could not hand out.
func (b *leaseBook) giveBack(claims []Claim) {
	b.mu.Lock()
	var rel []Claim
	for _, c := range claims {
		if h := b.held[c.Seq]; h != nil && !h.sent {
			delete(b.held, c.Seq)
			if !h.lost {
				rel = append(rel, c)
			}
		}
	}
	b.mu.Unlock()
	b.release(rel)
}

func (b *leaseBook) release(claims []Claim) {
	if len(claims) == 0 || b.r.lostStore() != nil {
		return // given up: the leases end on their own
	}
	// A store that hangs must not hold the worker: the leases end anyway.
	ctx, cancel := context.WithTimeout(context.Background(), b.r.Lease/4)
	defer cancel()
	if err := b.claimer.Release(ctx, b.name, claims); err != nil {
		// Not lost: the leases end on their own.
		b.r.log().Warn("could not release leases; they end on their own", "stage", b.name, "entries", len(claims), "err", err)
	}
}

// settled forgets the entry of a transition (of the claim at attempt)
// that left the committer. An entry this process claimed again since is
// the new claim's, and kept.
func (b *leaseBook) settled(seq uint64, attempt int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.held[seq]; h != nil && h.claim.Attempt == attempt {
		delete(b.held, seq)
		if h.cancel != nil {
			h.cancel()
		}
	}
}

// fenced records that entry seq's transition, of the claim at attempt,
// was fenced off at commit: its lease was lost (counted once, if the
// heartbeat had not seen it). When this process claimed the entry again
// since (its session was taken for dead meanwhile), the new claim is
// not lost: only the old one is counted.
func (b *leaseBook) fenced(seq uint64, attempt int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	const why = "fenced off at commit: another worker claimed the entry"
	if h := b.held[seq]; h != nil && h.claim.Attempt != attempt {
		b.lostSuperseded("fenced off at commit: this worker claimed the entry again since")
		return
	}
	b.lose([]uint64{seq}, why)
}

// lostSuperseded counts the lease of a claim this process made again
// since (the caller holds mu): the book holds the new claim.
func (b *leaseBook) lostSuperseded(why string) {
	b.r.counters[b.stage].leasesLost.Add(1)
	b.r.log().Warn("leases lost: their calls are canceled and their items left to other workers", "stage", b.name, "entries", 1, "why", why)
}

// lose marks the leases of seqs as gone (the caller holds mu): their
// calls are canceled and counted once.
func (b *leaseBook) lose(seqs []uint64, why string) {
	n := 0
	for _, s := range seqs {
		h := b.held[s]
		if h == nil || h.lost {
			continue
		}
		h.lost = true
		n++
		if h.cancel != nil {
			h.cancel()
		}
	}
	if n > 0 {
		b.r.counters[b.stage].leasesLost.Add(int64(n))
		b.r.log().Warn("leases lost: their calls are canceled and their items left to other workers", "stage", b.name, "entries", n, "why", why)
	}
}

// loseUnsent marks as gone every lease whose answer is not on its way to
// the committer (calls canceled), or with started false only those whose
// call has not started: the worker's session ended or may have, so other
// workers may claim the entries now. An answer already sent is left to
// its fenced commit.
func (b *leaseBook) loseUnsent(started bool, why string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var seqs []uint64
	for s, h := range b.held {
		if !h.sent && (started || h.cancel == nil) {
			seqs = append(seqs, s)
		}
	}
	b.lose(seqs, why)
}

// holdEnd returns when the lease of entry seq's claim at attempt ends
// as the database has it (renew sent + Lease: no margin, since an
// answer's commit is fenced and a call's start is not at stake), and
// false when the lease is gone: lost, past that end (then it is marked
// lost now, and counted), or superseded by a claim this process made
// again since (counted: the store gave the old claim up).
func (b *leaseBook) holdEnd(seq uint64, attempt int64) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.held[seq]
	if h == nil || h.lost {
		return time.Time{}, false
	}
	if h.claim.Attempt != attempt {
		b.lostSuperseded("claimed again by this worker since")
		return time.Time{}, false
	}
	end := h.validUntil.Add(b.r.margin())
	if !end.After(b.r.clock().Now()) {
		b.lose([]uint64{seq}, fmt.Sprintf("not renewed for %s", b.r.Lease))
		return time.Time{}, false
	}
	return end, true
}

// live returns the claims whose leases are still held.
func (b *leaseBook) live() []Claim {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Claim, 0, len(b.held))
	for _, h := range b.held {
		if !h.lost {
			out = append(out, h.claim)
		}
	}
	return out
}

// heartbeat renews every live lease each Lease/4 until stop closes, or
// the store is given up.
// Renew's answer moves each renewed lease's end to renew-sent + Lease -
// margin; the entries it reports lost have their calls canceled. A
// failed renewal is tried again at the next beat; the expiry watch
// cancels what outlives its last renewal.
func (b *leaseBook) heartbeat(stop <-chan struct{}) {
	clock := b.r.clock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()
	for b.beat(ctx, clock) {
		if b.r.lostStore() != nil {
			// Given up: the leases must end within a lease, so that
			// the worker is done by then.
			return
		}
		claims := b.live()
		if len(claims) == 0 {
			continue
		}
		sentAt := clock.Now()
		renewCtx, cancelRenew := context.WithTimeout(ctx, b.r.Lease/4)
		lost, err := b.claimer.Renew(renewCtx, b.name, claims, b.r.Lease)
		cancelRenew()
		if err != nil {
			if ctx.Err() == nil {
				b.r.storeGate.failed()
				b.r.log().Warn("could not renew leases; trying again", "stage", b.name, "entries", len(claims), "err", err)
			}
			continue
		}
		b.r.storeGate.answered()
		b.renewed(claims, lost, sentAt.Add(b.r.Lease-b.r.margin()))
	}
}

// renewed applies a renewal's answer: the leases of claims it did not
// report lost are valid until until. An entry reported lost whose answer
// is already on its way to the committer is left to that commit: the
// store reports it lost also when the commit itself removed it since the
// renewal read it, and a commit fenced off by another worker's claim
// counts the loss then. (Counting it here too overstated the leases
// lost of every long fleet run by thousands at a million items.) An
// entry this process claimed again since the renewal was sent is the
// new claim's: the answer, about the old one, leaves it alone.
func (b *leaseBook) renewed(claims []Claim, lost []uint64, until time.Time) {
	gone := make(map[uint64]bool, len(lost))
	for _, s := range lost {
		gone[s] = true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var taken []uint64
	for _, c := range claims {
		h := b.held[c.Seq]
		if h == nil || h.claim.Attempt != c.Attempt {
			// Claimed again since the renewal was sent: its answer is
			// about the old claim.
			continue
		}
		if !gone[c.Seq] {
			h.validUntil = until
		} else if !h.sent {
			taken = append(taken, c.Seq)
		}
	}
	b.lose(taken, "claimed again by another worker")
}

// beat waits for the next heartbeat: a quarter lease, or less when the
// store answers again after failing, so that leases renewed late (the
// database came back) are renewed before the calls held meanwhile start
// and before the database could hand them to another worker. False when
// ctx ends.
func (b *leaseBook) beat(ctx context.Context, clock Clock) bool {
	t := clock.NewTimer(b.r.Lease / 4)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-b.r.storeGate.down():
		return ctx.Err() == nil
	case <-ctx.Done():
		return false
	}
}

// expiry cancels the calls of leases whose end (as this process must
// assume it, not having renewed them) has passed, until stop closes.
func (b *leaseBook) expiry(stop <-chan struct{}) {
	clock := b.r.clock()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()
	for {
		now := clock.Now()
		wait := b.r.Lease / 4
		b.mu.Lock()
		var expired []uint64
		for s, h := range b.held {
			if h.lost || h.sent {
				// An answer on its way to the committer has no call to
				// cancel: its fenced commit decides.
				continue
			}
			if !h.validUntil.After(now) {
				expired = append(expired, s)
			} else if d := h.validUntil.Sub(now); d < wait {
				wait = d
			}
		}
		b.lose(expired, fmt.Sprintf("not renewed for %s", b.r.Lease-b.r.margin()))
		b.mu.Unlock()
		t := clock.NewTimer(wait)
		select {
		case <-t.C():
		case <-b.changed:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// releaseAll releases what the book still holds (the stage is finished: only
// entries claimed and never started can remain).
func (b *leaseBook) releaseAll() {
	b.mu.Lock()
	var rel []Claim
	for s, h := range b.held {
		if !h.lost && !h.sent {
			rel = append(rel, h.claim)
		}
		delete(b.held, s)
	}
	b.mu.Unlock()
	b.release(rel)
}
