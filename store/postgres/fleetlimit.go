package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Defaults of FleetLimitConfig.
const (
	// DefaultFleetStart is the calls in flight a worker starts with.
	DefaultFleetStart = 4
	// DefaultFleetCeiling is the most calls in flight per worker.
	DefaultFleetCeiling = 64
	// DefaultFleetDecrease is the multiplicative decrease per fleet
	// congestion event. With synchronous feedback the fleet's total
	// swings between β·C and C (Chiu and Jain): 0.8 keeps ~90 % of the
	// quota in use while still converging to fair shares.
	DefaultFleetDecrease = 0.8
	// DefaultFleetCooldown is how long the whole fleet waits after a 429
	// that carried no retry delay.
	DefaultFleetCooldown = time.Second
	// DefaultFleetProbeEvery is the least time the fleet holds a learned
	// rate with no 429 before it counts as safe and the fleet looks
	// above it (longer when a retry delay shows the quota's window).
	DefaultFleetProbeEvery = 2 * time.Second
)

// FleetLimitConfig configures a FleetLimiter. Zero fields take defaults.
type FleetLimitConfig struct {
	// Key names the shared quota: one per API project and model (a 429
	// counts against the key of the call that got it). Required.
	Key string
	// Start, Floor and Ceiling bound this worker's calls in flight.
	Start, Floor, Ceiling int
	// DecreaseFactor multiplies the limit once per fleet congestion
	// event (0 < β < 1).
	DecreaseFactor float64
	// RPM, when the quota's rate is known, paces the whole fleet to it
	// through the quota row's GCRA schedule (Burst calls at once at
	// most). Zero: the rate is unknown, only congestion cooldowns delay.
	RPM   int
	Burst int
	// Cooldown is the fleet-wide wait after a 429 with no retry delay.
	Cooldown time.Duration
	// IncreaseEvery paces the additive increase after slow start: +1
	// call in flight per IncreaseEvery of successes at most (default
	// Cooldown/4). N workers probe N times faster than one, and a quota
	// counted over a window answers late, so the probe is paced in time
	// rather than per round trip.
	IncreaseEvery time.Duration
	// ProbeEvery is the least time the fleet holds a learned rate with
	// no 429 before it looks above it (default DefaultFleetProbeEvery;
	// the quota's window when a retry delay shows a longer one). Every
	// worker of a fleet should use the same.
	ProbeEvery time.Duration
	// BookAhead is how far ahead of now the fleet's schedule is booked
	// at most (default DefaultBookAhead): a call whose slot would be
	// later waits and books then.
	BookAhead time.Duration
	// Clock is the clock of every wait; nil means the system clock. Lease
	// and slot times themselves are the database's.
	Clock pipeline.Clock
	// Log receives warnings (the database unreachable: the worker goes on
	// with its own limit until it is back).
	Log *slog.Logger
}

// FleetLimiter is a pipeline.Limiter for one worker of a fleet sharing
// one API quota through SharedQuota. Every call reserves a slot of the
// quota row's GCRA schedule and waits for it, so the fleet together
// keeps to the row's rate: a rate given (RPM, or a 429 that names its
// per-minute quota) or, when none is, one the fleet learns from the
// quota's answers (see quotaRow: a slow start the fleet takes as one
// schedule, paced just under what the quota admitted at the first
// congestion event, then a slow climb taken once for the whole fleet).
// Its calls in flight are an AIMD (slow start, then +1 per
// IncreaseEvery, neither while the fleet's pace binds its calls) whose
// decreases are the fleet's: each
// congestion event (an epoch of the quota row, raised once by the first
// 429 of the event anywhere) lowers this worker's limit once, whether
// this worker got a 429 or not, and every later 429 of the same event
// changes nothing; once the fleet is paced, an event lowers the rate
// instead and the limit only stops slow start. A 429 pushes the
// schedule past its retry delay, so the whole fleet waits it out, and a
// call whose slot falls inside that wait books a later one. A wave of
// this worker's calls that ran out their own deadline caps its calls in
// flight at half those then in flight (TimedOut).
//
// If the database cannot be reached, the worker goes on alone: no
// pacing, its own 429s decrease its limit; it rejoins at the next slot
// it can reserve.
type FleetLimiter struct {
	q   *SharedQuota
	cfg FleetLimitConfig

	mu       sync.Mutex
	law      workerLaw
	inFlight int
	// epochs holds the epoch each call in flight reserved at, by its
	// start time (calls starting at one instant share the count).
	epochs map[time.Time]epochRef
	// freed is closed and replaced when a slot frees or the limit grows.
	freed   chan struct{}
	dbFails int
	// namedRPM is the per-minute request quota a 429 last named, the
	// fleet's pace since (0: none named).
	namedRPM int64
	// admitted holds the starts of this worker's calls answered in
	// about the last minute, in the order they were answered (at most
	// admittedKeep): what a named quota is checked against (see
	// contradicted).
	admitted []time.Time
}

