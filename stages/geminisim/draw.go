package geminisim

// What an admitted call gets, drawn from the seed: its outcome (an answer
// or a fault), its latency, how coarse a refusal's retry delay is, and
// the response id. Every draw is a pure function of the seed, the item
// and the call number, so a run replays.

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// decide picks the outcome, answer and latency of an admitted call. It is a
// pure function of the request, the seed and the call number.
func (s *Server) decide(c *call, user, answer string, gc *genConfig, others int) {
	c.latency = s.latency(c, others)
	c.answer = answer
	c.answerTokens = estimateTokens(utf8.RuneCountInString(answer))
	if safetyTriggered(user) {
		c.outcome, c.answer, c.answerTokens = OutcomeBlockPrompt, "", 0
		return
	}
	f := s.cfg.Faults
	u := s.draw(c, 'f')
	for _, fr := range []struct {
		rate float64
		o    Outcome
	}{
		{f.Err500, OutcomeErr500}, {f.Err503, OutcomeErr503}, {f.Hang, OutcomeHang},
		{f.Malformed, OutcomeMalformed}, {f.BlockPrompt, OutcomeBlockPrompt},
		{f.BlockCandidate, OutcomeBlockCandidate}, {f.MaxTokens, OutcomeMaxTokens},
	} {
		if u < fr.rate {
			c.outcome = fr.o
			break
		}
		u -= fr.rate
	}
	if c.outcome == OutcomeMaxTokens && !rambleCut(gc) {
		c.outcome = OutcomeOK // a budget this large holds even the rambling answer
	}
	if c.outcome == "" && gc != nil && gc.MaxOutputTokens > 0 && c.answerTokens > gc.MaxOutputTokens {
		c.outcome = OutcomeMaxTokens
	}
	switch c.outcome {
	case "":
		c.outcome = OutcomeOK
	case OutcomeMaxTokens:
		keep := utf8.RuneCountInString(answer) / 2
		if gc != nil && gc.MaxOutputTokens > 0 {
			keep = min(keep, gc.MaxOutputTokens*4)
		}
		c.answer = string([]rune(answer)[:keep])
		c.answerTokens = estimateTokens(keep)
	case OutcomeBlockPrompt:
		c.answer, c.answerTokens = "", 0
	case OutcomeBlockCandidate, OutcomeErr500, OutcomeErr503, OutcomeHang:
		c.answerTokens = 0
	}
}

// asNamed restates the limits a 429 names in the units its quotaId
// promises: a real per-minute quotaId's quotaValue is per minute, and a
// per-day one per day. With a time-scaled window (60 requests per 1 s
// window in tests) the simulator's own limit is per window, so it is
// scaled to what it amounts to per real minute (3,600), as a client that
// reads quotaValue must be able to trust it.
func (s *Server) asNamed(vs []violation) []violation {
	out := make([]violation, len(vs))
	for i, v := range vs {
		out[i] = v
		per, unit := s.cfg.Window, time.Minute
		if v.kind == kindRPD {
			per, unit = s.cfg.Day, 24*time.Hour
		}
		if per > 0 && per != unit {
			out[i].limit = int(math.Round(float64(v.limit) * float64(unit) / float64(per)))
		}
	}
	return out
}

// RambleTokens is how long an answer drawn as a MAX_TOKENS fault runs: it
// models a model that rambles past a small output budget, so the call is
// cut off unless the request sets maxOutputTokens to at least this (no
// budget counts as a small default), as a real answer at temperature 0 is
// cut again at the same budget and fits once the budget is raised enough.
const RambleTokens = 300

// rambleCut reports whether a drawn MAX_TOKENS fault cuts the answer off
// under the request's generation config.
func rambleCut(gc *genConfig) bool {
	return gc == nil || gc.MaxOutputTokens <= 0 || gc.MaxOutputTokens < RambleTokens
}

// latency draws the service time of an admitted call (see Latency) with
// others other calls in flight.
func (s *Server) latency(c *call, others int) time.Duration {
	lat := s.cfg.Latency
	if fl := s.cfg.Tiers.FlexLatency; c.served == TierFlex && fl != (Latency{}) {
		lat = fl
	}
	d := lat.Base + lat.PerToken*time.Duration(c.promptTokens)
	if lat.Tail > 0 {
		u := 1 - s.draw(c, 't') // in (0, 1]
		d = time.Duration(float64(d) * math.Pow(u, -1/lat.Tail))
	}
	if lat.Jitter > 0 {
		d += time.Duration(s.draw(c, 'j') * float64(lat.Jitter+1))
	}
	d += lat.PerInFlight * time.Duration(max(others, 0))
	if lat.Max > 0 {
		d = min(d, lat.Max)
	}
	return d
}

// CallLatency is the latency the server draws for call number callNo (0 for
// the first) of the item keyed itemKey in Stats.Items, with promptTokens
// input tokens and others other calls in flight at its admission: what a
// perfect client would wait for that call. ok is false for a key that is
// neither an ItemID nor an ItemHash.
func CallLatency(cfg Config, itemKey string, callNo int64, promptTokens, others int) (d time.Duration, ok bool) {
	c := call{n: callNo, promptTokens: promptTokens}
	if id, isID := strings.CutPrefix(itemKey, "id:"); isID {
		c.item = sha256.Sum256([]byte("item\x00" + id))
	} else if b, err := hex.DecodeString(itemKey); err == nil && len(b) == len(c.item) {
		copy(c.item[:], b)
	} else {
		return 0, false
	}
	s := &Server{cfg: cfg.withDefaults()}
	return s.latency(&c, others), true
}

// coarsen turns an exact retry delay into what RetryCoarse sends: rounded
// up to whole seconds, plus a draw of whole seconds up to half a Window,
// fixed by (Seed, item, refusals so far), but no later than one Window
// unless the exact delay rounded up is longer (the real API's delays for a
// per-minute quota are all under a minute). The unit stays a second when
// the Window is shortened: a client reads a whole number of seconds as a
// rounded delay, and a second per minute of Window would read as exact.
func (s *Server) coarsen(exact time.Duration, c *call, refusals int64) time.Duration {
	const unit = time.Second
	d := (exact + unit - 1) / unit * unit
	d = max(d, unit)
	r := call{item: c.item, n: refusals}
	extra := time.Duration(s.draw(&r, 'c') * float64(s.cfg.Window/2/unit))
	return min(d+extra*unit, max(d, s.cfg.Window-unit))
}

// draw is a uniform number in [0, 1) fixed by (Seed, item, call number,
// purpose).
func (s *Server) draw(c *call, purpose byte) float64 {
	var buf [8 + 32 + 8 + 1]byte
	binary.BigEndian.PutUint64(buf[:8], uint64(s.cfg.Seed))
	copy(buf[8:40], c.item[:])
	binary.BigEndian.PutUint64(buf[40:48], uint64(c.n))
	buf[48] = purpose
	h := sha256.Sum256(buf[:])
	return float64(binary.BigEndian.Uint64(h[:8])>>11) / (1 << 53)
}

// responseID is a repeatable id in the style of the API's (20 base64url
// characters).
func (s *Server) responseID(c *call) string {
	var buf [8 + 32 + 8 + 1]byte
	binary.BigEndian.PutUint64(buf[:8], uint64(s.cfg.Seed))
	copy(buf[8:40], c.item[:])
	binary.BigEndian.PutUint64(buf[40:48], uint64(c.n))
	buf[48] = 'r'
	h := sha256.Sum256(buf[:])
	return base64.RawURLEncoding.EncodeToString(h[:15])
}
