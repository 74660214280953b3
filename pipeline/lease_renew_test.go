package pipeline

import (
	"testing"
	"time"
)

// TestLeaseBook_RenewedLeavesSentAnswersToTheirCommit: a renewal that
// reports lost an entry whose answer is on its way to the committer
// (the commit may have removed it since the renewal read it) neither
// counts a lost lease nor marks it lost; an entry whose call has not
// been answered is lost and counted once.
func TestLeaseBook_RenewedLeavesSentAnswersToTheirCommit(t *testing.T) {
	r := &Runner{Stages: []StageConfig{{Stage: namedStage("only")}}, Lease: time.Minute, counters: []*stageCounters{{}}}
	b := newLeaseBook(r, 0, nil)
	now := time.Unix(1_000_000, 0)
	claims := []Claim{{Queued: Queued{Seq: 1}, Attempt: 1}, {Queued: Queued{Seq: 2}, Attempt: 1}, {Queued: Queued{Seq: 3}, Attempt: 1}}
	b.add(claims, now)
	b.sent(1, 1) // answered, its commit in flight
	later := now.Add(time.Minute)
	b.renewed(claims, []uint64{1, 2}, later)
	if got := r.counters[0].leasesLost.Load(); got != 1 {
		t.Errorf("leases lost %d, want 1 (the unanswered entry only)", got)
	}
	if h := b.held[1]; h == nil || h.lost {
		t.Errorf("the sent entry was marked lost by the renewal: %+v", h)
	}
	if h := b.held[2]; h == nil || !h.lost {
		t.Errorf("the unanswered entry taken by another worker is not lost: %+v", h)
	}
	if h := b.held[3]; h == nil || h.lost || !h.validUntil.Equal(later) {
		t.Errorf("the renewed entry: %+v, want valid until %s", h, later)
	}
	b.fenced(1, 1) // the commit was fenced off after all: counted then
	if got := r.counters[0].leasesLost.Load(); got != 2 {
		t.Errorf("leases lost %d after the fenced commit, want 2", got)
	}
}

// TestLeaseBook_RenewalOfAnOldClaimSparesTheNew: a renewal sent for an
// entry's claim that reports it lost, answered after this process
// claimed the entry again (the store gave it up meanwhile), is about the
// old claim: the new one stays held. It was marked lost by sequence,
// its call canceled and its answer dropped.
func TestLeaseBook_RenewalOfAnOldClaimSparesTheNew(t *testing.T) {
	r := &Runner{Stages: []StageConfig{{Stage: namedStage("only")}}, Lease: time.Minute, counters: []*stageCounters{{}}}
	b := newLeaseBook(r, 0, nil)
	now := time.Unix(1_000_000, 0)
	old := []Claim{{Queued: Queued{Seq: 1}, Attempt: 1}}
	b.add(old, now)
	renewing := b.live()
	b.add([]Claim{{Queued: Queued{Seq: 1}, Attempt: 2}}, now.Add(time.Second))
	b.renewed(renewing, []uint64{1}, now.Add(time.Minute))
	if h := b.held[1]; h == nil || h.lost || h.claim.Attempt != 2 {
		t.Errorf("the new claim after the old one's renewal: %+v, want held at attempt 2", h)
	}
}