// admittedKeep bounds FleetLimiter.admitted: a named quota of more than
// half as many calls a minute is never found contradicted.
const admittedKeep = 1 << 16

type epochRef struct {
	epoch int64
	n     int
	// waited: a call started then waited for its slot in the fleet's
	// schedule (the pace bound it, not the calls in flight).
	waited bool
}

var (
	_ pipeline.QuotaLimiter    = (*FleetLimiter)(nil)
	_ pipeline.PoolSizer       = (*FleetLimiter)(nil)
	_ pipeline.TimeoutListener = (*FleetLimiter)(nil)
)

// namedQuotaShare is the share of a quota a 429 named that the fleet is
// paced to: a little under it, as the lone limiter does (97%).
const namedQuotaShare = 0.97

// FleetLimiter is the limiter of the quota cfg.Key names, shared with
// every worker of the fleet through db: the store's fleet-quota
// capability, as the CLI asks for it.
func (db *DB) FleetLimiter(ctx context.Context, cfg FleetLimitConfig) (*FleetLimiter, error) {
	return NewFleetLimiter(ctx, NewSharedQuota(db), cfg)
}

// NewFleetLimiter returns a worker's limiter sharing q's quota cfg.Key.
// With cfg.RPM set, it sets the key's fleet-wide pace (every worker of a
// fleet should be started with the same RPM).
func NewFleetLimiter(ctx context.Context, q *SharedQuota, cfg FleetLimitConfig) (*FleetLimiter, error) {
	if cfg.Key == "" {
		return nil, fmt.Errorf("fleet limiter: no quota key")
	}
	if cfg.Floor < 1 {
		cfg.Floor = 1
	}
	if cfg.Ceiling <= 0 {
		cfg.Ceiling = DefaultFleetCeiling
	}
	cfg.Ceiling = max(cfg.Ceiling, cfg.Floor)
	if cfg.Start <= 0 {
		cfg.Start = DefaultFleetStart
	}
	cfg.Start = min(max(cfg.Start, cfg.Floor), cfg.Ceiling)
	if !(cfg.DecreaseFactor > 0 && cfg.DecreaseFactor < 1) {
		cfg.DecreaseFactor = DefaultFleetDecrease
	}
	if cfg.Cooldown <= 0 {
		cfg.Cooldown = DefaultFleetCooldown
	}
	if cfg.IncreaseEvery <= 0 {
		cfg.IncreaseEvery = cfg.Cooldown / 4
	}
	if cfg.Clock == nil {
		cfg.Clock = pipeline.SystemClock{}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.ProbeEvery > 0 {
		q.ProbeEvery = cfg.ProbeEvery
	}
	if cfg.BookAhead > 0 {
		q.BookAhead = cfg.BookAhead
	}
	if cfg.RPM < 0 {
		return nil, fmt.Errorf("fleet limiter %s: negative RPM %d", cfg.Key, cfg.RPM)
	}
	var every time.Duration
	if cfg.RPM > 0 {
		every = time.Minute / time.Duration(cfg.RPM)
	}
	if err := q.SetRate(ctx, cfg.Key, every, max(cfg.Burst, 1)); err != nil {
		return nil, err
	}
	law := workerLaw{floor: float64(cfg.Floor), ceiling: float64(cfg.Ceiling), factor: cfg.DecreaseFactor,
		increaseEvery: cfg.IncreaseEvery, limit: float64(cfg.Start), slowStart: true}
	return &FleetLimiter{q: q, cfg: cfg, law: law, epochs: map[time.Time]epochRef{}, freed: make(chan struct{})}, nil
}

// Acquire waits for a slot under this worker's limit, then reserves the
// call's place in the fleet's schedule and waits for it.
func (l *FleetLimiter) Acquire(ctx context.Context) (time.Time, error) {
	var cuts int // the waves of timeouts that had cut the limit at admission
	for {
		l.mu.Lock()
		if l.inFlight < int(l.law.limit) {
			l.inFlight++
			cuts = l.law.waveCuts
			l.mu.Unlock()
			break
		}
		freed := l.freed
		l.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
	epoch, waited, err := l.book(ctx)
	if err != nil {
		l.release()
		return time.Time{}, err
	}
	started := l.cfg.Clock.Now()
	l.mu.Lock()
	ref := l.epochs[started]
	l.epochs[started] = epochRef{epoch: max(ref.epoch, epoch), n: ref.n + 1, waited: ref.waited || waited}
	if l.law.waveCuts != cuts {
		// Admitted before a wave's cut, sent after it (it waited for its
		// slot): it is of the calls that cut answered.
		l.law.sentAfterCut(started)
	}
	l.mu.Unlock()
	return started, nil
}

// maxRebooks bounds how many times one call books its slot again.
const maxRebooks = 3

// book reserves the call's slot in the fleet's schedule and waits for
// it (coming back while the schedule is booked more than BookAhead
// ahead: BookAhead), booking again (maxRebooks times at most) when a 429 anywhere
// in the fleet meanwhile pushed the schedule past it: sent anyway, the
// call would meet a quota still spent. A call that waited for its slot
// reads the fleet's cooldown before it goes out (one read, not a
// write): every process learns of a 429 before its next call, not at
// its next reservation. It returns the epoch of the slot (-1: the
// database could not be reached, the call goes unpaced) and whether
// the call waited for it.
func (l *FleetLimiter) book(ctx context.Context) (epoch int64, waited bool, err error) {
	reserve := l.q.Reserve
	for i := 0; ; {
		g, err := reserve(ctx, l.cfg.Key, 1)
		if err != nil {
			if ctx.Err() != nil {
				return -1, waited, ctx.Err()
			}
			l.dbFailed(err)
			return -1, waited, nil
		}
		l.decrease(g.Decreases, g.Paced)
		if g.Wait > 0 || !g.Booked {
			waited = waited || g.Paced // not a cooldown's wait: the pace's
			if err := l.sleep(ctx, max(g.Wait, time.Millisecond)); err != nil {
				return -1, waited, err
			}
		}
		if !g.Booked {
			continue
		}
		if g.Wait > 0 {
			n, cooled, err := l.q.Refresh(ctx, l.cfg.Key)
			if err != nil {
				if ctx.Err() != nil {
					return -1, waited, ctx.Err()
				}
				l.dbFailed(err)
				return g.Epoch, waited, nil
			}
			if !cooled {
				// No 429 has cooled the fleet yet: no slot can be
				// stale, the call goes. (Going on to the stale check
				// and its rebooking made a fleet that met no 429 run
				// 1.7-6x slower when this read was first fixed.)
				return g.Epoch, waited, nil
			}
			l.decrease(n, g.Paced)
		}
		if i >= maxRebooks || !l.q.Stale(l.cfg.Key, g) {
			return g.Epoch, waited, nil
		}
		i++
		reserve = l.q.Rebook
	}
}

// sleep waits d on the clock, or until ctx ends.
func (l *FleetLimiter) sleep(ctx context.Context, d time.Duration) error {
	t := l.cfg.Clock.NewTimer(d)
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
}

func (l *FleetLimiter) dbFailed(err error) {
	l.mu.Lock()
	l.dbFails++
	first := l.dbFails == 1
	l.mu.Unlock()
	if first {
		l.cfg.Log.Warn("shared quota unreachable: this worker paces itself until the database is back", "quota", l.cfg.Key, "err", err)
	}
}

// done ends the call started at started and returns the epoch it
// reserved at (-1: none) and whether it waited for its slot.
func (l *FleetLimiter) done(started time.Time) epochRef {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.doneLocked(started)
}

// doneLocked is done for a caller that holds mu.
func (l *FleetLimiter) doneLocked(started time.Time) epochRef {
	ref, ok := l.epochs[started]
	if !ok {
		ref.epoch = -1
	} else if ref.n <= 1 {
		delete(l.epochs, started)
	} else {
		l.epochs[started] = epochRef{epoch: ref.epoch, n: ref.n - 1, waited: ref.waited}
	}
	l.inFlight = max(l.inFlight-1, 0)
	l.wake()
	return ref
}

func (l *FleetLimiter) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inFlight = max(l.inFlight-1, 0)
	l.wake()
}

// wake releases the waiters (the caller holds mu).
func (l *FleetLimiter) wake() {
	close(l.freed)
	l.freed = make(chan struct{})
}

// decrease applies n fleet congestion events (see workerLaw.decrease).
func (l *FleetLimiter) decrease(n int, paced bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.law.decrease(n, l.cfg.Clock.Now(), paced)
}

// Succeeded grows the limit: +1 per success in slow start (doubling each
// round trip until the fleet's first congestion event), then +1 per
// IncreaseEvery at most, or, once a wave of this worker's timeouts cut
// it, a call per waveGrowRoundTrips round trips (see workerLaw.succeeded);
// not for a call that waited for its slot in the
// fleet's schedule (the pace bound it: more calls in flight would only
// book further ahead).
func (l *FleetLimiter) Succeeded(started time.Time, _ int64) {
	ref := l.done(started)
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.admitted = append(l.admitted, started)
	if drop := len(l.admitted) - admittedKeep; drop > 0 {
		l.admitted = l.admitted[drop:]
	}
	for len(l.admitted) > 0 && now.Sub(l.admitted[0]) > time.Minute {
		l.admitted = l.admitted[1:]
	}
	l.law.answered(now.Sub(started))
	l.law.succeeded(now, ref.waited)
	l.wake()
}

// RateLimited reports the 429 to the fleet: the first one of an event
// raises the quota's epoch and pushes the fleet's schedule past the
// retry delay (Cooldown when there is none); this worker decreases once
// per new epoch it sees. Without the database it decreases on its own.
func (l *FleetLimiter) RateLimited(started time.Time, retryAfter time.Duration) {
	epoch := l.done(started).epoch
	cooldown := retryAfter
	if cooldown <= 0 {
		cooldown = l.cfg.Cooldown
	}
	if epoch < 0 {
		l.decrease(1, false)
		return
	}
	c, err := l.q.OnRateLimited(context.Background(), l.cfg.Key, epoch, cooldown)
	if err != nil {
		l.dbFailed(err)
		l.decrease(1, false)
		return
	}
	l.decrease(c.Decreases, c.Paced)
}

// RateLimitedQuota is RateLimited for a 429 that named its per-minute
// request quota: the rate is then known, and the worker that hears a new
// value sets the fleet's pace in the quota row to 97% of it (unless
// --rpm gave the rate, or this worker's own answers contradict it: see
// contradicted), so every worker keeps to it from its next call.
func (l *FleetLimiter) RateLimitedQuota(started time.Time, retryAfter time.Duration, requestsPerMinute, _ int64) {
	if requestsPerMinute > 0 && l.cfg.RPM == 0 && !l.contradicted(started, requestsPerMinute) {
		l.mu.Lock()
		changed := requestsPerMinute != l.namedRPM
		l.namedRPM = requestsPerMinute
		l.mu.Unlock()
		if changed {
			every := time.Duration(float64(time.Minute) / (namedQuotaShare * float64(requestsPerMinute)))
			if err := l.q.SetRate(context.Background(), l.cfg.Key, every, max(l.cfg.Burst, 1)); err != nil {
				l.dbFailed(err)
			}
		}
	}
	l.RateLimited(started, retryAfter)
}

// contradicted reports whether this worker alone had more than twice rpm
// calls answered that started in the minute before started: a minute's
// window, sliding or fixed, never admits that many, so the 429 named
// another window's count (as the lone law reads it, see the limiter's
// law.contradicted), and paced at it the fleet would crawl.
//
// It is weaker than the lone law's: each worker sees only its own
// answers (a fleet of n, about a nth of the evidence), and a quota named
// at the first 429, before the evidence, is the fleet's pace for good:
// the fleet never goes faster than a given rate, so no worker gathers
// more than it again. The lone law looks above a named budget and finds
// out.
func (l *FleetLimiter) contradicted(started time.Time, rpm int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Answers come in their own order, not their starts': count them
	// all rather than search.
	from, n := started.Add(-time.Minute), int64(0)
	for _, at := range l.admitted {
		if !at.Before(from) && !at.After(started) {
			n++
		}
	}
	return n > 2*rpm
}

// Failed frees the slot.
func (l *FleetLimiter) Failed(started time.Time) { l.done(started) }

// TimedOut reports that the call started at started ran out its own
// deadline (the per-call timeout, not the run's end). It frees the slot;
// a wave of them caps this worker's calls in flight at half those then
// in flight (see workerLaw.timedOut), as limiter.AIMD's TimedOut does for
// a single process. It implements pipeline.TimeoutListener.
func (l *FleetLimiter) TimedOut(started time.Time) {
	now := l.cfg.Clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.doneLocked(started)
	l.law.timedOut(now, started, l.inFlight+1)
}

// MostInFlight is this worker's ceiling: the most calls it can ever have
// in flight (pipeline.PoolSizer).
func (l *FleetLimiter) MostInFlight() int { return l.cfg.Ceiling }

// Limit is this worker's current limit on calls in flight.
func (l *FleetLimiter) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.law.limit)
}

// InFlight is this worker's calls holding a slot.
func (l *FleetLimiter) InFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inFlight
}
