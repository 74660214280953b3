package postgres

import (
	"time"
)

// The fleet's rate law, pure: a quota row's state and an event at an
// explicit time give the new state. No lock, no clock, no SQL: quota.go
// stores the state in the row and applies an event's change under the
// row's lock and a step's with a compare-and-set, so that one worker of
// the fleet, not N, takes each. It mirrors the single-process law of package limiter (law.go:
// measure what the quota admitted at an event, pace just under it,
// bisect between the rate proven safe and the rate refused, climb in
// stairs when nothing is refused), reduced to what a fleet can share
// through one row: the grants and 429s counted in the row stand for the
// successes each process would count on its own.

// Tuning of the fleet's rate law: the limiter package's values where they
// carry over (its virtual-time simulations chose them), more cautious
// where N workers pay for an overshoot (fleetlaw_sim_test.go).
const (
	// fleetEventBackoff multiplies the rate at a congestion event when
	// no rate is known safe: under what was refused, with room for the
	// timing of N processes' sends (a slot's call goes out a few
	// milliseconds late, more on a loaded host, and a window's quota
	// counts the bunching).
	fleetEventBackoff = 0.95
	// fleetProbeStair: with no refused rate known, the rate climbs in
	// stairs of this factor from the safe one, one per answer lag. Until
	// an event bounds the rate, each next stair's step is twice the last
	// (up to 1<<fleetMaxStair times), as the lone limiter's: slow start's
	// burst may have read the quota low. Once bounded, the climb is even
	// (the lone limiter keeps doubling; a fleet overshooting by 20% for
	// an answer lag costs N workers' worth of 429s), so a quota that
	// doubled is found in 15 lags.
	fleetProbeStair = 1.05
	fleetMaxStair   = 1
	// fleetBisectShare: the bisection between the safe rate and the
	// refused one stops when they are this share of the refused apart;
	// the fleet then holds the safe rate fleetReprobeLags answer lags
	// (twice as long after each look above that found nothing, up to
	// 1<<fleetMaxCalm times) before it looks for more.
	fleetBisectShare = 0.03
	fleetReprobeLags = 8
	fleetMaxCalm     = 4
	// fleetFellShare: a 429 at a rate the quota admitted less than this
	// share of means the quota fell: forget the safe rate.
	fleetFellShare = 0.85
	// fleetSentShare: a rate counts as held only while the fleet was
	// granted at least this share of it (pacing held the calls back);
	// sending less proves nothing about it.
	fleetSentShare = 0.9
	// fleetMinAdmitted is the fewest grants a measurement of the
	// admitted rate is read from.
	fleetMinAdmitted = 10
	// fleetMaxWindow bounds the quota window a retry delay is read as.
	fleetMaxWindow = 2 * time.Minute
	// fleetStartRate and fleetStartLag are the fleet's slow start, before
	// its first congestion event with no rate given: the row paces the
	// whole fleet from fleetStartRate grants a second and doubles the
	// pace every fleetStartLag the fleet sent at it, one schedule for N
	// workers as for one (N workers each doubling their own calls in
	// flight would climb N times as steep and overrun a quota by N
	// workers' bursts before the first 429 is read). A 429 answers at
	// once, so the lag need not wait for the calls' answers.
	fleetStartRate = 10.0
	fleetStartLag  = 250 * time.Millisecond
)

