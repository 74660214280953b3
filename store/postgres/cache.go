package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// The answer cache and the money ledger, as the bbolt store keeps them
// (store/cache.go): both are written only by a commit, in the
// transaction of the transitions they come from.
//
//	answer         (stage, key) -> output and the usage it was billed
//	ledger         (stage, shard) -> spent, saved (nanodollars), paid, cached
//	answer_flight  (stage, key) -> the worker buying it, until when
//
// A worker buys a key only while it holds the key's flight (TakeFlight),
// so the fleet asks each question once (see doc.go for when it may not).
// If two answers for one key are committed all the same, the first is
// kept (ON CONFLICT DO NOTHING), and both results stand.
var (
	_ pipeline.AnswerCache  = (*DB)(nil)
	_ pipeline.Ledgers      = (*DB)(nil)
	_ pipeline.QueueCounter = (*DB)(nil)
)

// CachedAnswer returns the answer committed under (stage, key) by a
// transition that carried the key, with the usage it was billed.
func (db *DB) CachedAnswer(stage, key string) (pipeline.Result, bool, error) {
	var res pipeline.Result
	var out []byte
	err := db.pool.QueryRow(db.ctx, `SELECT output, prompt, candidate, total FROM answer WHERE stage = $1 AND key = $2`, stage, key).
		Scan(&out, &res.Usage.PromptTokens, &res.Usage.CandidateTokens, &res.Usage.TotalTokens)
	if errors.Is(err, pgx.ErrNoRows) {
		return pipeline.Result{}, false, nil
	}
	if err != nil {
		return pipeline.Result{}, false, fmt.Errorf("read the cached answer %s at %s from %s: %w", key, stage, db.path, err)
	}
	res.Output = out
	return res, true, nil
}

// Ledgers returns each stage's lifetime spend, savings and answer counts,
// as committed. A stage that never spent nor saved is absent.
func (db *DB) Ledgers() (map[string]pipeline.Ledger, error) {
	rows, _ := db.pool.Query(db.ctx, `SELECT stage, sum(spent)::bigint, sum(saved)::bigint, sum(paid)::bigint, sum(cached)::bigint
		FROM ledger GROUP BY stage`)
	out := map[string]pipeline.Ledger{}
	var stage string
	var e pipeline.LedgerSum
	_, err := pgx.ForEachRow(rows, []any{&stage, &e.Spent, &e.Saved, &e.Paid, &e.Cached}, func() error {
		out[stage] = e.Ledger()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the money ledger from %s: %w", db.path, err)
	}
	return out, nil
}

// QueuedThrough is how many items are queued at stage or at an earlier
// one: what is left to go through it, leased or not.
func (db *DB) QueuedThrough(stage string) (int, error) {
	si, err := db.stageIndex(stage)
	if err != nil {
		return 0, err
	}
	var n int
	if err := db.pool.QueryRow(db.ctx, `SELECT count(*) FROM todo WHERE stage <= $1`, si).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the items left before %s in %s: %w", stage, db.path, err)
	}
	return n, nil
}

// moneyDelta is what applied transitions add to the answer cache and the
// ledger, queued with the rest of their commit.
type moneyDelta struct {
	ledger                  map[string]pipeline.LedgerSum
	ansStages, ansKeys      []string
	ansOut                  [][]byte
	ansPrompt, ansCandidate []int64
	ansTotal                []int64
}

// add records applied transition t: its answer under its cache key (a
// Succeeded transition that bought it), its money in its stage's ledger.
func (d *moneyDelta) add(t *pipeline.Transition) {
	if t.Outcome == pipeline.Succeeded && t.CacheKey != "" && !t.Cached {
		u := t.Result.Usage
		d.ansStages, d.ansKeys, d.ansOut = append(d.ansStages, t.Stage), append(d.ansKeys, t.CacheKey), append(d.ansOut, nonNil(t.Result.Output))
		d.ansPrompt, d.ansCandidate, d.ansTotal = append(d.ansPrompt, u.PromptTokens), append(d.ansCandidate, u.CandidateTokens), append(d.ansTotal, u.TotalTokens)
	}
	if t.CostUSD == 0 && !t.Cached && t.Usage == (pipeline.Usage{}) {
		return
	}
	if d.ledger == nil {
		d.ledger = map[string]pipeline.LedgerSum{}
	}
	e := d.ledger[t.Stage]
	e.AddTransition(t)
	d.ledger[t.Stage] = e
}

