package limiter

import "time"

// The budgets a 429 names (quotaValue of a per-minute quotaId, passed to
// RateLimitedQuota): recorded unless the quota's own admissions
// contradict them, and the rate they set.

// nameQuota records the per-minute budgets a 429 named (requests and
// input tokens per minute, 0 for each not named); a 429 that names
// neither leaves the last ones known. A budget named differently from the
// last time marks the quota live (see law.namedMoved).
func (w *law) nameQuota(rpm, tpm int64) {
	if rpm <= 0 && tpm <= 0 {
		return
	}
	if rpm > 0 && w.lastRPM > 0 && rpm != w.lastRPM || tpm > 0 && w.lastTPM > 0 && tpm != w.lastTPM {
		w.namedMoved = true
	}
	w.namedRPM, w.namedTPM = max(rpm, 0), max(tpm, 0)
	if rpm > 0 {
		w.lastRPM = rpm
	}
	if tpm > 0 {
		w.lastTPM = tpm
	}
}

// nameQuotaAt is nameQuota for a 429 of the call started at started,
// less what the quota's own admissions contradict (see law.contradicted):
// such a budget is not recorded, and the same one recorded before is
// forgotten. Believed, a window's count named as a minute's would pace
// the run at a sixtieth of its quota.
func (w *law) nameQuotaAt(started time.Time, rpm, tpm int64) {
	if rpm > 0 && w.contradicted(started, rpm, 0) {
		w.namedRPM, w.lastRPM = forget(w.namedRPM, rpm), forget(w.lastRPM, rpm)
		rpm = 0
	}
	if tpm > 0 && w.contradicted(started, 0, tpm) {
		w.namedTPM, w.lastTPM = forget(w.namedTPM, tpm), forget(w.lastTPM, tpm)
		tpm = 0
	}
	w.nameQuota(rpm, tpm)
}

// forget is budget, or 0 when it is the contradicted one.
func forget(budget, contradicted int64) int64 {
	if budget == contradicted {
		return 0
	}
	return budget
}

// contradicted reports whether the calls admitted that started in the
// minute before started (the refused call's start) add up to more than
// twice a budget of rpm requests, or tpm input tokens per minute with a
// tenth more for the estimates. A per-minute window, sliding or fixed,
// admits at most twice its budget in any minute (a fixed one's at the end
// of one window and the start of the next), so a 429 that names less
// names some other window's count: the evidence wins. Calls started
// after the refused one are left out: over a minute and a round trip a
// fixed window admits more. Tokens are the calls' estimates (their mean
// until sizes are learned); with neither, no token budget is
// contradicted. A quota that fell by more than half within the minute is
// contradicted too, and read from its refusals as an unnamed one until
// the calls before the fall have left the minute.
func (w *law) contradicted(started time.Time, rpm, tpm int64) bool {
	kept := min(w.nSent, sentRing)
	if tpm <= 0 && float64(kept) <= namedContradicted*float64(rpm) {
		return false // fewer starts kept than would contradict it
	}
	from := started.Add(-time.Minute)
	calls, tokens := 0.0, 0.0
	for i := 1; i <= kept; i++ {
		c := &w.sent[(w.nSent-i)%sentRing]
		if c.at.Before(from) {
			break
		}
		if c.outcome != admitted || c.at.After(started) {
			continue
		}
		calls++
		if t := w.estimatedTokens(c.size); t > 0 {
			tokens += t
		} else {
			tokens += w.callTokens()
		}
		// A 429 storm asks for each refusal: stop once shown.
		if rpm > 0 && calls > namedContradicted*float64(rpm) || tpm > 0 && tokens > namedContradicted*tokensSlack*float64(tpm) {
			return true
		}
	}
	return false
}

// namedRate is the rate of the named budgets, the tighter of the two, in
// starts per second: 0 if none is named.
func (w *law) namedRate() float64 {
	r := 0.0
	if w.namedRPM > 0 {
		r = float64(w.namedRPM) / 60
	}
	if w.namedTPM > 0 {
		perCall := float64(w.tokensPerCall())
		if w.sized() || w.sizes.unit > 0 {
			perCall = w.callTokens()
		}
		byTokens := float64(w.namedTPM) / 60 / perCall
		// Calls differ in tokens, so the calls a window holds bill more
		// than their mean now and then (see tokenRoom).
		byTokens /= w.tokenRoom(byTokens)
		if r == 0 || byTokens < r {
			r = byTokens
		}
	}
	return r
}

// paceNamed bounds the rate a congestion event set by the budget a 429
// named, if any: refused above it (or at the first event, which read no
// bound of its own), pace just under it, and look no higher. Refused
// below it, the quota is shared or bursts, and the law's own reading
// holds. safeBefore is the safe rate before the event.
func (w *law) paceNamed(first bool, safeBefore float64) {
	if named := w.namedRate(); named > 0 && (first || w.refused > named*namedShare) {
		if w.namedMoved && named*namedShare < safeBefore*fellShare {
			w.fellFrom(safeBefore, 0) // a live quota fell; its budget, named again, bounds it
		}
		w.rate, w.safe, w.refused, w.measured = named*namedShare, named*namedShare, 0, true
	}
}