// quotaRow is the fleet's learned state of one quota key, as the quota
// table holds it. Every is the pace every worker keeps to through the
// row's GCRA schedule (zero: no rate known yet); the rest is how the law
// moves it.
type quotaRow struct {
	// Every is the interval between two grants of the fleet's schedule;
	// 0 while the rate is unknown. Given is the interval of a rate given
	// (--rpm) or named by a 429, 0 if none: the law paces no faster, and
	// starts there.
	Every, Given time.Duration
	// Tat is the schedule's next free slot (GCRA's theoretical arrival
	// time), CooldownUntil the end of the last 429's cooldown, which
	// pushed it: the grants booked between the two are not sent yet.
	Tat, CooldownUntil time.Time
	// Safe is the highest rate (grants a second) held for an answer lag
	// with no 429 since the quota last fell; Refused the rate last
	// refused, 0 when none is known. The quota's rate lies between.
	Safe, Refused float64
	// Bounded: an event has come at a paced rate (the first event only
	// ends slow start's burst, which says little about the rate).
	Bounded bool
	// Starting: the fleet's slow start, before the first congestion
	// event with no rate given (the row's epoch is 0). Every is then the
	// slow start's pace, doubled each fleetStartLag the fleet sent at it;
	// StageAt is when the current pace began, StageSent the calls sent
	// by then (the mark stays at the first grant: the first event reads
	// what the quota admitted over the whole slow start).
	Starting  bool
	StageAt   time.Time
	StageSent float64
	// PrevAt and PrevSent are StageAt and StageSent of the stage before
	// (the first event reads the last two stages as they went).
	PrevAt   time.Time
	PrevSent float64
	// Stairs counts the stairs climbed since the last event, Held the
	// rates proven safe since it, Calm the looks above the safe rate in
	// a row that were refused at once.
	Stairs, Held, Calm int
	// Granted and Limited count every grant of the schedule and every
	// 429 reported, forever. MarkAt is when the current rate began to be
	// held (the last event or step; the first grant), MarkSent and
	// MarkLimited the calls sent (see sent) and 429s counted then: the
	// differences are what the fleet sent and the quota admitted at
	// this rate.
	Granted, Limited int64
	MarkAt           time.Time
	MarkSent         float64
	MarkLimited      int64
	// Window is the longest retry delay a 429 has given: a quota counted
	// over a window answers an overshoot within one, so a rate must be
	// held that long to be proven.
	Window time.Duration
}

// rate is the paced grants a second, 0 when the rate is unknown.
func (r quotaRow) rate() float64 {
	if r.Every <= 0 {
		return 0
	}
	return float64(time.Second) / float64(r.Every)
}

// everyFor is the schedule's interval for rate grants a second.
func everyFor(rate float64) time.Duration {
	return max(time.Duration(float64(time.Second)/rate), time.Microsecond)
}

// answerLag is how long a rate is held before it counts as safe: at
// least minLag, and the quota's window when a retry delay showed a
// longer one.
func (r quotaRow) answerLag(minLag time.Duration) time.Duration {
	return max(minLag, r.Window)
}

// sent is the calls the fleet has sent by now: every grant but those
// booked in the schedule past now (and past a cooldown, which pushed the
// schedule without booking).
func (r quotaRow) sent(now time.Time) float64 {
	n := float64(r.Granted)
	from := now
	if r.CooldownUntil.After(from) {
		from = r.CooldownUntil
	}
	if r.Every > 0 && r.Tat.After(from) {
		n -= float64(r.Tat.Sub(from)) / float64(r.Every)
	}
	return n
}

// admittedRate is what the quota admitted a second between the mark and
// now: the calls sent since, less the 429s since, over the time since
// the mark, or denominator when longer (a short span after a burst reads
// the burst, not the rate). ok is false when too few calls went out to
// tell, or the span is shorter than minSpan.
func (r quotaRow) admittedRate(now time.Time, minSpan, denominator time.Duration) (rate float64, ok bool) {
	admitted := r.sent(now) - r.MarkSent - float64(r.Limited-r.MarkLimited)
	span := now.Sub(r.MarkAt)
	if r.MarkAt.IsZero() || admitted < fleetMinAdmitted || span < minSpan || span <= 0 {
		return 0, false
	}
	return admitted / max(span, denominator).Seconds(), true
}

