package pipeline

import "sync/atomic"

// A limited stage's pool follows its limiter. The most calls a limiter can
// let be in flight (StageConfig.Workers, a PoolSizer's MostInFlight: 5,000
// by default) is what a thinking model on a paid tier needs, but most
// quotas hold a stage to a few dozen. A worker holds its item while the
// limiter paces it, and books the call's money before it waits (see
// book), so a pool far above the limit holds items and reservations for
// nothing, and hundreds of callers queued at the limiter answer its
// pacing a little later than a few dozen. So the pool starts at
// poolStart workers (or what the limit needs, when more) and grows with
// the limit: a worker about to take an item adds workers when the limit
// comes within a quarter (and poolSlack) of the pool, up to the most.

const (
	poolStart = 64
	poolSlack = 8
)

// pool is one stage's worker count.
type pool struct {
	limiter Limiter // nil: the pool is Workers from the start
	most    int
	n       *atomic.Int64 // workers started
	// away: the stage's workers holding an item outside the limiter (a
	// retry's backoff, an overload hold). Their calls are not in flight,
	// and a limit that grows only while calls fill it (slow start past
	// its brake) would stop growing with them asleep.
	away *atomic.Int64
}

func newPool(sc *StageConfig, workers, away *atomic.Int64) *pool {
	return &pool{limiter: sc.Limiter, most: sc.Workers, n: workers, away: away}
}

// started returns how many workers to start the stage with, and counts
// them.
func (p *pool) started() int {
	n := p.most
	if p.limiter != nil {
		n = min(p.most, max(poolStart, p.wanted()))
	}
	p.n.Store(int64(n))
	return n
}

// grow returns how many workers to add now, and counts them; 0 when the
// pool has room for the limit, or is at the most. Safe for concurrent use:
// of workers that look at once, one adds them.
func (p *pool) grow() int {
	if p.limiter == nil {
		return 0
	}
	n := p.n.Load()
	if n >= int64(p.most) {
		return 0 // at the most: no need to ask the limiter, item after item
	}
	want := int64(min(p.most, p.wanted()))
	if want <= n || !p.n.CompareAndSwap(n, want) {
		return 0
	}
	return int(want - n)
}

// wanted is the pool the current limit needs: the limit, a quarter more
// (it doubles each round trip in slow start, and a worker only looks
// when it takes an item), poolSlack, and the workers away.
func (p *pool) wanted() int {
	l := p.limiter.Limit()
	return l + l/4 + poolSlack + int(p.away.Load())
}
