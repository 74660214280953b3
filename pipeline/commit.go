package pipeline

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// pending is one result on its way to the committer.
type pending struct {
	stage int
	t     Transition
	// settled, if set, runs once the result left the committer
	// (committed or given up).
	settled func()
	// attempt is the claim's fencing token (a Store with Claimer).
	attempt int64
	// stale: the claim's entry was no longer held when the transition
	// was sent (its lease lost and counted, or claimed again since).
	stale bool
}

// backlog counts the paid results answered but not yet committed: what a
// kill would throw away and re-pay. Workers ask it before each call
// (admit), so a slow disk slows the calls instead of piling up answers.
// A result that billed nothing (a local stage's, a cached answer) is not
// counted: a kill re-does it for free, so it must not stop calls.
type backlog struct {
	mu sync.Mutex
	// arrived holds the arrival instant of each uncommitted result, oldest
	// first.
	arrived []time.Time
	// committed is closed and replaced after each commit, waking workers
	// held by admit.
	committed chan struct{}
}

func (b *backlog) init() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.arrived, b.committed = nil, make(chan struct{})
}

// admit returns once a new call may start: fewer than maxCount results wait
// for their commit and none has waited maxAge or longer. It returns false
// when ctx is done first. The age only grows until a commit lands, so
// admit waits for commits, never for a timer.
func (b *backlog) admit(ctx context.Context, clock Clock, maxCount int, maxAge time.Duration) bool {
	for {
		b.mu.Lock()
		n, committed := len(b.arrived), b.committed
		full := n >= maxCount || (n > 0 && clock.Now().Sub(b.arrived[0]) >= maxAge)
		b.mu.Unlock()
		if !full {
			return ctx.Err() == nil
		}
		select {
		case <-committed:
		case <-ctx.Done():
			return false
		}
	}
}

func (b *backlog) add(at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.arrived = append(b.arrived, at)
}

// done removes the n oldest paid results (committed, or dropped by a
// failed commit) and wakes the workers waiting in admit.
func (b *backlog) done(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.arrived = b.arrived[min(n, len(b.arrived)):]
	close(b.committed)
	b.committed = make(chan struct{})
}

// send hands a result to the committer; attempt is the claim's fencing
// token (a Store with Claimer; ignored otherwise).
func (r *Runner) send(i int, t Transition, attempt int64) { r.sendThen(i, t, attempt, nil) }

// sendThen is send, with settled run once the result left the committer.
func (r *Runner) sendThen(i int, t Transition, attempt int64, settled func()) {
	r.counters[i].pending.Add(1)
	if paid(t) {
		r.backlog.add(r.clock().Now())
	}
	p := pending{stage: i, t: t, settled: settled}
	if b := r.books[i]; b != nil {
		p.attempt, p.stale = attempt, !b.sent(t.Seq, attempt)
	}
	r.commitCh <- p
}

// paid reports whether t records a billed call, which a kill before its
// commit would throw away and pay again.
func paid(t Transition) bool { return t.Usage != (Usage{}) || t.CostUSD != 0 }

// committer is the single writer: it groups whatever transitions are
// waiting into one transaction, so throughput pays one fsync per batch,
// and counts an outcome only once it is durable. A failed commit is tried
// again (Store.Commit is idempotent) before the run fails; results whose
// commit failed are not dropped but carried into every later commit and
// tried a last time when the run ends, so a store that recovers still
// gets them. An outcome never counts, nor does its item move, unless its
// commit succeeded. A fleet worker's committer is fleetCommitter.
func (r *Runner) committer() {
	if _, ok := r.Store.(Claimer); ok {
		r.fleetCommitter()
		return
	}
	var (
		batch   []pending
		carried []pending // results whose commit failed, awaiting a later one
	)
	for p := range r.commitCh {
		batch = append(batch[:0], p)
	fill:
		for len(batch) < r.BatchSize {
			select {
			case p, ok := <-r.commitCh:
				if !ok {
					break fill
				}
				batch = append(batch, p)
			default:
				break fill
			}
		}
		// Results are committed even after a fatal error elsewhere: they
		// were paid for.
		carried = r.commitBatch(append(carried, batch...), len(carried) > 0)
	}
	if len(carried) > 0 {
		carried = r.commitBatch(carried, true)
		r.settle(carried, false) // given up: their items stay queued
	}
}

