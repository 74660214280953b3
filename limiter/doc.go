// Package limiter paces and limits the calls to a rate-limited API,
// adapting to the quota the API actually grants, so that a batch drains
// as fast as the live quota allows with few refusals.
//
// A quota is a rate (so many requests or input tokens per minute, counted
// over a sliding or fixed window or a token bucket), and sometimes a cap on
// calls in progress. A fixed concurrency is a moving rate whenever latency
// moves, so once it has measured round trips the limiter paces call starts
// at a rate it learns, and derives the limit on calls in flight from that
// rate by Little's law (calls in flight = rate × latency, the latency
// there the higher of a quick and a slow average, so that a heavy tail's
// run of quick answers does not hold back calls the rate admits). Slow start
// doubles the calls in flight each round trip until the first 429: up to
// 64, where most quotas refuse, and, once 64 have been admitted for two
// round trips and 4 s with none refused, on up to Config.Ceiling (5,000 by
// default: a thinking model on a paid tier needs hundreds in flight, a
// quota of hundreds a second with calls of seconds thousands). Past 128
// calls in flight its starts are spaced at twice the rate its limit
// carries, not sent in the bunches the answers come in: a window's
// budget that runs out mid-doubling then refuses the refusal round
// trip's share of the doubling, not all of it (slowstart.go).
// When slow start spent a window's quota, the calls after it reopens
// follow the pace at which the window frees their slots (replay.go). From then on, a rate held for eight round trips (or the
// quota's window, when longer) with no 429 is safe, the rate last refused bounds the quota from above, and the
// law bisects between the two, then climbs in growing stairs to find a
// quota that grew. Slow start's 429 bounds nothing: the rate starts from the
// mean of its ramp, and when slow start lasted twice the window a retry
// delay showed, or, its 429s bare or rounded, the first probe after them
// was admitted (the quota freed room at once), each stair goes halfway
// (geometrically) to the rate of its round trip before the last, which
// the quota admitted whole (climb.go). A 429 at a rate already proven safe means the quota
// fell; the law keeps the safe rate it had, as a quota that fell (a
// drift, a neighbour's burst) often comes back, and climbs back to it
// sooner (one answer lag, not two, while no look has been refused; two
// at most when 429s are bare, as a refused look then costs one refusal
// and a light gate) and in stairs of 20%; once back at it, it looks
// above it from the rate refused before the fall, as a quota that came
// back as it went is bounded where it was. Tuned on a virtual-time simulation of every quota shape
// (quota_sim_test.go), against a client that knows the quota.
//
// Both kinds of outcome lower the limit: 429s (RateLimited), and with
// Config.TPM set, the input-token ceiling Little's law derives from the
// budget (a TPM quota counts input tokens; Succeeded reports them). A
// server's cap on calls in progress shows as 429s at the same number of
// calls in flight event after event, above what the paced rate carries
// (a paced rate holds the calls in flight steady), or at slow start's
// level again, beside no more calls than what the law actually sent
// carries (its starts lag a paced rate the cap refuses): the limiter then holds
// the calls in flight just under it instead of lowering the rate, and
// looks one call above it only once the calls admitted since its last
// refusal pay for the 429 a look costs (200 calls a look: half the 1%
// of calls a run may see refused). Failed
// (5xx, cancellations, a lone timeout) frees the slot and changes nothing:
// those faults belong to retry logic, not to the quota. A wave of calls
// that ran out their own deadline (TimedOut: 3, and 10% of the calls that
// ended within one timeout's span) is a server answering later as the
// calls in flight grow, with no refusal to say so; each such call may be
// billed and its retry paid again, so the limiter caps the calls in
// flight at half those then in flight, as at a cap's 429 (timeout.go;
// TimeoutWaves is that rule alone, which each worker of a PostgreSQL
// fleet applies to its own calls).
//
// A server that refuses every call for a moment (503 "overloaded") says
// nothing about the quota either, and the runner holds the stage's calls
// back until it serves again. The runner tells the limiter when its hold
// closes and opens (OverloadHeld, OverloadOpened): the law leaves the time
// held out of the rate it sent (a rate is proven only while it is sent at
// 0.9 of its pace, or at a few calls a round trip as many calls as a
// steady schedule at it puts in one, so holds a second apart would keep
// it from ever being proven), out of the answer lag a rate is held for,
// and out of the span it reads the admitted rate over.
//
// Paced evenly, a stage loses what holds take and what slow start's burst
// keeps the window full for; a sliding log has room for the calls kept
// back as soon as its window frees it. When slow start's 429 shows the
// log's window (its exact delay ends a window after the first start, or
// with delays rounded, the first probe admitted after it comes a window
// after the first start; and the calls admitted since are what the named
// budget grants over that window), the law sends by the window as the
// perfect client does: each call as soon as its own starts over the
// window leave room at the paced rate's share, at most three times the
// rate (catchup.go). A 429 at the named pace then says the quota counts
// otherwise, and the law goes back to even pacing.
//
// A 429 that names the per-minute budget it enforces (QuotaFailure's
// quotaValue, passed to RateLimitedQuota) needs no probing: the law paces
// at 97% of it, the tighter of requests and input tokens (a token budget
// with room for one standard deviation of the mean tokens of an answer
// lag's calls, as prompts differ in length, unless starts are paced in
// tokens, below), and climbs no
// higher for 32 answer lags with no 429 (twice as long after each look
// that found nothing, two once 429s have named different budgets, a live
// quota); then it looks above it, as the quota may have grown since it was
// named. A live quota named lower than the rate it admitted keeps that
// rate as the one to climb back to: it looks above the budget named every
// answer lag (a look refused costs one 429, which names the budget again),
// and once a look holds, the rate goes straight back to it. A named
// budget the quota's own admissions contradict (more than twice it
// admitted in the minute before the refused call: a window's count named
// as a minute's) is not believed, and the one it repeats is forgotten
// (law.contradicted); a quota that fell by more than half within the
// minute reads so too, and is found by its refusals until the minute
// before its fall has passed. Otherwise the longest retry delay seen is read as the quota's
// window, which a rate must be held for before it counts as safe, and at
// each event the law paces no faster than what the quota admitted over
// that window. A reopening (a probe admitted after a backoff) reads a
// budget from the calls admitted since the last one only over a span of
// at least half that delay: two probes seconds apart across a spent
// minute read a fraction of what it grants (see reopened).
//
// A budget named per minute is counted over a minute, and once the quota
// shows it (it admitted nothing for 12 s, longer than any shorter
// window, after the minute up to its last admission held 90-200% of the
// budget: at an exact retry delay, or at the first call admitted after a
// rounded one or none), the law sends by the minute instead of pacing: a
// call starts while the calls started in the last minute leave room for
// it under the budget less two calls (98.5% of it for a token budget
// named alone). Refused calls are left out of that count until a refusal
// the count had room for shows the quota counting them. A sliding minute
// admits exactly that, and a fixed one of any phase too; a fixed window
// of calls that admits a call while the last minute still holds the
// whole budget (or whose exact delay says it opens then) has passed its
// boundary, and only the calls since count (a count of tokens is an
// estimate, too coarse to tell a fixed minute from a sliding one). A
// freed minute goes on the refusal clock, as the ramp does: one call,
// then twice as many each refusal round trip with none refused, in steps
// of at most 1/64 of the budget's calls (1/32 while a hundredth of the
// calls the quota admitted, less those it refused, covers such a step),
// so a quota that fell since it was named refuses one step, not a
// minute's budget. After two minutes with no 429 the law looks above the
// budget: the minute may hold an eighth more (calls or tokens), sent on
// a step of its own from one call, and what the quota admits beyond the
// budget the law holds from then on; a look that holds is followed by
// the next a minute later, a refused one costs the calls its step sent
// past the quota (one, when a refusal comes back before the next step)
// and doubles the wait, and a 429 outside a look drops what looks added.
// A 429 that names a lower budget is the budget from then on, and each
// minute a look goes straight back to the one it fell from; one that
// names more when a look was refused is taken too. A refusal while the
// last minute holds under 90% of the budget says the quota counts
// otherwise, and a budget named anew in any other way says it is live:
// the law paces evenly again, for the rest of the run (minute.go).
//
// A caller that knows a call's size before it starts (AcquireWeighted,
// pipeline.WeightedLimiter: the runner passes the prompt's estimated
// input, or its text's runes) lets the law pace in tokens while a token
// budget binds (one a 429 named, tighter than the requests it named, or
// Config.TPM once the rate nears it): the call first in line waits until
// the paced schedule has room for its own estimated tokens, and its start
// moves the schedule on by them (over the mean call's), so the tokens a
// window holds stay even however prompts vary (a run of long prompts no
// longer overruns the budget, a run of short ones no longer leaves it
// unused), and the named budget needs no room for their spread: the law
// paces 98.5% of it. The rate sent and admitted are then read in the
// same weighted calls. The tokens per unit of size are learned from what
// successes are billed, as no client knows a server's tokenizer; the
// mean call they are counted against is frozen when pacing in tokens
// begins, so that the rate times it is a steady rate of tokens. A requests budget named too still spaces
// the starts (short prompts come faster than the mean), whichever binds.
// Calls with no size count as a mean call.
//
// A 429's retry delay closes a gate: no call starts before it has passed.
// A delay of a whole number of seconds is read as rounded (real quotas
// send 26-59 s where a second would do; such delays read the window too
// long, and the rate slow start's burst was admitted at too low, until
// the first probe the quota admits after the burst bounds both: a
// sliding window lets the burst's first call go a window after it) and
// a 429 with none as unknown:
// unless a cap on calls in progress explains it, calls wait a jittered
// backoff of about a round trip, growing by half while 429s go on, then
// one probe call goes first. (The first such 429 at a rate already paced
// only lowers the rate and holds starts for two of its own round trips,
// a light gate: the calls already sent answer meanwhile, and only if one
// of them, or a call sent after the gate, is refused too is the quota
// spent and a probe needed. A quota only just overrun, a token bucket's
// or a window's edge, loses no round trip to a probe.) A refusal comes
// back in a fraction of a success's round trip, so a call not refused
// within the refusal round trip was admitted: once a call started after
// an event began is refused within its round trip (the quota is still
// spent), starts resume on that clock, one call, then twice as many each
// refusal round trip with none refused, up to the pace (ramp.go), when
// the pace sends four or more calls in that time. The paced rate may
// fall as low as a call a minute, below a call per round trip, named
// budget or not. Callers waiting for a slot, the
// gate or the pace are served first come, first served. Independently, Config.RPM and
// Config.TPM with PaceTPM pace call starts to a known budget with
// golang.org/x/time/rate.
//
// The files: config.go (Config and the tuning constants), law.go (the
// control law, pure: state plus an event at an explicit time gives the
// new state, no lock, no timer, no clock), climb.go (how the rate climbs
// while nothing is refused: the bisection, the stairs, the climb back
// after a fall, and what a refusal says of the rate proven safe),
// reading.go (what the law reads from the quota's answers: the starts
// and their outcomes, the admitted rate, the window, what the first 429
// shows, the smoothed latency), named.go (a budget a 429 named, unless
// contradicted, and the pace it sets), minute.go and minutestep.go (a
// named per-minute budget sent by the minute), hold.go (the runner's
// overload holds as the law sees them), tokens.go (pacing in tokens:
// calls' sizes against what they are billed), slowstart.go (slow start's
// climb and its brake at 64), replay.go (the calls after a window spent
// by the first ones reopens), gate.go (after a 429, when calls may start
// again: an exact delay's gate, a backoff and a probe, or a light hold,
// and when a lowered rate is held from), ramp.go (how starts resume
// while 429s show the quota spent), catchup.go (a sliding log's window
// read at slow start's 429 or its first reopening, and sending by it),
// limit.go (the limit on calls in flight the rate carries, and the
// rate's bounds), queue.go (AIMD: the lock, the waiter queue and the
// clock around the law), pace.go (RPM/TPM pacing), stats.go (Snapshot).
// law.go is one concern, the law's state and how each event moves it: a
// refusal goes through onRateLimited, which hands the first of a
// congestion event to onEvent (a cap held, or the rate lowered by
// lowerRate) and the rest of it to refusedInEvent; the readings and
// steps they rely on live in reading.go, gate.go and climb.go. The
// package is over the usual 500 lines for one job: the law is most of
// it, and splitting it would scatter one state machine across packages.
// Time comes from Config.Now, and waits use an internal timer hook, so
// tests step a fake clock through exact instants and never sleep.
// NewFixed gives a non-adaptive pool of n slots with the same interface,
// for comparison.
//
// A run can start from what the last one learned: Limit and Rate, passed
// back as Config.Start and Config.StartRate. Rate is only what the quota
// showed (a refusal, a named budget, a window read), in this run or in
// the one whose StartRate it was given: a rate the law paced with no 429
// and no StartRate measured the run's own demand, so Rate is 0 then, and
// the next run climbs from the limit in slow start (Config.SlowStart)
// instead of being held to the pace of a small night.
//
// Virtual (virtual.go) is the same law with no lock, no queue and no
// clock, for internal/quotasim: it drives any law through quota shapes in
// virtual time against a perfect client (one that knows the quota and
// sends each item the instant it would be admitted, with no bound of its
// own on calls in flight). quotasim draws shapes from random families
// (sliding logs, fixed windows, token buckets, server caps, input-token
// budgets, real per-minute windows; named or not, retry delays exact,
// coarse or absent, refusals charged or not, drift), which the law was
// never tuned on: TestLaw_randomFamiliesBar holds it to what it reaches
// there, TestLaw_randomFamilies (opt-in) measures it on a fresh seed,
// and `sawtooth bench --matrix --random N --seed S` prints the same
// table.
package limiter