// addLedgers adds whole ledgers (a copy from another store).
func (d *moneyDelta) addLedgers(ls map[string]pipeline.Ledger) {
	for stage, l := range ls {
		if d.ledger == nil {
			d.ledger = map[string]pipeline.LedgerSum{}
		}
		e := d.ledger[stage]
		e.AddLedger(l)
		d.ledger[stage] = e
	}
}

// queue adds the statements that write d to b. Answers already there are
// kept: the first commit of a key wins, in any process. Ledger rows are
// spread over shards as the usage rows are, in sorted order.
func (d *moneyDelta) queue(b *pgx.Batch, shard int16) {
	if len(d.ansKeys) > 0 {
		d.sortAnswers()
		b.Queue(`INSERT INTO answer (stage, key, output, prompt, candidate, total)
			SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[], $5::bigint[], $6::bigint[])
			ON CONFLICT (stage, key) DO NOTHING`,
			d.ansStages, d.ansKeys, d.ansOut, d.ansPrompt, d.ansCandidate, d.ansTotal)
	}
	if len(d.ledger) == 0 {
		return
	}
	var stages []string
	var spent, saved, paid, cached []int64
	for _, s := range slices.Sorted(maps.Keys(d.ledger)) {
		e := d.ledger[s]
		stages = append(stages, s)
		spent, saved, paid, cached = append(spent, int64(e.Spent)), append(saved, int64(e.Saved)), append(paid, e.Paid), append(cached, e.Cached)
	}
	b.Queue(`INSERT INTO ledger (stage, shard, spent, saved, paid, cached)
		SELECT s, $2, a, b, c, d FROM unnest($1::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[]) AS u(s, a, b, c, d)
		ON CONFLICT (stage, shard) DO UPDATE SET spent = ledger.spent + EXCLUDED.spent, saved = ledger.saved + EXCLUDED.saved,
			paid = ledger.paid + EXCLUDED.paid, cached = ledger.cached + EXCLUDED.cached`,
		stages, shard, spent, saved, paid, cached)
}

// sortAnswers orders the answers by (stage, key): two commits inserting
// the same keys wait on each other in one order, never in a cycle.
func (d *moneyDelta) sortAnswers() {
	order := make([]int, len(d.ansKeys))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		if c := strings.Compare(d.ansStages[a], d.ansStages[b]); c != 0 {
			return c
		}
		return strings.Compare(d.ansKeys[a], d.ansKeys[b])
	})
	d.ansStages, d.ansKeys, d.ansOut = permute(d.ansStages, order), permute(d.ansKeys, order), permute(d.ansOut, order)
	d.ansPrompt, d.ansCandidate, d.ansTotal = permute(d.ansPrompt, order), permute(d.ansCandidate, order), permute(d.ansTotal, order)
}

func permute[T any](xs []T, order []int) []T {
	out := make([]T, len(order))
	for i, j := range order {
		out[i] = xs[j]
	}
	return out
}

