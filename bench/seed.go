package bench

import (
	"container/list"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// SeedAIMD is the first seed's AdaptiveLimiter (seeds/000), ported line for
// line so the benchmark runs the seed's controller and not our reading of
// it:
//
//	limit = float(start); sem = Semaphore(start)
//	_resize(new): new = clamp(new, floor, ceil); delta = int(new) - int(limit)
//	              limit = new; release delta permits if delta > 0
//	on_success:   unless within cooldown of the last drop: _resize(limit + 1)
//	on_429:       last_drop = now; _resize(limit * 0.5)
//	acquire:      sem.acquire();  release: sem.release()
//
// Its flaws are kept on purpose, because they are what the comparison is
// about. It halves on every 429, so a burst of simultaneous 429s drives the
// limit to the floor. It grows by one per success (not per round trip), so
// outside a cooldown it doubles every round trip. And its semaphore never
// shrinks: _resize only ever releases permits and every acquire is paired
// with a release, so after a "halving" the semaphore keeps every permit it
// had and each later +1 adds another. Limit reports the seed's number
// (self.limit); InFlight shows what the semaphore really lets through, and
// the benchmark's plot draws both.
//
// The seed's worker requeues a 429'd item with no wait and ignores the
// server's retry delay; pipeline.Runner does the same with any non-nil
// Limiter (it retries at once and leaves waiting to the limiter), and
// SeedAIMD never waits, so the pairing is faithful. Safe for concurrent use.
type SeedAIMD struct {
	floor, ceil float64
	cooldown    time.Duration
	now         func() time.Time

	mu       sync.Mutex
	limit    float64
	lastDrop time.Time // zero: never (the seed's 0.0 on a monotonic clock)
	permits  int       // the semaphore's free permits
	inFlight int
	waiters  list.List // of chan struct{}, FIFO as asyncio.Semaphore
}

var _ pipeline.Limiter = (*SeedAIMD)(nil)

// NewSeedAIMD returns the seed's limiter with its defaults: start 8,
// floor 2, ceiling 96, cooldown 4 s.
func NewSeedAIMD() *SeedAIMD {
	return &SeedAIMD{floor: 2, ceil: 96, cooldown: 4 * time.Second, now: time.Now, limit: 8, permits: 8}
}

// Acquire takes a semaphore permit, waiting in line for one.
func (s *SeedAIMD) Acquire(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	s.mu.Lock()
	if s.permits > 0 && s.waiters.Len() == 0 {
		s.permits--
		s.inFlight++
		s.mu.Unlock()
		return s.now(), nil
	}
	ready := make(chan struct{})
	e := s.waiters.PushBack(ready)
	s.mu.Unlock()
	select {
	case <-ready:
		return s.now(), nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		select {
		case <-ready: // granted meanwhile: give the permit back
			s.releaseLocked()
		default:
			s.waiters.Remove(e)
		}
		return time.Time{}, ctx.Err()
	}
}

// Succeeded is the seed's on_success followed by release.
func (s *SeedAIMD) Succeeded(time.Time, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastDrop.IsZero() || s.now().Sub(s.lastDrop) >= s.cooldown {
		s.resizeLocked(s.limit + 1)
	}
	s.releaseLocked()
}

// RateLimited is the seed's on_429 followed by release: every 429 halves,
// and the retry delay is ignored.
func (s *SeedAIMD) RateLimited(time.Time, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastDrop = s.now()
	s.resizeLocked(s.limit * 0.5)
	s.releaseLocked()
}

// Failed is release alone: the seed's finally clause.
func (s *SeedAIMD) Failed(time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

// Limit is the seed's self.limit, truncated as int() does.
func (s *SeedAIMD) Limit() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.limit)
}

// InFlight is the number of permits held.
func (s *SeedAIMD) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight
}

// Permits is the semaphore's size: permits free plus held. The seed
// believes it equals Limit; it only ever grows.
func (s *SeedAIMD) Permits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.permits + s.inFlight
}

