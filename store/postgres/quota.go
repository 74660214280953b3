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
//     however many workers share it, when the rate is known;
//   - a congestion epoch: the first 429 of an event raises it once, for
//     the whole fleet, and pushes the schedule past the server's retry
//     delay, so every process waits, and each applies one decrease per
//     new epoch (shared, synchronous feedback) instead of every 429 of
//     every process decreasing on its own.
//
// Reserve and OnRateLimited are each one statement on one row: the row
// lock orders concurrent clients, and only the database clock is read.
// A SharedQuota is safe for concurrent use; each process has its own
// (its record of the epochs it has seen is per process).
type SharedQuota struct {
	db *DB
	mu sync.Mutex
	// seen is the newest epoch this process has seen per key.
	seen map[string]int64
}

// NewSharedQuota returns the quota shared through db's database. Keys
// are global to the schema, so pipelines in one schema share them.
func NewSharedQuota(db *DB) *SharedQuota {
	return &SharedQuota{db: db, seen: map[string]int64{}}
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
}

// observe records epoch for key and returns how many epochs are new to
// this process.
func (q *SharedQuota) observe(key string, epoch int64) int {
	q.mu.Lock()
	defer q.mu.Unlock()
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

// SetRate sets key's pace: one unit of cost every every (zero: the rate
// is unknown, only cooldowns delay), with burst units allowed at once
// (at least 1). It takes effect for the next reservation, fleet-wide.
// The quota table is unlogged (a schedule is worth no fsync): a server
// crash empties it, so each run sets its rates when it starts.
func (q *SharedQuota) SetRate(ctx context.Context, key string, every time.Duration, burst int) error {
	if every < 0 {
		return fmt.Errorf("quota %s: negative interval %v", key, every)
	}
	if burst < 1 {
		burst = 1
	}
	tau := every * time.Duration(burst-1)
	_, err := q.db.pool.Exec(ctx, `INSERT INTO quota (key, every_us, tau_us) VALUES ($1, $2, $3)
		ON CONFLICT (key) DO UPDATE SET every_us = EXCLUDED.every_us, tau_us = EXCLUDED.tau_us`,
		key, every.Microseconds(), tau.Microseconds())
	if err != nil {
		return fmt.Errorf("set quota %s in %s: %w", key, q.db.path, err)
	}
	return nil
}

// Reserve books the next slot of key for a call costing cost units (1
// for a request; tokens when pacing tokens) and says how long to wait
// for it. A slot is booked even if the caller then gives up.
func (q *SharedQuota) Reserve(ctx context.Context, key string, cost float64) (Grant, error) {
	if cost < 0 {
		return Grant{}, fmt.Errorf("quota %s: negative cost %v", key, cost)
	}
	var waitUS, epoch int64
	err := q.db.pool.QueryRow(ctx, `INSERT INTO quota AS q (key, tat) VALUES ($1, now())
		ON CONFLICT (key) DO UPDATE SET tat = greatest(q.tat, now()) + q.every_us * $2::float8 * interval '1 microsecond'
		RETURNING greatest(0, (extract(epoch FROM q.tat - q.every_us * $2::float8 * interval '1 microsecond'
			- q.tau_us * interval '1 microsecond' - now()) * 1000000)::bigint), q.epoch`, key, cost).Scan(&waitUS, &epoch)
	if err != nil {
		return Grant{}, fmt.Errorf("reserve quota %s in %s: %w", key, q.db.path, err)
	}
	return Grant{Wait: time.Duration(waitUS) * time.Microsecond, Epoch: epoch, Decreases: q.observe(key, epoch)}, nil
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
}

// ErrUnknownQuota is returned by OnRateLimited for a key never reserved
// or set.
var ErrUnknownQuota = errors.New("unknown quota key")

// OnRateLimited reports a 429 for a call whose slot was reserved at
// epoch (Grant.Epoch). Only a call reserved at the current epoch starts
// a congestion event: it raises the epoch by one. Every 429 pushes the
// key's schedule at least cooldown (the server's retry delay) into the
// future, so the whole fleet waits it out.
func (q *SharedQuota) OnRateLimited(ctx context.Context, key string, epoch int64, cooldown time.Duration) (Congestion, error) {
	if cooldown < 0 {
		cooldown = 0
	}
	var c Congestion
	err := q.db.pool.QueryRow(ctx, `WITH old AS (SELECT key, epoch FROM quota WHERE key = $1 FOR UPDATE)
		UPDATE quota q SET epoch = q.epoch + (old.epoch = $2)::int,
			cooldown_until = greatest(q.cooldown_until, now() + $3 * interval '1 microsecond'),
			tat = greatest(q.tat, now() + ($3 + q.tau_us) * interval '1 microsecond')
		FROM old WHERE q.key = old.key
		RETURNING q.epoch, old.epoch = $2`, key, epoch, cooldown.Microseconds()).Scan(&c.Epoch, &c.First)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return c, fmt.Errorf("rate limited on quota %s: %w (reserve a slot first)", key, ErrUnknownQuota)
		}
		return c, fmt.Errorf("record rate limit of quota %s in %s: %w", key, q.db.path, err)
	}
	c.Decreases = q.observe(key, c.Epoch)
	return c, nil
}
