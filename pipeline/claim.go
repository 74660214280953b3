package pipeline

import (
	"context"
	"time"
)

// Claim is one queue entry leased to one worker: no other worker can
// claim it until the lease ends, and Attempt is its fencing token.
type Claim struct {
	Queued
	// Attempt counts the claims of this entry, this one included. Each
	// claim raises it, so a worker whose lease ended and whose entry was
	// claimed again holds a stale token: its commit is refused. It also
	// counts workers that died holding the entry: a runner dead-letters
	// an entry whose Attempt passes its budget (an item that crashes
	// every worker that takes it).
	Attempt int64
}

// FencedTransition is a Transition of a claimed entry, carrying the
// claim's Attempt.
type FencedTransition struct {
	Transition
	Attempt int64
}

// Claimer is what a runner uses, when its Store has it, to share queues
// with other processes (many workers on many hosts draining one
// pipeline). Instead of walking a queue with Queued, a worker claims
// entries with a lease, renews the lease while it works on them (about
// every lease/4), and commits each result fenced by its claim: a worker
// that lost its lease (paused, partitioned, too slow) cannot commit, so
// an item is never applied twice, and a crashed worker's entries become
// claimable when their leases end. No transaction is held between calls.
//
// Only the store's clock (the database's) sets lease ends. A worker that
// cannot renew must treat its lease as gone at renew sent + lease - a
// safety margin, on its own monotonic clock, and cancel its calls.
//
// A single-process store grants claims trivially: a claim is an entry
// not already claimed by this process, a lease never ends, and a fenced
// commit is a Commit. Implementations must be safe for concurrent use.
type Claimer interface {
	// Claim leases up to max entries of stage's queue that no live lease
	// holds, oldest first (approximately: concurrent claims skip each
	// other's rows), each with its record and earlier outputs, for lease
	// (> 0) from now on the store's clock.
	Claim(ctx context.Context, stage string, max int, lease time.Duration) ([]Claim, error)
	// Renew extends the leases of claims (all of stage) to lease from
	// now. It returns the sequences of the claims it could not renew
	// because the entry is gone (committed, moved) or was claimed again:
	// their calls should be cancelled and their results dropped. An
	// expired lease nobody claimed since is renewed.
	Renew(ctx context.Context, stage string, claims []Claim, lease time.Duration) (lost []uint64, err error)
	// Release ends the leases of claims this worker will not finish
	// (shutdown), so other workers can claim them at once.
	Release(ctx context.Context, stage string, claims []Claim) error
	// CommitFenced applies ts in one durable transaction, as
	// Store.Commit does, except that a transition whose entry has been
	// claimed again since its Attempt is not applied. It returns the
	// sequences of the transitions it did not apply (stale or fenced
	// off); their usage is not recorded.
	CommitFenced(ctx context.Context, ts []FencedTransition) (rejected []uint64, err error)
}
