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
// the limit: a worker adds workers when the limit comes within a quarter
// (and poolSlack) of the pool, up to the most, at most doubling it at a
// time.
//
// The limit is a cap, not a demand: a limiter that paces a rate keeps
// far fewer calls in flight than its limit, and a pool grown to the
// limit is then hundreds of goroutines, each with its item and its
// stack, queued at the limiter for nothing. So the pool grows only while
// it is busy: while no more than a quarter of it (and poolSlack) is
// outside a call (waiting for work, for a commit, at the limiter). A
// worker looks when it takes an item and when its slot is granted: the
// last of a pool's calls to start sees every other worker in its call,
// so a pool whose calls all hang still grows.

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
	// retry's backoff, an overload hold, an identical item's call). Their calls are not in flight,
	// and a limit that grows only while calls fill it (slow start past
	// its brake) would stop growing with them asleep.
	away *atomic.Int64
	// inFlight: the stage's calls in flight.
	inFlight *atomic.Int64
}

func newPool(sc *StageConfig, c *stageCounters) *pool {
	return &pool{limiter: sc.Limiter, most: sc.Workers, n: &c.workers, away: &c.away, inFlight: &c.inFlight}
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
// pool has room for the limit, is at the most, or is not busy. Safe for
// concurrent use: of workers that look at once, one adds them.
func (p *pool) grow() int {
	if p.limiter == nil {
		return 0
	}
	n := p.n.Load()
	if n >= int64(p.most) {
		return 0 // at the most: no need to ask the limiter, item after item
	}
	if idle := n - p.inFlight.Load() - p.away.Load(); idle > n/4+poolSlack {
		return 0 // workers wait for work or for a slot already: more would wait too
	}
	want := min(int64(p.most), int64(p.wanted()), 2*n)
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
