package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// clients returns n SharedQuotas, each on its own handle of the pipeline
// at url: n processes of a fleet.
func clients(t *testing.T, url string, n int) []*SharedQuota {
	t.Helper()
	out := make([]*SharedQuota, n)
	for i := range out {
		out[i] = NewSharedQuota(worker(t, url, fmt.Sprint("client", i)))
		// The tests read the schedule's slots hours ahead: book them all.
		out[i].BookAhead = 1000 * time.Hour
	}
	return out
}

// TestSharedQuota_OneDecreasePerEvent: every client gets many 429s at
// once for calls reserved in one epoch; the fleet sees one event (the
// epoch rises by one, one 429 starts it) and each client decreases
// exactly once. A late 429 of a call reserved before the event changes
// nothing.
func TestSharedQuota_OneDecreasePerEvent(t *testing.T) {
	const n, perClient = 4, 8
	_, u := openNew(t, Options{})
	qs := clients(t, u, n)
	ctx := context.Background()
	const key = "project-a/gemini-flash"
	oldest := Grant{}
	for event := range 3 {
		grants := make([]Grant, n)
		for i, q := range qs {
			g, err := q.Reserve(ctx, key, 1)
			if err != nil {
				t.Fatal(err)
			}
			if g.Epoch != int64(event) || g.Decreases != 0 {
				t.Fatalf("event %d: client %d reserved at epoch %d with %d decreases pending, want epoch %d and 0", event, i, g.Epoch, g.Decreases, event)
			}
			grants[i] = g
		}
		if event == 0 {
			oldest = grants[0]
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		firsts, decreases := 0, make([]int, n)
		errs := make(chan error, n*perClient)
		for i, q := range qs {
			for range perClient {
				wg.Go(func() {
					c, err := q.OnRateLimited(ctx, key, grants[i].Epoch, time.Millisecond)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					defer mu.Unlock()
					if c.First {
						firsts++
					}
					decreases[i] += c.Decreases
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if firsts != 1 {
			t.Errorf("event %d: %d of %d 429s started an event, want 1", event, firsts, n*perClient)
		}
		if want := []int{1, 1, 1, 1}; !slices.Equal(decreases, want) {
			t.Errorf("event %d: decreases per client %v, want %v", event, decreases, want)
		}
	}
	late, err := qs[0].OnRateLimited(ctx, key, oldest.Epoch, 0)
	if err != nil || late.First || late.Decreases != 0 || late.Epoch != 3 {
		t.Fatalf("a late 429 from epoch 0: %+v, %v; want epoch 3, no event, no decrease", late, err)
	}
	// A server crash empties the unlogged table: epochs restart at 0,
	// and the next event is still one decrease.
	sql(t, u, `TRUNCATE quota`)
	g, err := qs[0].Reserve(ctx, key, 1)
	if err != nil || g.Epoch != 0 || g.Decreases != 0 {
		t.Fatalf("after the reset: %+v, %v", g, err)
	}
	if c, err := qs[0].OnRateLimited(ctx, key, g.Epoch, 0); err != nil || !c.First || c.Decreases != 1 {
		t.Fatalf("the first event after the reset: %+v, %v; want one decrease", c, err)
	}
	if _, err := qs[0].OnRateLimited(ctx, "never-reserved", 0, 0); !errors.Is(err, ErrUnknownQuota) {
		t.Fatalf("429 on an unknown key: %v", err)
	}
}

// TestSharedQuota_PacesTheFleet: at one slot an hour with a burst of 2,
// the k-th of many concurrent reservations from several clients waits
// k-2 hours (the first two at once), whoever asks: the schedule is one.
// The tolerance (a minute either way) only absorbs the database clock
// moving while the test runs (each statement reads its own now()).
func TestSharedQuota_PacesTheFleet(t *testing.T) {
	const n, each = 3, 4
	_, u := openNew(t, Options{})
	qs := clients(t, u, n)
	ctx := context.Background()
	if err := qs[0].SetRate(ctx, "k", time.Hour, 2); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var waits []time.Duration
	var wg sync.WaitGroup
	for _, q := range qs {
		wg.Go(func() {
			for range each {
				g, err := q.Reserve(ctx, "k", 1)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				waits = append(waits, g.Wait)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(waits)
	for k, w := range waits {
		want := time.Duration(max(k-1, 0)) * time.Hour
		if w > want+time.Minute || w < want-time.Minute {
			t.Errorf("reservation %d waits %v, want %v (all: %v)", k+1, w, want, waits)
		}
	}
	// A congestion cooldown delays even an unpaced key.
	if _, err := qs[1].Reserve(ctx, "unpaced", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := qs[1].OnRateLimited(ctx, "unpaced", 0, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	g, err := qs[2].Reserve(ctx, "unpaced", 1)
	if err != nil || g.Wait < 2*time.Hour-time.Minute || g.Wait > 2*time.Hour {
		t.Fatalf("after a 2 h cooldown another client waits %v, %v", g.Wait, err)
	}
}

// readRow reads key's quota row as the law sees it.
func readRow(t *testing.T, q *SharedQuota, key string) quotaRow {
	t.Helper()
	r, _, err := scanRow(q.db.pool.QueryRow(context.Background(), `SELECT `+rowColumns+` FROM quota q WHERE q.key = $1`, key))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSharedQuota_LearnsTheRateOnce: with the rate unknown, the first
// grant starts the fleet's slow start, one schedule for every process;
// the first 429 of an event, however many come at once from several
// processes, ends it and applies the law once: the fleet is then paced
// just under what the quota admitted (the grants less the 429s, over
// half an answer lag at least: here an hour, the grants moved an hour
// back so that the rate read does not depend on how fast the test
// runs).
func TestSharedQuota_LearnsTheRateOnce(t *testing.T) {
	const n, grants = 4, 60
	_, u := openNew(t, Options{})
	qs := clients(t, u, n)
	ctx := context.Background()
	for _, q := range qs {
		q.ProbeEvery = 2 * time.Hour
	}
	var gs []Grant
	for i := range grants {
		g, err := qs[i%n].Reserve(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	if r := readRow(t, qs[0], "k"); !r.Starting || r.Every <= 0 || r.Every > everyFor(fleetStartRate) {
		t.Fatalf("after %d grants: starting %v, every %s; want the fleet's slow start, at %v a second or more", grants, r.Starting, r.Every, fleetStartRate)
	}
	sql(t, u, `UPDATE quota SET tat = now(), mark_at = now() - interval '1 hour', mark_sent = 0,
		stage_at = now() - interval '1 hour', stage_sent = 0, prev_at = now() - interval '1 hour', prev_sent = 0`)
	var wg sync.WaitGroup
	for i, q := range qs {
		wg.Go(func() {
			if _, err := q.OnRateLimited(ctx, "k", gs[i].Epoch, time.Hour); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	r := readRow(t, qs[0], "k")
	// The first 429 read 60 grants, 1 refused, over an hour: 59/3600
	// a second, paced at 97% of it; the 3 other 429s changed nothing,
	// and came during the event's cooldown (an hour), so they do not
	// count against the next measurement either.
	want := everyFor(fleetEventBackoff * float64(grants-1) / 3600)
	if r.Given != 0 || r.Every < want-time.Millisecond || r.Every > want+time.Millisecond || r.Limited != 1 {
		t.Fatalf("after one event of %d 429s: every %s (want %s), given %s, limited %d", n, r.Every, want, r.Given, r.Limited)
	}
	g, err := qs[1].Reserve(ctx, "k", 1)
	if err != nil || !g.Paced || g.Epoch != 1 {
		t.Fatalf("the next grant: %+v, %v; want paced at epoch 1", g, err)
	}
	// The climb after slow start lands (its step is not the slow start's).
	r = readRow(t, qs[1], "k")
	up := r
	up.Every, up.Stairs, up.MarkAt = (r.Every / 2).Truncate(time.Microsecond), 1, r.MarkAt.Add(time.Second)
	if err := qs[1].step(ctx, "k", 1, r, up); err != nil {
		t.Fatal(err)
	}
	if got := readRow(t, qs[0], "k"); got.Every != up.Every || got.Stairs != 1 {
		t.Fatalf("a step after the first event: every %s, stairs %d; want %s, 1", got.Every, got.Stairs, up.Every)
	}
	r = readRow(t, qs[0], "k")
	// A worker that starts without a rate keeps what the fleet learned;
	// a rate given and then dropped by a new run is forgotten (a worker
	// joining the live fleet without it keeps it).
	if err := qs[2].SetRate(ctx, "k", 0, 1); err != nil {
		t.Fatal(err)
	}
	if got := readRow(t, qs[0], "k").Every; got != r.Every {
		t.Fatalf("a worker joining without a rate moved the learned pace %s to %s", r.Every, got)
	}
	if err := qs[2].SetRate(ctx, "k", time.Second, 1); err != nil {
		t.Fatal(err)
	}
	if r := readRow(t, qs[0], "k"); r.Every != time.Second || r.Given != time.Second {
		t.Fatalf("a given rate: every %s, given %s", r.Every, r.Given)
	}
	if err := qs[2].SetRate(ctx, "k", 0, 1); err != nil {
		t.Fatal(err)
	}
	if r := readRow(t, qs[0], "k"); r.Every != time.Second || r.Given != time.Second {
		t.Fatalf("a worker joining without the given rate: every %s, given %s; want 1s", r.Every, r.Given)
	}
	// A new run: no grant for longer than an answer lag (ProbeEvery).
	sql(t, u, `UPDATE quota SET tat = now() - interval '3 hours'`)
	if err := qs[2].SetRate(ctx, "k", 0, 1); err != nil {
		t.Fatal(err)
	}
	if r := readRow(t, qs[0], "k"); r.Every != 0 || r.Given != 0 {
		t.Fatalf("the given rate dropped: every %s, given %s; want unknown", r.Every, r.Given)
	}
}

// TestSharedQuota_OneStepForTheFleet: two processes that both see the
// learned rate held long enough race to take the law's step; the first
// wins and the other's step, computed from the same row, is dropped, so
// N processes do not climb N times faster.
func TestSharedQuota_OneStepForTheFleet(t *testing.T) {
	_, u := openNew(t, Options{})
	qs := clients(t, u, 2)
	ctx := context.Background()
	g, err := qs[0].Reserve(ctx, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	row := readRow(t, qs[0], "k")
	first, second := row, row
	first.Every, first.Stairs = 10*time.Millisecond, 1
	second.Every, second.Stairs = 5*time.Millisecond, 2
	first.MarkAt, second.MarkAt = row.MarkAt.Add(time.Second), row.MarkAt.Add(2*time.Second)
	for _, c := range []struct {
		q    *SharedQuota
		next quotaRow
	}{{qs[0], first}, {qs[1], second}} {
		if err := c.q.step(ctx, "k", g.Epoch, row, c.next); err != nil {
			t.Fatal(err)
		}
	}
	if got := readRow(t, qs[1], "k"); got.Every != first.Every || got.Stairs != 1 {
		t.Fatalf("after two steps from one row: every %s, stairs %d; want the first's (%s, 1)", got.Every, got.Stairs, first.Every)
	}
}

// TestSharedQuota_StaleSlot: a slot booked before another process's 429
// pushed the schedule past it is stale once this process hears of the
// 429 (at its next reservation); booking it again does not count the
// call twice.
func TestSharedQuota_StaleSlot(t *testing.T) {
	_, u := openNew(t, Options{})
	qs := clients(t, u, 2)
	a, b := qs[0], qs[1]
	ctx := context.Background()
	if err := a.SetRate(ctx, "k", time.Hour, 1); err != nil {
		t.Fatal(err)
	}
	reserve := func(q *SharedQuota, rebook bool) Grant {
		t.Helper()
		f := q.Reserve
		if rebook {
			f = q.Rebook
		}
		g, err := f(ctx, "k", 1)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	reserve(a, false)
	soon := reserve(a, false) // an hour from now
	if a.Stale("k", soon) {
		t.Fatal("a slot is stale before any 429")
	}
	if _, err := b.OnRateLimited(ctx, "k", soon.Epoch, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if a.Stale("k", soon) {
		t.Fatal("stale before this process heard of the 429")
	}
	after := reserve(a, false)
	if !a.Stale("k", soon) || a.Stale("k", after) {
		t.Fatalf("after hearing of a 2 h cooldown: the slot in 1 h stale %v, the one after it %v; want true, false", a.Stale("k", soon), a.Stale("k", after))
	}
	granted := readRow(t, a, "k").Granted
	again := reserve(a, true)
	if got := readRow(t, a, "k").Granted; got != granted || a.Stale("k", again) {
		t.Fatalf("a rebooked slot: granted %d -> %d (want unchanged), stale %v", granted, got, a.Stale("k", again))
	}
}

// TestSharedQuota_PastCooldownStalesNoSlot: once a 429's cooldown has
// ended, a slot is stale for no later reservation. The row reads a past
// cooldown as now; taken for a cooldown, each reservation made it later
// than every slot already due, and the worker waiting for such a slot
// booked another, its first wasted (paced at 97/s, granted 72/s).
func TestSharedQuota_PastCooldownStalesNoSlot(t *testing.T) {
	_, u := openNew(t, Options{})
	qs := clients(t, u, 2)
	a, b := qs[0], qs[1]
	ctx := context.Background()
	if err := a.SetRate(ctx, "k", time.Millisecond, 1); err != nil {
		t.Fatal(err)
	}
	first, err := a.Reserve(ctx, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.OnRateLimited(ctx, "k", first.Epoch, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// The cooldown ended a minute ago; the schedule is free from now.
	sql(t, u, `UPDATE quota SET cooldown_until = now() - interval '1 minute', tat = now() - interval '1 minute'`)
	due, err := a.Reserve(ctx, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, cooled, err := a.Refresh(ctx, "k"); err != nil || !cooled {
		t.Fatalf("refresh after the event: cooled %v, err %v; want true, nil", cooled, err)
	}
	for i := range 3 {
		// Other calls of the process reserve later slots meanwhile.
		if _, err := a.Reserve(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
		if a.Stale("k", due) {
			t.Fatalf("after %d later reservations, a slot due with no 429 since its cooldown ended is stale", i+1)
		}
	}
}

// TestSharedQuota_NamedRateEndsSlowStart: a quota named by the 429
// that ends the fleet's slow start is its pace from then on: the event
// does not read the ramp as what the quota admitted (the mark moves to
// when the rate was named). And a worker naming or given the rate the
// row has already leaves what the fleet learned since.
func TestSharedQuota_NamedRateEndsSlowStart(t *testing.T) {
	_, u := openNew(t, Options{})
	qs := clients(t, u, 2)
	ctx := context.Background()
	var g Grant
	for range 20 {
		var err error
		if g, err = qs[0].Reserve(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	// The ramp took 10 s: read from its first grant, the quota admitted
	// 2 calls a second.
	sql(t, u, `UPDATE quota SET mark_at = mark_at - interval '10 seconds', stage_at = stage_at - interval '10 seconds',
		prev_at = prev_at - interval '10 seconds', tat = now()`)
	named := everyFor(97).Truncate(time.Microsecond)
	if err := qs[0].SetRate(ctx, "k", named, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := qs[0].OnRateLimited(ctx, "k", g.Epoch, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	r := readRow(t, qs[1], "k")
	if r.Every != named || r.Given != named {
		t.Fatalf("the 429 that named the quota ended slow start at every %s (given %s), want the named %s", r.Every, r.Given, named)
	}
	// The law has since slowed the fleet; another worker hears the same
	// name, and one joins with it as --rpm.
	sql(t, u, `UPDATE quota SET every_us = every_us * 2, safe_rate = 40, bounded = true`)
	for _, q := range qs {
		if err := q.SetRate(ctx, "k", named, 1); err != nil {
			t.Fatal(err)
		}
	}
	if r := readRow(t, qs[0], "k"); r.Every != 2*named || r.Safe != 40 || !r.Bounded {
		t.Fatalf("the rate named again: every %s, safe %v, bounded %v; want the learned %s, 40, true", r.Every, r.Safe, r.Bounded, 2*named)
	}
}

// TestSharedQuota_OneSlowStartForTheFleet: with the rate unknown, the
// first grant paces the whole fleet at the slow start's first rate; when
// a stage has been held and sent at, two processes that both see it race
// to double the pace and only the first lands (N workers climb as one),
// and the slots booked ahead keep their number at the new pace.
func TestSharedQuota_OneSlowStartForTheFleet(t *testing.T) {
	_, u := openNew(t, Options{})
	qs := clients(t, u, 2)
	ctx := context.Background()
	g, err := qs[0].Reserve(ctx, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	if r := readRow(t, qs[1], "k"); !r.Starting || r.Every != everyFor(fleetStartRate) || !g.Booked {
		t.Fatalf("after the first grant: starting %v, every %s, booked %v; want the slow start at %v a second", r.Starting, r.Every, g.Booked, fleetStartRate)
	}
	// The stage began a second before now and 20 calls went out since;
	// 10 slots are booked ahead at the stage's pace (a second). All of it
	// is set from the one instant the law is then read at: a stage shifted
	// from its own start, or a tat from a later now(), would read the time
	// a loaded machine took between the statements as a stage sent at
	// less than its pace.
	var now time.Time
	if err := qs[0].db.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	sql(t, u, `UPDATE quota SET stage_at = $1::timestamptz - interval '1 second', stage_sent = granted - 20,
		tat = $1::timestamptz + interval '1 second', mark_at = mark_at - interval '1 second'`, now)
	row := readRow(t, qs[0], "k")
	next, changed := row.held(now, DefaultFleetProbeEvery)
	if !changed || next.Every != everyFor(2*fleetStartRate) {
		t.Fatalf("a stage held and sent at: changed %v, every %s; want %s", changed, next.Every, everyFor(2*fleetStartRate))
	}
	// The second process's step from the same row would double again.
	again := next
	again.Every = everyFor(4 * fleetStartRate)
	for i, q := range qs {
		if err := q.step(ctx, "k", g.Epoch, row, []quotaRow{next, again}[i]); err != nil {
			t.Fatal(err)
		}
	}
	var after time.Time
	if err := qs[0].db.pool.QueryRow(ctx, `SELECT now()`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	got := readRow(t, qs[1], "k")
	if got.Every != everyFor(2*fleetStartRate) {
		t.Fatalf("two processes doubled from one row: every %s, want %s (one doubling)", got.Every, everyFor(2*fleetStartRate))
	}
	// The step rescales what is booked from its own now(), some instant s
	// between now and after: the tat (now + 1s) is s + (now + 1s - s)/2,
	// so 500ms plus half of (s - now) ahead of now. Bounded by the two
	// readings of the server's clock, not by how long a loaded machine
	// took between them.
	lo, hi := 500*time.Millisecond, 500*time.Millisecond+after.Sub(now)/2
	if ahead := got.Tat.Sub(now); ahead < lo-time.Millisecond || ahead > hi+time.Millisecond {
		t.Fatalf("10 slots booked a second ahead at 10 a second are %s ahead at 20 a second, want %s to %s (half the second, from the step's now)", ahead, lo, hi)
	}
}

// TestSharedQuota_NewRunStartsAtItsRate: a run started on a row no
// worker has reserved from for longer than any quota window starts at
// the rate it is given, even the one the last run was given: what that
// run's fleet learned under it (a pace the law lowered, the safe and
// refused rates) is of a fleet gone, and the given rate is where a run
// starts. A run started without a rate then forgets it.
func TestSharedQuota_NewRunStartsAtItsRate(t *testing.T) {
	_, u := openNew(t, Options{})
	qs := clients(t, u, 2)
	ctx := context.Background()
	given := 10 * time.Millisecond
	if err := qs[0].SetRate(ctx, "k", given, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := qs[0].Reserve(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	// The last run's law slowed its fleet; it ended an hour ago.
	sql(t, u, `UPDATE quota SET every_us = every_us * 3, safe_rate = 30, refused_rate = 33, bounded = true,
		tat = now() - interval '1 hour'`)
	if err := qs[1].SetRate(ctx, "k", given, 1); err != nil {
		t.Fatal(err)
	}
	if r := readRow(t, qs[0], "k"); r.Every != given || r.Safe != 0 || r.Refused != 0 || r.Bounded {
		t.Fatalf("a new run given %s: every %s, safe %v, refused %v, bounded %v; want %s and nothing learned",
			given, r.Every, r.Safe, r.Refused, r.Bounded, given)
	}
	sql(t, u, `UPDATE quota SET tat = now() - interval '1 hour'`)
	if err := qs[1].SetRate(ctx, "k", 0, 1); err != nil {
		t.Fatal(err)
	}
	if r := readRow(t, qs[0], "k"); r.Every != 0 || r.Given != 0 {
		t.Fatalf("a new run with no rate: every %s, given %s; want unknown", r.Every, r.Given)
	}
}

// TestSharedQuota_JoiningWithoutARateKeepsTheNamedOne: a worker that
// joins a live fleet (started, or restarted after a crash, with no
// --rpm) knows no rate: the quota a 429 named to the fleet stays its
// pace. Forgotten, the fleet went unpaced until the next 429 event.
func TestSharedQuota_JoiningWithoutARateKeepsTheNamedOne(t *testing.T) {
	_, u := openNew(t, Options{})
	qs := clients(t, u, 2)
	ctx := context.Background()
	named := everyFor(97).Truncate(time.Microsecond)
	if err := qs[0].SetRate(ctx, "k", named, 1); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := qs[0].Reserve(ctx, "k", 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := qs[1].SetRate(ctx, "k", 0, 1); err != nil {
		t.Fatal(err)
	}
	if r := readRow(t, qs[0], "k"); r.Every != named || r.Given != named {
		t.Fatalf("a worker joined with no rate: every %s, given %s; want the named %s", r.Every, r.Given, named)
	}
}