// held is the law at a grant at now: once the current rate has been held
// for an answer lag (at least minLag) with no 429 while the fleet sent
// at it, it is safe, and the next is halfway to the rate last refused,
// or a stair above when none is known. It reports whether the row
// changed; the fleet applies the change once (see SharedQuota.step).
func (r quotaRow) held(now time.Time, minLag time.Duration) (quotaRow, bool) {
	if r.Starting {
		return r.started(now)
	}
	rate := r.rate()
	if rate <= 0 {
		return r, false
	}
	span := now.Sub(r.MarkAt)
	if span < r.answerLag(minLag) {
		return r, false
	}
	sent := (r.sent(now) - r.MarkSent) / span.Seconds()
	r.mark(now)
	if sent < fleetSentShare*rate {
		return r, true // not sending at the rate proves nothing about it
	}
	r.Safe = max(r.Safe, rate)
	r.Held++
	if r.Refused > 0 && r.Held > fleetReprobeLags<<r.Calm {
		r.Refused = 0 // long at the safe rate: look for more again
	}
	var next float64
	switch {
	case r.Refused == 0:
		step := fleetProbeStair - 1
		if !r.Bounded {
			step *= float64(int(1) << min(r.Stairs, fleetMaxStair))
		}
		next = r.Safe * (1 + step)
		r.Stairs++
	case r.Refused-r.Safe > fleetBisectShare*r.Refused:
		next = (r.Safe + r.Refused) / 2
	default:
		next = r.Safe
	}
	r.pace(now, r.capped(next))
	return r, true
}

// started is held during the fleet's slow start: the first grant sets
// the pace to fleetStartRate; each fleetStartLag at a pace the fleet
// sent at (its workers' calls in flight may bind first) doubles it.
func (r quotaRow) started(now time.Time) (quotaRow, bool) {
	rate := r.rate()
	if rate <= 0 {
		r.pace(now, everyFor(fleetStartRate))
		r.StageAt, r.StageSent = now, r.sent(now)
		r.PrevAt, r.PrevSent = r.StageAt, r.StageSent
		return r, true
	}
	span := now.Sub(r.StageAt)
	if span < fleetStartLag {
		return r, false
	}
	sent := (r.sent(now) - r.StageSent) / span.Seconds()
	if sent >= fleetSentShare*rate {
		r.pace(now, everyFor(2*rate))
		r.PrevAt, r.PrevSent = r.StageAt, r.StageSent
	}
	// Not sent at: the pace stays and the fleet is measured afresh.
	r.StageAt, r.StageSent = now, r.sent(now)
	return r, true
}

// startSent estimates the calls the fleet sent over the last span of
// its slow start: the last two stages' as counted, each earlier one's
// from its pace (half the next, fleetStartLag long), and no more than
// it sent since the first grant.
func (r quotaRow) startSent(now time.Time, span time.Duration) float64 {
	n := r.sent(now) - r.PrevSent
	back := span - now.Sub(r.PrevAt)
	for rate := r.rate() / 2; back > 0 && rate > fleetStartRate; back -= fleetStartLag {
		rate /= 2
		n += rate * min(back, fleetStartLag).Seconds()
	}
	return min(n, r.sent(now)-r.MarkSent)
}

// pace sets the schedule's interval at now. The slots booked past now
// (and past a cooldown) keep their number: the part of the schedule
// they fill is stretched or shrunk to the new interval, so that sent
// still counts them, and the fleet keeps to the new pace on average
// from now on (the slots already booked go out at the old one, the
// next ones fill the rest of that span at the new one).
func (r *quotaRow) pace(now time.Time, every time.Duration) {
	from := later(now, r.CooldownUntil)
	if r.Every > 0 && every > 0 && r.Tat.After(from) {
		r.Tat = from.Add(time.Duration(float64(r.Tat.Sub(from)) * float64(every) / float64(r.Every)))
	}
	r.Every = every
}