// resizeLocked is the seed's _resize: "shrinking is absorbed as in-flight
// permits return naturally", which they never are.
func (s *SeedAIMD) resizeLocked(next float64) {
	next = max(s.floor, min(s.ceil, next))
	delta := int(next) - int(s.limit)
	s.limit = next
	for range max(delta, 0) {
		s.semReleaseLocked()
	}
}

func (s *SeedAIMD) releaseLocked() {
	if s.inFlight <= 0 {
		panic("bench: SeedAIMD released more often than acquired")
	}
	s.inFlight--
	s.semReleaseLocked()
}

// semReleaseLocked adds one permit, handing it to the first waiter if any.
func (s *SeedAIMD) semReleaseLocked() {
	if e := s.waiters.Front(); e != nil {
		s.waiters.Remove(e)
		s.inFlight++
		close(e.Value.(chan struct{}))
		return
	}
	s.permits++
}

// SeedBackoff is the second seed's worker loop (seeds/001) around a stage:
// every failure is retried in place after base×2^(attempt-1) plus a uniform
// 0.5-1.5 s of jitter, up to MaxAttempts calls, then the item is given up.
// The seed ignores the server's retry delay and has no limiter.
//
// It is a Stage wrapper rather than a Limiter because the seed's state is
// per item (its attempt count and give-up), and the Limiter interface does
// not say which item a call is for; and because pipeline.Runner with no
// limiter would sleep the server's retryDelay on a 429 and retry without
// end, which is our policy, not the seed's. The runner sees one call per
// item: a result, or a permanent error when the seed gives up (counted by
// GaveUp, and as lost by the benchmark: the seed keeps no dead letters).
// Safe for concurrent use.
type SeedBackoff struct {
	Stage pipeline.Stage
	// Base is the first retry's delay before jitter; the seed's 2 s.
	Base time.Duration
	// MaxAttempts is the seed's max_retries: 5 calls in all.
	MaxAttempts int

	gaveUp atomic.Int64
}

var _ pipeline.Stage = (*SeedBackoff)(nil)

// Name is the wrapped stage's name.
func (s *SeedBackoff) Name() string { return s.Stage.Name() }

// GaveUp is how many items were given up after MaxAttempts calls.
func (s *SeedBackoff) GaveUp() int64 { return s.gaveUp.Load() }

// Process runs the seed's retry loop with cenkalti/backoff.
func (s *SeedBackoff) Process(ctx context.Context, it pipeline.Item) (pipeline.Result, error) {
	var res pipeline.Result
	retryable := false
	op := func() error {
		r, err := s.Stage.Process(ctx, it)
		if err == nil {
			res = r
			return nil
		}
		switch pipeline.ClassOf(ctx, err) {
		case pipeline.ClassRateLimited, pipeline.ClassTransient:
			retryable = true
			return err
		}
		retryable = false
		return backoff.Permanent(err)
	}
	b := backoff.WithContext(backoff.WithMaxRetries(&seedDelays{base: s.Base}, uint64(max(s.MaxAttempts, 1)-1)), ctx)
	err := backoff.Retry(op, b)
	if err == nil {
		return res, nil
	}
	if retryable && ctx.Err() == nil {
		s.gaveUp.Add(1)
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("seed backoff: gave up after %d attempts: %w", s.MaxAttempts, err))
	}
	return pipeline.Result{}, err
}

// seedDelays is the seed's schedule as a backoff.BackOff:
// base×2^(attempt-1) + uniform(0.5 s, 1.5 s). cenkalti's own
// ExponentialBackOff jitters by a factor, not by an added second, so it is
// not the seed's.
type seedDelays struct {
	base time.Duration
	n    int
}

func (d *seedDelays) NextBackOff() time.Duration {
	delay := d.base<<d.n + 500*time.Millisecond + rand.N(time.Second)
	d.n++
	return delay
}

func (d *seedDelays) Reset() { d.n = 0 }
