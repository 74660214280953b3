package pipeline_test

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// claimStore is memStore with leases, shared by several runners (the
// workers of a fleet) through claimView: a lease ends on the store's
// clock, a claim raises the entry's attempt, and a fenced commit applies
// only at the entry's current attempt, as store/postgres does.
type claimStore struct {
	*memStore
	now     func() time.Time
	mu      sync.Mutex
	attempt map[uint64]int64     // seq -> claims so far
	until   map[uint64]time.Time // seq -> lease end
	owner   map[uint64]string
	fenced  int // transitions refused by CommitFenced
	// late counts transitions sent to CommitFenced at or after their
	// lease's end on the store's clock, reachable or not.
	late int
	// failedClaims holds the instants of the claims refused while a view
	// was cut off.
	failedClaims []time.Time
}

func newClaimStore(stages []string, n int, now func() time.Time) *claimStore {
	return &claimStore{memStore: newMemStore(stages, n), now: now,
		attempt: map[uint64]int64{}, until: map[uint64]time.Time{}, owner: map[uint64]string{}}
}

// claimView is one worker's handle on a claimStore. cutOff, when set
// and true, makes Claim, Renew, Release and CommitFenced fail (the
// worker is cut off from the database). roundTrip, when set, is how long
// each Claim takes on the clock sleep waits on; asked records the max of
// every Claim.
type claimView struct {
	*claimStore
	name      string
	cutOff    func() bool
	roundTrip time.Duration
	sleep     func(context.Context, time.Duration) error
	askedMu   sync.Mutex
	asked     []int
}

var _ pipeline.Claimer = (*claimView)(nil)

func (s *claimStore) view(name string) *claimView { return &claimView{claimStore: s, name: name} }

// Counts counts the queues, leased entries included.
func (s *claimStore) Counts() (pipeline.Counts, error) {
	s.memStore.mu.Lock()
	defer s.memStore.mu.Unlock()
	var c pipeline.Counts
	for _, st := range s.stages {
		c.Stages = append(c.Stages, pipeline.StageCounts{Stage: st, Queued: len(s.todo[st])})
	}
	return c, nil
}

func (v *claimView) Claim(ctx context.Context, stage string, max int, lease time.Duration) ([]pipeline.Claim, error) {
	if v.cutOff != nil && v.cutOff() {
		v.mu.Lock()
		v.failedClaims = append(v.failedClaims, v.now())
		v.mu.Unlock()
		return nil, errCutOff
	}
	v.askedMu.Lock()
	v.asked = append(v.asked, max)
	v.askedMu.Unlock()
	if v.roundTrip > 0 {
		if err := v.sleep(ctx, v.roundTrip); err != nil {
			return nil, err
		}
	}
	v.memStore.mu.Lock()
	var seqs []uint64
	for q := range v.todo[stage] {
		seqs = append(seqs, q)
	}
	v.memStore.mu.Unlock()
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	all, _ := v.Queued(stage, 0, len(seqs)+1)
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.now()
	var out []pipeline.Claim
	for _, q := range all {
		if len(out) == max {
			break
		}
		if v.until[q.Seq].After(now) {
			continue
		}
		v.attempt[q.Seq]++
		v.until[q.Seq], v.owner[q.Seq] = now.Add(lease), v.name
		out = append(out, pipeline.Claim{Queued: q, Attempt: v.attempt[q.Seq]})
	}
	return out, nil
}

func (v *claimView) Renew(_ context.Context, _ string, claims []pipeline.Claim, lease time.Duration) ([]uint64, error) {
	if v.cutOff != nil && v.cutOff() {
		return nil, errCutOff
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	var lost []uint64
	for _, c := range claims {
		if v.attempt[c.Seq] != c.Attempt {
			lost = append(lost, c.Seq)
			continue
		}
		v.until[c.Seq] = v.now().Add(lease)
	}
	return lost, nil
}

func (v *claimView) Release(_ context.Context, _ string, claims []pipeline.Claim) error {
	if v.cutOff != nil && v.cutOff() {
		return errCutOff
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, c := range claims {
		if v.attempt[c.Seq] == c.Attempt {
			delete(v.until, c.Seq)
		}
	}
	return nil
}

func (v *claimView) CommitFenced(_ context.Context, ts []pipeline.FencedTransition) ([]uint64, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, t := range ts {
		if !v.until[t.Seq].After(v.now()) {
			v.late++
		}
	}
	if v.cutOff != nil && v.cutOff() {
		return nil, errCutOff
	}
	var ok []pipeline.Transition
	var rejected []uint64
	for _, t := range ts {
		if v.attempt[t.Seq] != t.Attempt {
			rejected = append(rejected, t.Seq)
			v.fenced++
			continue
		}
		ok = append(ok, t.Transition)
	}
	if err := v.memStore.Commit(ok); err != nil {
		return nil, err
	}
	return rejected, nil
}

var errCutOff = errors.New("connection refused")