// given is the law when a rate is given (--rpm) or named by a 429's
// quota at now: every > 0 is the pace from now on, which the law never
// exceeds; 0 says the rate is unknown again. fresh: no worker has
// reserved from the row for longer than a quota window (see idle), so
// the rate starts a new fleet (a new run), whatever the row learned from
// the last one. To a live fleet, no rate or the rate the row has already
// is no news: a worker that joins with the fleet's --rpm, or with none
// (it knows no rate: a quota a 429 named to the fleet stays its pace),
// or hears a quota another worker heard first, must not undo what the
// fleet learned since. A new one resets what was learned, and, heard
// during slow start (a quota named by its first 429s), restarts the
// measurement at now: read from the mark at slow start's first grant,
// the ramp's slow first stages would count as what the quota admits, and
// the event of that 429 would pace the fleet far under the rate it was
// just told. From now, the event finds nothing measured yet and keeps
// the pace (see congested). It reports whether the row changed, and
// whether its mark moved.
func (r quotaRow) given(now time.Time, every time.Duration, fresh bool) (next quotaRow, changed, marked bool) {
	every = every.Truncate(time.Microsecond) // as the row keeps it
	news := every != 0 && every != r.Given
	if fresh {
		news = every != 0 || r.Given != 0
	}
	if !news {
		return r, false, false
	}
	starting := r.Starting && r.Every > 0
	r.Given = every
	r.pace(now, every)
	r.Safe, r.Refused, r.Stairs, r.Bounded = 0, 0, 0, false
	if every == 0 {
		return r, true, false
	}
	r.Starting = false // as the row reads it: no slow start under a given rate
	if starting {
		r.mark(now)
	}
	return r, true, starting
}

// idle says whether a row whose schedule's next free slot is tat (as
// stored: not read as now) has been reserved from by no worker for
// longer than the quota's window, and than an answer lag (at least
// minLag), at now: nothing the quota counted of the fleet that learned
// the row is left, and a rate set now starts a new one.
func (r quotaRow) idle(now, tat time.Time, minLag time.Duration) bool {
	return now.Sub(tat) > max(fleetMaxWindow, r.answerLag(minLag))
}

// capped is the schedule's interval for rate, no faster than a given
// rate.
func (r quotaRow) capped(rate float64) time.Duration {
	return max(everyFor(rate), r.Given)
}

// limited is the law at a 429 at now: of a call reserved at the
// current epoch (first: it starts a congestion event, which congested
// answers) or before it (a late 429 of an event already answered). Every
// 429 pushes the schedule past cooldown (the retry delay, or the
// caller's default), plus the burst tolerance tau: the whole fleet waits.
func (r quotaRow) limited(now time.Time, first bool, cooldown, tau, minLag time.Duration) quotaRow {
	cooldown = max(cooldown, 0)
	r.sawWindow(cooldown)
	if !now.Before(r.MarkAt) {
		// A 429 answers at once: its call went out since the mark and
		// counts against what the quota admitted since. (One reported
		// before the mark, during a cooldown, went out before it.)
		r.Limited++
	}
	if first {
		return r.congested(now, cooldown, tau, minLag)
	}
	r.push(now.Add(cooldown), tau)
	return r
}

// push moves the schedule past until (plus tau): no slot before it.
func (r *quotaRow) push(until time.Time, tau time.Duration) {
	if until.After(r.CooldownUntil) {
		r.CooldownUntil = until
	}
	if t := until.Add(tau); t.After(r.Tat) {
		r.Tat = t
	}
}