// ForEachAnswer calls fn with every answer cached at stage, in key
// order: what `sawtooth copy` moves.
func (db *DB) ForEachAnswer(stage string, fn func(key string, res pipeline.Result) error) error {
	type keyed struct {
		key string
		res pipeline.Result
	}
	return page(db, func(after, from string) ([]keyed, func(keyed) string, error) {
		rows, _ := db.pool.Query(db.ctx, `SELECT key, output, prompt, candidate, total FROM answer
			WHERE stage = $1 AND key `+from+` $2 ORDER BY key LIMIT $3`, stage, after, pageSize)
		var out []keyed
		var k keyed
		_, err := pgx.ForEachRow(rows, []any{&k.key, &k.res.Output, &k.res.Usage.PromptTokens, &k.res.Usage.CandidateTokens, &k.res.Usage.TotalTokens}, func() error {
			out = append(out, k)
			k = keyed{}
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("read the answer cache of %s from %s: %w", stage, db.path, err)
		}
		return out, func(k keyed) string { return k.key }, nil
	}, func(k keyed) error { return fn(k.key, k.res) })
}

// RestoreAnswers caches answers (key -> answer) at stage, in one
// transaction; a key already cached keeps its answer.
func (db *DB) RestoreAnswers(stage string, answers map[string]pipeline.Result) error {
	if _, err := db.stageIndex(stage); err != nil {
		return err
	}
	var d moneyDelta
	for key, res := range answers {
		d.add(&pipeline.Transition{Stage: stage, Outcome: pipeline.Succeeded, CacheKey: key, Result: res})
	}
	b := &pgx.Batch{}
	d.queue(b, 0)
	if b.Len() == 0 {
		return nil
	}
	if err := db.pool.SendBatch(db.ctx, b).Close(); err != nil {
		return fmt.Errorf("restore %d cached answers of %s into %s: %w", len(answers), stage, db.path, err)
	}
	return nil
}

// AddLedgers adds ls to the stages' lifetime ledgers.
func (db *DB) AddLedgers(ls map[string]pipeline.Ledger) error {
	var d moneyDelta
	d.addLedgers(ls)
	b := &pgx.Batch{}
	d.queue(b, db.nextShard())
	if b.Len() == 0 {
		return nil
	}
	if err := db.pool.SendBatch(db.ctx, b).Close(); err != nil {
		return fmt.Errorf("add to the money ledgers in %s: %w", db.path, err)
	}
	return nil
}

var _ pipeline.AnswerFlights = (*DB)(nil)

// TakeFlight makes this worker (Options.Owner) the fleet's buyer of
// (stage, key) until lease from now on the database clock, unless
// another worker's flight of it has not ended (pipeline.AnswerFlights):
// a flight ends at its lease's end, or with the session of its worker
// (a dead worker's flight is taken over as its claims are).
// Flights live in an unlogged table: a server crash forgets them, and
// the worst that follows is one key bought twice.
func (db *DB) TakeFlight(ctx context.Context, stage, key string, lease time.Duration) (bool, error) {
	if lease <= 0 {
		return false, fmt.Errorf("take the answer flight %s at %s: %w (got %v)", key, stage, errLease, lease)
	}
	rows, _ := db.pool.Query(ctx, `INSERT INTO answer_flight AS f (stage, key, owner, until, session) VALUES ($1, $2, $3, `+leaseSQL(4)+`, $5)
		ON CONFLICT (stage, key) DO UPDATE SET owner = EXCLUDED.owner, until = EXCLUDED.until, session = EXCLUDED.session
		WHERE f.until <= now() OR f.owner = EXCLUDED.owner OR (f.session IS NOT NULL AND NOT EXISTS (
			SELECT FROM worker_session s WHERE s.id = f.session AND `+aliveSQL+`))
		RETURNING true`, stage, key, db.owner, lease.Microseconds(), db.sessionArg())
	got, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil {
		return false, fmt.Errorf("take the answer flight %s at %s in %s: %w", key, stage, db.path, err)
	}
	return len(got) == 1, nil
}

// LandFlight ends this worker's flight of (stage, key), if it holds it.
func (db *DB) LandFlight(ctx context.Context, stage, key string) error {
	if _, err := db.pool.Exec(ctx, `DELETE FROM answer_flight WHERE stage = $1 AND key = $2 AND owner = $3`, stage, key, db.owner); err != nil {
		return fmt.Errorf("end the answer flight %s at %s in %s: %w", key, stage, db.path, err)
	}
	return nil
}

// flights are (stage, key) pairs whose flights a commit ends.
type flights struct{ stages, keys []string }

func (f *flights) add(stage, key string) {
	f.stages, f.keys = append(f.stages, stage), append(f.keys, key)
}

// queueLand adds the statement that ends owner's flights of f: a commit
// that carries an answer ends its flight in its transaction, so whoever
// takes the flight next finds the answer.
func (f *flights) queueLand(b *pgx.Batch, owner string) {
	if len(f.keys) == 0 {
		return
	}
	b.Queue(`DELETE FROM answer_flight f USING unnest($2::text[], $3::text[]) AS u(stage, key)
		WHERE f.stage = u.stage AND f.key = u.key AND f.owner = $1`, owner, f.stages, f.keys)
}
