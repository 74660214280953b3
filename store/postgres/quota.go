package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// SharedQuota is one API quota shared by every process of a fleet, held
// in the quota table: one row per key (a project and model, say), with
//
//   - a GCRA schedule (tat, the theoretical arrival time of the next
//     slot; every, the interval one unit of cost takes; tau, the burst
//     tolerance), so that the fleet together is paced to the quota's rate
//     however many workers share it;
//   - the rate itself: given (SetRate: --rpm, or a 429 that named its
//     quota) or, when none is, learned by the fleet's rate law
//     (fleetlaw.go) from the grants and 429s the row counts: the fleet
//     slow-starts as one schedule (a low pace doubled each short lag the
//     fleet sent at it), at the first congestion event it paces just
//     under what the quota admitted, then climbs slowly, one step per
//     answer lag for the whole fleet (each step is a compare-and-set on
//     the row, so N workers do not probe N times faster);
//   - a congestion epoch: the first 429 of an event raises it once, for
//     the whole fleet, applies the law once, and pushes the schedule
//     past the server's retry delay, so every process waits, and each
//     applies one decrease per new epoch (shared, synchronous feedback)
//     instead of every 429 of every process decreasing on its own.
//
// Reserve is one statement on one row (plus, once per lag for the
// fleet, the law's step), and books no further ahead than BookAhead; OnRateLimited one short transaction holding
// the row's lock, no API call inside. Only the database clock is read.
// A SharedQuota is safe for concurrent use; each process has its own
// (its record of the epochs it has seen is per process).
type SharedQuota struct {
	db *DB
	// ProbeEvery is the least time the fleet holds a learned rate with no
	// 429 before it counts as safe (see DefaultFleetProbeEvery, the value
	// when zero). Every process sharing a key should use the same.
	ProbeEvery time.Duration
	// BookAhead is how far ahead the schedule is booked at most
	// (DefaultBookAhead when zero).
	BookAhead time.Duration
	mu        sync.Mutex
	// seen is the newest epoch this process has seen per key; cool the
	// latest end of a cooldown (database time).
	seen map[string]int64
	cool map[string]time.Time
}

// NewSharedQuota returns the quota shared through db's database. Keys
// are global to the schema, so pipelines in one schema share them.
func NewSharedQuota(db *DB) *SharedQuota {
	return &SharedQuota{db: db, seen: map[string]int64{}, cool: map[string]time.Time{}}
}

// Grant is one reserved slot.
type Grant struct {
	// Wait is how long to wait before the call so that the fleet keeps
	// to the rate (and past a congestion cooldown); 0 means at once.
	Wait time.Duration
	// Epoch is the key's congestion epoch when the slot was reserved:
	// pass it to OnRateLimited if the call gets a 429.
	Epoch int64
	// Decreases is how many congestion events (new epochs) this process
	// has not yet reacted to: apply that many multiplicative decreases.
	// The first epoch a process sees is its baseline (0 decreases).
	Decreases int
	// Paced: the fleet keeps to a rate (given or learned) through the
	// schedule, which congestion events lower; the calls in flight then
	// need not fall with them.
	Paced bool
	// At is the slot's time on the database's clock (see Stale).
	At time.Time
	// Booked is false when no slot was booked because the schedule is
	// booked more than SharedQuota.BookAhead ahead: call again after
	// Wait.
	Booked bool
}

// DefaultBookAhead is how far ahead of now the fleet's schedule is
// booked at most (SharedQuota.BookAhead). A slot booked far ahead goes
// out at the pace of its booking, whatever an event or a step has made
// of the pace since, and a 429 finds the schedule booked at the old
// pace; past it a caller waits and books later.
const DefaultBookAhead = 250 * time.Millisecond

// Stale reports whether a 429 this process heard of since g was granted
// pushed key's schedule past g's slot: the call would go out while the
// quota is spent, and should book a slot again (Rebook).
func (q *SharedQuota) Stale(key string, g Grant) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return g.At.Before(q.cool[key])
}