// congested is the law at the first 429 of a congestion event at now:
// the rate paced (or, before any, what the quota admitted) is refused;
// the fleet paces between the safe rate and it, or just under what the
// quota admitted since the last event when no rate is known safe, once
// the cooldown has passed (see limited). minLag is the shortest answer
// lag (see held).
func (r quotaRow) congested(now time.Time, cooldown, tau, minLag time.Duration) quotaRow {
	rate := r.rate()
	starting := r.Starting && rate > 0
	first := rate <= 0 || starting
	r.Starting = false
	// What the quota admitted at this rate, read over half an answer
	// lag at least: 429s of an overshoot come quicker than that, and the
	// events they start add up their spans until one is long enough.
	// Slow start's burst is all there is to read at the first event, and
	// a window's quota admits a burst above its rate: spread it over
	// half a lag.
	span := r.answerLag(minLag) / 2
	minSpan := span
	if first {
		minSpan = 0
	}
	admitted, measured := r.admittedRate(now, minSpan, span)
	if starting {
		// The fleet's slow start: what the quota admitted over the last
		// half lag, or the retry delay when longer (a window's quota
		// refuses once the window holds its quota: what went out over
		// about a window is about its rate), not over the whole start,
		// whose first stages sent far less.
		span = max(span, cooldown)
		n := r.startSent(now, span) - float64(r.Limited-r.MarkLimited)
		admitted, measured = n/span.Seconds(), n >= fleetMinAdmitted
	}
	if !first && !r.Bounded && !measured && r.Held == 0 && r.Stairs == 0 {
		// Within half a lag of the end of slow start (no step since),
		// before anything
		// could be measured at the pace it set: the quota's window still
		// holds the burst, and refuses what it would admit at that pace
		// once the burst has left it. The fleet waits; the pace stays.
		r.push(now.Add(cooldown), tau)
		return r
	}
	switch {
	case first:
		// The first event ends slow start's burst, which a window's
		// quota admits above its rate: no bound learned, but what it
		// admitted is about its rate.
		if !measured {
			// Too few calls to read a rate from (a quota of a handful
			// per window): unpaced, as before slow start was shared;
			// each worker's calls in flight fall once per event.
			r.pace(now, 0)
			r.push(now.Add(cooldown), tau)
			r.mark(later(now, r.CooldownUntil))
			return r
		}
		rate = admitted
	case measured && admitted < r.Safe*fleetFellShare:
		r.Safe, r.Calm = 0, 0 // it admits less than the safe rate now: the quota fell
	case rate <= r.Safe*1.001 && measured && admitted >= r.Safe*fleetEventBackoff:
		// Refused at the safe rate while the quota admits about it: the
		// safe rate was a hair above the quota's. Go just under it.
		r.Safe *= fleetEventBackoff
	case rate <= r.Safe*1.001:
		r.Safe, r.Calm = 0, 0 // refused at a rate it admitted: the quota fell
	case r.Safe > 0 && r.Stairs == 1:
		r.Calm = min(r.Calm+1, fleetMaxCalm) // the first stair refused: the quota did not grow
	case r.Stairs > 1:
		r.Calm = 0 // a stair held: the quota grew
	}
	r.Refused, r.Held, r.Stairs = rate, 0, 0
	r.Bounded = r.Bounded || !first
	if first {
		r.Refused = 0
	}
	var next float64
	switch {
	case r.Safe > 0 && r.Refused-r.Safe > fleetBisectShare*r.Refused:
		next = (r.Safe + r.Refused) / 2
	case r.Safe > 0:
		next = r.Safe
	default:
		// Under the rate refused and under what the quota admitted
		// (which, overrun, is its rate). Refused at a rate given, the
		// quota is known: a 429 there is timing, not the rate, and the
		// fleet stays as close under it as it would under a named one.
		backoff := fleetEventBackoff
		if r.Given > 0 {
			backoff = namedQuotaShare
		}
		next = rate * backoff
		if measured {
			next = min(next, admitted*backoff)
		}
	}
	r.pace(now, r.capped(next))
	r.push(now.Add(cooldown), tau)
	if measured || first {
		r.mark(later(now, r.CooldownUntil))
	}
	return r
}

// mark starts the next measurement of the admitted rate at now (the
// end of a cooldown, when the fleet sends again: not while it waits).
func (r *quotaRow) mark(now time.Time) {
	r.MarkAt, r.MarkSent, r.MarkLimited = now, r.sent(now), r.Limited
}

// sawWindow folds in a 429's retry delay: the longest is read as the
// quota's window (bounded; a delay of whole seconds is rounded, and
// still bounds it from above).
func (r *quotaRow) sawWindow(retryAfter time.Duration) {
	r.Window = max(r.Window, min(retryAfter, fleetMaxWindow))
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