// commitBatch writes ps (once when once is set, else up to
// CommitAttempts times) and settles them when it succeeds. It returns ps
// when the commit failed for good, after stopping the run.
func (r *Runner) commitBatch(ps []pending, once bool) []pending {
	ts := make([]Transition, len(ps))
	for j, p := range ps {
		ts[j] = p.t
	}
	if err := r.commit(ts, once); err != nil {
		r.fail(fmt.Errorf("commit %d results (their items stay queued and will be called again): %w", len(ps), err))
		return ps
	}
	r.purse.commit(costOf(ps))
	r.settle(ps, true)
	return nil
}

// costOf is what the results in ps cost, in nanodollars.
func costOf(ps []pending) int64 {
	var n int64
	for _, p := range ps {
		n += toNanos(p.t.CostUSD)
	}
	return n
}

// settle finishes the books of results that left the committer:
// committed ones are counted and wake the next stage's dispatcher. (The
// purse counts their cost where they commit: see commitBatch and
// commitFleet.)
func (r *Runner) settle(ps []pending, committed bool) {
	notified := map[int]bool{}
	billed := 0
	for _, p := range ps {
		if paid(p.t) {
			billed++
		}
		c := r.counters[p.stage]
		if b := r.books[p.stage]; b != nil {
			b.settled(p.t.Seq, p.attempt)
		}
		if committed {
			r.countCommitted(c, p.t)
			if next := p.stage + 1; next < len(r.counters) && !notified[next] && p.t.Outcome == Succeeded {
				notified[next] = true
				select {
				case r.counters[next].notify <- struct{}{}:
				default:
				}
			}
		}
		if p.settled != nil {
			p.settled()
		}
		c.pending.Done()
	}
	r.backlog.done(billed)
}

// commit writes batch, trying up to CommitAttempts times (once when once
// is set) with a backoff of 1 s, 2 s, ... on the runner's clock between.
func (r *Runner) commit(batch []Transition, once bool) error {
	return r.retryCommit(len(batch), once, func() error { return r.Store.Commit(batch) })
}

// retryCommit calls try up to CommitAttempts times (once when once is
// set) with a backoff of 1 s, 2 s, ... on the runner's clock between.
func (r *Runner) retryCommit(n int, once bool, try func() error) error {
	attempts := r.CommitAttempts
	if once {
		attempts = 1
	}
	var err error
	for a := 1; a <= attempts; a++ {
		if err = try(); err == nil {
			return nil
		}
		if a < attempts {
			wait := time.Duration(1<<(a-1)) * time.Second
			r.log().Warn("commit failed; trying again", "results", n, "attempt", a, "wait", wait, "err", err)
			sleep(context.Background(), r.clock(), wait)
		}
	}
	return err
}

func (r *Runner) countCommitted(c *stageCounters, t Transition) {
	switch t.Outcome {
	case Succeeded:
		c.done.Add(1)
		if t.Cached {
			c.cached.Add(1)
			c.saved.Add(toNanos(t.SavedUSD))
		}
	case DeadLettered:
		c.dead.Add(1)
		c.deadMu.Lock()
		c.deadReasons[ReasonKey(t.Dead)]++
		c.deadMu.Unlock()
	}
}

// ReasonKey groups dead letters by cause: their class and message with the
// item-specific parts (quoted ids, numbers) masked.
func ReasonKey(d DeadLetter) string {
	msg := d.Message
	// Stages prefix messages with the item they are about; the group is
	// about the cause.
	if strings.HasPrefix(msg, "item ") {
		if i := strings.Index(msg, ": "); i > 0 && i < 200 {
			msg = msg[i+2:]
		}
	}
	var b strings.Builder
	inQuote := false
	for _, r := range msg {
		switch {
		case r == '"':
			if !inQuote {
				b.WriteString(`"…"`)
			}
			inQuote = !inQuote
		case inQuote:
		case r >= '0' && r <= '9':
			if s := b.String(); len(s) == 0 || s[len(s)-1] != '#' {
				b.WriteByte('#')
			}
		default:
			b.WriteRune(r)
		}
	}
	out := b.String()
	if len(out) > 200 {
		// Cut on a rune boundary: the key is shown and stored as text.
		cut := 200
		for cut > 0 && !utf8.RuneStart(out[cut]) {
			cut--
		}
		out = out[:cut] + "…"
	}
	return string(d.Class) + ": " + out
}