// observe records epoch and the end of the latest cooldown for key and
// returns how many epochs are new to this process.
func (q *SharedQuota) observe(key string, epoch int64, cooldownUntil time.Time) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if cooldownUntil.After(q.cool[key]) {
		q.cool[key] = cooldownUntil
	}
	seen, ok := q.seen[key]
	if !ok || epoch <= seen {
		// A first sight is the baseline; an older epoch means the
		// unlogged table was emptied by a server crash: start again.
		q.seen[key] = epoch
		return 0
	}
	q.seen[key] = epoch
	return int(epoch - seen)
}

// SetRate sets key's pace: one unit of cost every every, with burst
// units allowed at once (at least 1). every > 0 is a given rate (--rpm,
// or a quota a 429 named): the fleet starts there and never goes faster,
// the law only lowering it at events and climbing back. every == 0 says
// the rate is unknown: a rate given before is forgotten when a run
// starts with none, and the fleet learns one from the quota's answers.
// While the fleet is live, no rate or the rate the row has already
// changes nothing (quotaRow.given): a worker joining it with the
// fleet's --rpm or none, or hearing a quota another heard first, must
// not reset what the others learned. A run started on a row no worker
// has reserved from for longer than a quota window (quotaRow.idle)
// starts at the rate it is given, or none, whatever the last run's
// fleet learned under it (a rate learned with none given is kept). It takes effect for the next
// reservation, fleet-wide. The quota table is unlogged (a schedule is
// worth no fsync): a server crash empties it, so each run sets its rates
// when it starts.
func (q *SharedQuota) SetRate(ctx context.Context, key string, every time.Duration, burst int) error {
	if every < 0 {
		return fmt.Errorf("quota %s: negative interval %v", key, every)
	}
	if burst < 1 {
		burst = 1
	}
	tau := every * time.Duration(burst-1)
	err := q.db.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO quota (key) VALUES ($1) ON CONFLICT (key) DO NOTHING`, key); err != nil {
			return err
		}
		// A row never reserved from holds tat '-infinity', which
		// time.Time cannot hold: read as long ago.
		var tat time.Time
		r, now, err := scanRow(tx.QueryRow(ctx, `SELECT greatest(q.tat, 'epoch'), `+rowColumns+` FROM quota q WHERE q.key = $1 FOR UPDATE`, key), &tat)
		if err != nil {
			return err
		}
		next, changed, marked := r.given(now, every, r.idle(now, tat, q.probeEvery()))
		if !changed {
			_, err = tx.Exec(ctx, `UPDATE quota SET tau_us = $2 WHERE key = $1`, key, tau.Microseconds())
			return err
		}
		// The schedule is written back only where it lies ahead (a past
		// one reads as now, see rowColumns), the mark only when it moved
		// (a row no grant has marked keeps none).
		_, err = tx.Exec(ctx, `UPDATE quota SET tau_us = $2, every_us = $3, given_us = $4,
				safe_rate = $5, refused_rate = $6, stairs = $7, bounded = $8,
				tat = CASE WHEN tat > now() THEN $9 ELSE tat END,
				mark_at = CASE WHEN $10 THEN $11 ELSE mark_at END,
				mark_sent = CASE WHEN $10 THEN $12 ELSE mark_sent END,
				mark_limited = CASE WHEN $10 THEN $13 ELSE mark_limited END
			WHERE key = $1`,
			key, tau.Microseconds(), next.Every.Microseconds(), next.Given.Microseconds(),
			next.Safe, next.Refused, next.Stairs, next.Bounded, next.Tat,
			marked, next.MarkAt, next.MarkSent, next.MarkLimited)
		return err
	})
	if err != nil {
		return fmt.Errorf("set quota %s in %s: %w", key, q.db.path, err)
	}
	return nil
}

// rowColumns are the quota row's columns quotaRow holds, in scanRow's
// order, the schedule's times no earlier than now (a past slot or
// cooldown is as good as now).
const rowColumns = `q.every_us, q.given_us, greatest(q.tat, now()), greatest(q.cooldown_until, now()),
	q.safe_rate, q.refused_rate, q.bounded, q.stairs, q.held, q.calm, q.granted, q.limited,
	coalesce(q.mark_at, now()), q.mark_sent, q.mark_limited, q.window_us,
	q.epoch = 0 AND q.given_us = 0, coalesce(q.stage_at, now()), q.stage_sent,
	coalesce(q.prev_at, now()), q.prev_sent, now()`

// scanRow scans rowColumns (after dest) into a quotaRow and the
// database's now.
func scanRow(row pgx.Row, dest ...any) (quotaRow, time.Time, error) {
	var r quotaRow
	var everyUS, givenUS, windowUS int64
	var now time.Time
	err := row.Scan(append(dest, &everyUS, &givenUS, &r.Tat, &r.CooldownUntil,
		&r.Safe, &r.Refused, &r.Bounded, &r.Stairs, &r.Held, &r.Calm, &r.Granted, &r.Limited,
		&r.MarkAt, &r.MarkSent, &r.MarkLimited, &windowUS, &r.Starting, &r.StageAt, &r.StageSent, &r.PrevAt, &r.PrevSent, &now)...)
	r.Every = time.Duration(everyUS) * time.Microsecond
	r.Given = time.Duration(givenUS) * time.Microsecond
	r.Window = time.Duration(windowUS) * time.Microsecond
	return r, now, err
}

// probeEvery is ProbeEvery or its default.
func (q *SharedQuota) probeEvery() time.Duration {
	if q.ProbeEvery > 0 {
		return q.ProbeEvery
	}
	return DefaultFleetProbeEvery
}

// bookAhead is BookAhead or its default.
func (q *SharedQuota) bookAhead() time.Duration {
	if q.BookAhead > 0 {
		return q.BookAhead
	}
	return DefaultBookAhead
}

// Reserve books the next slot of key for a call costing cost units (1
// for a request; tokens when pacing tokens) and says how long to wait
// for it. A slot is booked even if the caller then gives up. When the
// fleet has held a learned rate for an answer lag, the reservation that
// notices takes the law's next step for the whole fleet.
func (q *SharedQuota) Reserve(ctx context.Context, key string, cost float64) (Grant, error) {
	return q.reserve(ctx, key, cost, 1)
}

// Rebook books a slot again for a call whose slot went Stale: as
// Reserve, but the call is not counted twice in what the fleet sent.
func (q *SharedQuota) Rebook(ctx context.Context, key string, cost float64) (Grant, error) {
	return q.reserve(ctx, key, cost, 0)
}

// reserve is Reserve, counting grants calls sent.
func (q *SharedQuota) reserve(ctx context.Context, key string, cost float64, grants int64) (Grant, error) {
	if cost < 0 {
		return Grant{}, fmt.Errorf("quota %s: negative cost %v", key, cost)
	}
	var waitUS, epoch int64
	var booked bool
	// The slot is booked only if it falls within BookAhead (ok); the
	// wait returned is then the slot's, else when to come back.
	reserve := func() (quotaRow, time.Time, error) {
		return scanRow(q.db.pool.QueryRow(ctx, `WITH c AS (
				SELECT key, every_us = 0 OR greatest(tat, now()) - tau_us * interval '1 microsecond'
					<= now() + $4 * interval '1 microsecond' AS ok
				FROM quota WHERE key = $1 FOR UPDATE)
			UPDATE quota q SET
				tat = CASE WHEN c.ok THEN greatest(q.tat, now()) + q.every_us * $2::float8 * interval '1 microsecond' ELSE q.tat END,
				granted = q.granted + CASE WHEN c.ok THEN $3 ELSE 0 END, mark_at = coalesce(q.mark_at, now())
			FROM c WHERE q.key = c.key
			RETURNING c.ok, greatest(0, (extract(epoch FROM CASE WHEN c.ok
				THEN q.tat - q.every_us * $2::float8 * interval '1 microsecond' - q.tau_us * interval '1 microsecond'
				ELSE q.tat - q.tau_us * interval '1 microsecond' - $4 * interval '1 microsecond' END - now()) * 1000000)::bigint),
				q.epoch, `+rowColumns, key, cost, grants, q.bookAhead().Microseconds()), &booked, &waitUS, &epoch)
	}
	r, now, err := reserve()
	if errors.Is(err, pgx.ErrNoRows) {
		// The key's first reservation: the row, then the slot.
		if _, err = q.db.pool.Exec(ctx, `INSERT INTO quota (key) VALUES ($1) ON CONFLICT (key) DO NOTHING`, key); err == nil {
			r, now, err = reserve()
		}
	}
	if err != nil {
		return Grant{}, fmt.Errorf("reserve quota %s in %s: %w", key, q.db.path, err)
	}
	if next, changed := r.held(now, q.probeEvery()); booked && changed {
		if err := q.step(ctx, key, epoch, r, next); err != nil {
			return Grant{}, err
		}
	}
	wait := time.Duration(waitUS) * time.Microsecond
	return Grant{Wait: wait, Epoch: epoch, Decreases: q.observe(key, epoch, cooling(r, now)), Paced: r.Every > 0, At: now.Add(wait), Booked: booked}, nil
}

// cooling is the end of the row's cooldown when it is still to come at
// now, else the zero time. The row reads a past cooldown as now (see
// rowColumns), and now is no cooldown: recorded as one, every slot of
// this process that fell before its latest reservation would look
// Stale and be booked again, its first slot wasted.
func cooling(r quotaRow, now time.Time) time.Time {
	if r.CooldownUntil.After(now) {
		return r.CooldownUntil
	}
	return time.Time{}
}

// Refresh reads key's epoch and cooldown as the fleet has them now, so
// that Stale sees a 429 another process heard of since this one last
// reserved: a call that waited for its slot looks before it goes out.
// It returns how many congestion events are new to this process, and
// whether the fleet has had a cooldown at all (false: the row holds
// none yet, nothing is read into this process).
func (q *SharedQuota) Refresh(ctx context.Context, key string) (n int, cooled bool, err error) {
	var epoch int64
	var cool time.Time
	// A row that never had a cooldown holds '-infinity', which time.Time
	// cannot hold: ask for it as a flag instead.
	err = q.db.pool.QueryRow(ctx, `SELECT epoch, cooldown_until = '-infinity', greatest(cooldown_until, 'epoch') FROM quota WHERE key = $1`, key).Scan(&epoch, &cooled, &cool)
	if err != nil {
		return 0, false, fmt.Errorf("read quota %s in %s: %w", key, q.db.path, err)
	}
	if cooled = !cooled; !cooled {
		return 0, false, nil
	}
	return q.observe(key, epoch, cool), true, nil
}

// step applies the law's step from row to next, unless another process
// took a step or an event came since (then its change stands).
func (q *SharedQuota) step(ctx context.Context, key string, epoch int64, row, next quotaRow) error {
	// The slots booked past now keep their number at the new pace (see
	// quotaRow.pace), computed here on the row as it is when the step
	// lands (others may have booked since it was read).
	_, err := q.db.pool.Exec(ctx, `UPDATE quota SET every_us = $3::bigint, safe_rate = $4, refused_rate = $5,
			stairs = $6, held = $7, calm = $8, mark_at = $9, mark_sent = $10, mark_limited = $11,
			stage_at = $15, stage_sent = $16, prev_at = $17, prev_sent = $18,
			tat = CASE WHEN every_us > 0 AND $3::bigint > 0 AND tat > greatest(now(), cooldown_until)
				THEN greatest(now(), cooldown_until) + (tat - greatest(now(), cooldown_until)) * ($3::bigint::float8 / every_us)
				ELSE tat END
		WHERE key = $1 AND epoch = $2 AND mark_at = $12 AND every_us = $13
			AND ($14::timestamptz IS NULL OR stage_at = $14)`,
		key, epoch, next.Every.Microseconds(), next.Safe, next.Refused, next.Stairs, next.Held, next.Calm,
		next.MarkAt, next.MarkSent, next.MarkLimited, row.MarkAt, row.Every.Microseconds(), stageAt(row), stageAt(next), next.StageSent, prevAt(next), next.PrevSent)
	if err != nil {
		return fmt.Errorf("step the learned rate of quota %s in %s: %w", key, q.db.path, err)
	}
	return nil
}

// stageAt is the row's stage_at during slow start, nil outside it (the
// step then neither compares nor keeps it).
func stageAt(r quotaRow) *time.Time {
	if !r.Starting || r.Every <= 0 {
		return nil
	}
	return &r.StageAt
}

// prevAt is the row's prev_at: NULL outside slow start.
func prevAt(r quotaRow) *time.Time {
	if !r.Starting || r.Every <= 0 {
		return nil
	}
	return &r.PrevAt
}

// Congestion is what OnRateLimited found.
type Congestion struct {
	// Epoch is the key's epoch after the call.
	Epoch int64
	// First is true for the one 429 that started this event (raised the
	// epoch); false for every later 429 of calls reserved before it.
	First bool
	// Decreases is how many new epochs this process has now seen: apply
	// that many decreases (exactly one per event per process).
	Decreases int
	// Paced: as Grant.Paced, after this 429.
	Paced bool
}

// ErrUnknownQuota is returned by OnRateLimited for a key never reserved
// or set.
var ErrUnknownQuota = errors.New("unknown quota key")

// OnRateLimited reports a 429 for a call whose slot was reserved at
// epoch (Grant.Epoch), with the server's retry delay cooldown (0 if
// none: the caller's default; the longest is read as the quota's
// window). Only a call reserved at the current epoch starts a congestion
// event: it raises the epoch by one and applies the fleet's rate law
// once. Every 429 pushes the key's schedule at least cooldown into the
// future, so the whole fleet waits it out. One transaction: the row's
// lock is held only while the law computes.
func (q *SharedQuota) OnRateLimited(ctx context.Context, key string, epoch int64, cooldown time.Duration) (Congestion, error) {
	cooldown = max(cooldown, 0)
	var c Congestion
	var paced bool
	var coolUntil time.Time
	err := q.db.tx(ctx, func(tx pgx.Tx) error {
		var cur, tauUS int64
		r, now, err := scanRow(tx.QueryRow(ctx, `SELECT q.epoch, q.tau_us, `+rowColumns+` FROM quota q WHERE q.key = $1 FOR UPDATE`, key), &cur, &tauUS)
		if err != nil {
			return err
		}
		c.Epoch, c.First = cur, cur == epoch
		if c.First {
			c.Epoch++
		}
		r = r.limited(now, c.First, cooldown, time.Duration(tauUS)*time.Microsecond, q.probeEvery())
		paced, coolUntil = r.Every > 0, cooling(r, now)
		_, err = tx.Exec(ctx, `UPDATE quota SET epoch = $2, tat = $3, cooldown_until = $4, limited = $5, window_us = $6,
				every_us = $7, safe_rate = $8, refused_rate = $9, stairs = $10, held = $11, calm = $12,
				mark_at = $13, mark_sent = $14, mark_limited = $15, bounded = $16
			WHERE key = $1`,
			key, c.Epoch, r.Tat, r.CooldownUntil, r.Limited, r.Window.Microseconds(),
			r.Every.Microseconds(), r.Safe, r.Refused, r.Stairs, r.Held, r.Calm, r.MarkAt, r.MarkSent, r.MarkLimited, r.Bounded)
		return err
	})
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return c, fmt.Errorf("rate limited on quota %s: %w (reserve a slot first)", key, ErrUnknownQuota)
		}
		return c, fmt.Errorf("record rate limit of quota %s in %s: %w", key, q.db.path, err)
	}
	c.Decreases = q.observe(key, c.Epoch, coolUntil)
	c.Paced = paced
	return c, nil
}
