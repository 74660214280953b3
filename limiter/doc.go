// Package limiter limits how many calls to a rate-limited API are in flight,
// adapting the limit to what the API accepts.
//
// AIMD treats the API's quota as TCP treats a congested link. The limit on
// calls in flight grows by one (Config.Increase) after a streak of
// successes: as many consecutive successes as the current limit, counting
// only calls started after the last decrease, which is about one round trip
// at the current concurrency, as TCP grows its window by one segment per
// window acknowledged. A 429 multiplies the limit by Config.DecreaseFactor
// (halves it by default), never below Config.Floor. Over a run the limit
// draws a sawtooth just under the quota that is actually available, which
// may drift as other clients share it; several AIMD limiters sharing one
// quota converge to fair shares, as TCP flows do.
//
// Three refinements keep the sawtooth from turning into oscillation. One
// decrease per congestion event: a 429 of a call that started before the
// last decrease reports the same overload that decrease already answered,
// so a burst of twenty simultaneous 429s halves the limit once, not twenty
// times. A cooldown (Config.Cooldown) after each decrease, during which the
// limit does not grow, so the rebound does not walk straight into the next
// 429. And a decrease takes effect on calls in flight: no call starts until
// enough have finished to bring InFlight below the new limit.
//
// API quotas are counted over a window many round trips long (a minute),
// which answers late: a limit that crosses the quota hears of it only when
// the window has filled, and 429s go on until it has drained. Halving at
// every such event and waiting out a fixed cooldown leaves half the quota
// unused much of the time. Once round trips are measured the limiter reads
// the quota more closely (see AIMD): a 429 whose retry delay is under a
// round trip is an edge 429, answered by returning to the limit of a few
// round trips earlier, before the overshoot, instead of halving; growth
// slows near that edge; the cooldown is a few round trips long; the first
// calls after a decrease are paced; and with no starting limit given, slow
// start reaches a first estimate quickly. A 429 with a long retry delay
// still halves: the quota itself fell.
//
// Of the outcomes, only 429s move the limit down. Failed (5xx, timeouts, cancellations)
// frees the slot and changes nothing: those faults belong to retry logic,
// not to the concurrency knob. A 429's retry delay (the server's RetryInfo)
// closes a gate: no call starts before it has passed. Callers waiting for a
// slot or for the gate are served first come, first served.
//
// When the token budget per minute is known (Config.TPM), the limit is also
// capped by Little's law: calls in flight = calls per second × latency, so
// the concurrency that spends TPM tokens a minute is TPM × latency / (60s ×
// tokens per call), both measured as the run goes. Independently, call
// starts can be paced to a known RPM or TPM with golang.org/x/time/rate:
// latency varies, so a fixed concurrency is not a fixed rate.
//
// Time comes from Config.Now, and waits use an internal timer hook, so tests
// step a fake clock through exact instants and never sleep. NewFixed gives a
// non-adaptive pool of n slots with the same interface, for comparison.
package limiter
