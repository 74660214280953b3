package geminisim

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Server is a Gemini-compatible HTTP API (the v1beta generateContent and
// countTokens methods) for tests, demos and benchmarks. It is an
// http.Handler, so it can be mounted in an httptest.Server, or serve on its
// own with Start. All methods are safe for concurrent use.
type Server struct {
	cfg    Config
	now    func() time.Time
	start  time.Time
	models map[string]bool

	mu        sync.Mutex
	quotas    map[string]*Quota  // by model
	itemCalls map[[32]byte]int64 // admitted calls per item, numbering faults
	batches   *batchState        // the Batch and Files APIs (batch.go); guarded by mu
	acct      accounting
	prefixes  prefixCache // implicit caching (cache.go)
	srv       *http.Server
	closed    bool
	closing   chan struct{}  // closed by Close: releases hung and sleeping requests
	handlers  sync.WaitGroup // requests being served, for Close
}

// New returns a Server for cfg, its defaults filled in. The schedule clock
// starts now (cfg.Now()).
func New(cfg Config) *Server {
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:       cfg,
		now:       cfg.Now,
		models:    make(map[string]bool),
		quotas:    make(map[string]*Quota),
		itemCalls: make(map[[32]byte]int64),
		acct:      newAccounting(),
		closing:   make(chan struct{}),
	}
	for _, m := range cfg.Models {
		s.models[strings.TrimPrefix(m, "models/")] = true
	}
	s.start = s.now()
	return s
}

// Start listens on addr (e.g. "127.0.0.1:0") and serves in the background.
// It returns the base URL to give the client, e.g. "http://127.0.0.1:41234".
// Start may be called once; Close stops it.
func (s *Server) Start(addr string) (baseURL string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", errors.New("geminisim: start: server closed")
	}
	if s.srv != nil {
		return "", errors.New("geminisim: start: already started")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("geminisim: listen on %s: %w", addr, err)
	}
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go s.srv.Serve(ln) //nolint:errcheck // returns ErrServerClosed after Close
	return "http://" + ln.Addr().String(), nil
}

// Close stops the server: hung and delayed requests are aborted at once
// (their handlers panic with http.ErrAbortHandler, so the client sees the
// connection drop), the listener and connections (if Start was used) are
// closed, and Close returns when every handler has returned. Later requests get 503. Close is
// idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	srv := s.srv
	s.mu.Unlock()
	var err error
	if srv != nil {
		err = srv.Close()
	}
	s.handlers.Wait()
	return err
}

// Stats returns a snapshot of the accounting, the same data as
// GET /_sim/stats.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.acct.snapshot()
	st.Started = s.start
	st.QuotaPercent = percentAt(s.cfg.Schedule, s.now().Sub(s.start))
	return st
}

// ServeHTTP routes POST /v1beta/models/{model}:generateContent,
// POST /v1beta/models/{model}:countTokens and GET /_sim/stats.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "The simulator is shutting down.")
		return
	}
	s.handlers.Add(1)
	s.mu.Unlock()
	defer s.handlers.Done()

	if s.serveBatch(w, r) {
		return
	}
	if r.URL.Path == "/_sim/stats" {
		if r.Method != http.MethodGet {
			writeError(w, http.StatusMethodNotAllowed, "INVALID_ARGUMENT", "Use GET.")
			return
		}
		writeJSON(w, http.StatusOK, s.Stats())
		return
	}
	w, r = s.vertexRoute(w, r)
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1beta/models/")
	if i := strings.LastIndexByte(rest, ':'); ok && i > 0 && r.Method == http.MethodPost {
		switch model, method := rest[:i], rest[i+1:]; method {
		case "generateContent":
			s.generate(w, r, model)
			return
		case "countTokens":
			s.countTokens(w, r, model)
			return
		}
	}
	writeError(w, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("%s %s is not served by the Gemini simulator.", r.Method, r.URL.Path))
}

// call is what the server decided for one admitted generateContent call.
type call struct {
	model        string
	item         [32]byte
	n            int64 // number of earlier admitted calls of this item
	promptTokens int
	outcome      Outcome
	answer       string // the candidate text, already cut for max_tokens
	answerTokens int
	latency      time.Duration
	served       Tier // the tier that serves the call
	cachedTokens int  // of promptTokens, implicitly cached
}

// generate serves one generateContent call: the request read, then
// refused for capacity, shed, an overload burst, credits or the quota, or
// admitted, decided and answered after its latency.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, model string) {
	inFlight := s.enter()
	defer s.leave()
	req, tier, ok := s.readRequest(w, r, model)
	if !ok {
		return
	}
	user := req.userText()
	c := call{
		model:        model,
		promptTokens: req.promptTokens(),
	}
	key := itemKey(r, user, &c.item)
	labels, props := req.schema()
	answer := answerFor(req.GenerationConfig, user, labels, props)
	if s.refuseOverCap(w, key, c.promptTokens, inFlight) {
		return
	}

	s.mu.Lock()
	s.acct.tier(tier).Asked++
	if tier == TierFlex {
		s.acct.flexInFlight++
		defer s.leaveFlex()
	}
	now := s.now()
	if refuse := s.refusalLocked(&c, key, tier, now); refuse != nil {
		s.mu.Unlock()
		refuse(w)
		return
	}
	s.admitLocked(&c, key, tier, &req, user, answer, inFlight, now)
	s.mu.Unlock()
	s.serve(w, r, &c)
}

// enter counts a call in flight and returns how many are, itself
// included; leave ends it.
func (s *Server) enter() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acct.calls++
	s.acct.inFlight++
	s.acct.peak = max(s.acct.peak, s.acct.inFlight)
	return s.acct.inFlight
}

func (s *Server) leave() {
	s.mu.Lock()
	s.acct.inFlight--
	s.mu.Unlock()
}

func (s *Server) leaveFlex() {
	s.mu.Lock()
	s.acct.flexInFlight--
	s.mu.Unlock()
}

// readRequest checks the key and the model and reads the body and its
// tier; on a refusal it has answered the call and returns false.
func (s *Server) readRequest(w http.ResponseWriter, r *http.Request, model string) (genRequest, Tier, bool) {
	var req genRequest
	if !s.keyOK(r) {
		s.count(OutcomeBadKey, "", 0, 0)
		writeBadKey(w)
		return req, "", false
	}
	if !s.models[model] {
		s.count(OutcomeNotFound, "", 0, 0)
		writeNotFound(w, model, "generateContent")
		return req, "", false
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&req); err != nil {
		s.count(OutcomeBadRequest, "", 0, 0)
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Invalid JSON payload received. "+err.Error())
		return req, "", false
	}
	if len(req.Contents) == 0 {
		s.count(OutcomeBadRequest, "", 0, 0)
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "* GenerateContentRequest.contents: contents is not specified\n")
		return req, "", false
	}
	tier, ok := requestTier(req.ServiceTier)
	if !ok {
		s.count(OutcomeBadRequest, "", 0, 0)
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("Invalid value at 'service_tier', %q", req.ServiceTier))
		return req, "", false
	}
	return req, tier, true
}

// refuseOverCap answers a call over the concurrency cap, if it is.
func (s *Server) refuseOverCap(w http.ResponseWriter, key string, promptTokens, inFlight int) bool {
	if s.cfg.MaxConcurrent <= 0 || inFlight <= s.cfg.MaxConcurrent {
		return false
	}
	if s.cfg.ConcurrencyRefusal == RefuseBare429 {
		s.count(OutcomeCapacity, key, 0, promptTokens)
		writeCapacity(w)
		return true
	}
	s.count(OutcomeOverloaded, key, 0, promptTokens)
	writeOverloaded(w)
	return true
}

// refusalLocked decides whether the call is refused (a flex call shed,
// an overload burst, no credits, the quota) and counts it; it returns
// what writes the refusal once s.mu is released, nil to admit the call.
// s.mu is held.
func (s *Server) refusalLocked(c *call, key string, tier Tier, now time.Time) func(http.ResponseWriter) {
	if tier == TierFlex {
		shed := call{item: c.item, n: s.acct.itemCalls(key)}
		if s.shedFlex(&shed, s.acct.flexInFlight) {
			s.acct.tier(tier).Shed++
			s.countLocked(OutcomeShed, key, 0, c.promptTokens)
			return s.writeShed
		}
	}
	if in, _ := s.cfg.Overload.Active(now.Sub(s.start)); in {
		s.countLocked(OutcomeOverloadBurst, key, 0, c.promptTokens)
		return writeOverloaded
	}
	if s.cfg.Credits > 0 && s.acct.admitted >= s.cfg.Credits {
		s.countLocked(OutcomeNoCredits, key, 0, c.promptTokens)
		return writeNoCredits
	}
	q := s.quota(c.model)
	vs := q.violations(now, c.promptTokens)
	if len(vs) == 0 {
		return nil
	}
	// A counted refusal is charged first, so that the delay it is told
	// includes its own charge.
	if s.cfg.CountRefused {
		q.Count(now, c.promptTokens)
	}
	delay, ok := q.Wait(now, c.promptTokens)
	if !ok {
		delay = s.cfg.Window
	}
	if s.cfg.RetryInfo == RetryCoarse {
		delay = s.coarsen(delay, c, s.acct.itemCalls(key))
	}
	s.countLocked(OutcomeRateLimited, key, 0, c.promptTokens)
	s.acct.bucket(s.second(now)).RateLimited++
	return func(w http.ResponseWriter) {
		writeRateLimited(w, c.model, s.asNamed(vs), delay, s.cfg.RetryInfo, s.cfg.QuotaFailure)
	}
}

// admitLocked charges an admitted call to its quota, decides its outcome
// and counts it. s.mu is held.
func (s *Server) admitLocked(c *call, key string, tier Tier, req *genRequest, user, answer string, inFlight int, now time.Time) {
	s.quota(c.model).Count(now, c.promptTokens)
	c.n = s.itemCalls[c.item]
	s.itemCalls[c.item]++
	c.served = s.servedTier(c, tier)
	c.cachedTokens = s.cached(c.model, req.promptRunes(), c.promptTokens, now)
	s.decide(c, user, answer, req.GenerationConfig, inFlight-1)
	s.acct.admitted++
	s.acct.admittedTokens += int64(c.promptTokens)
	b := s.acct.bucket(s.second(now))
	b.Admitted++
	if c.outcome == OutcomeOK {
		b.OK++
	}
	billed := 0
	if c.outcome.billed() {
		billed = c.promptTokens + c.answerTokens
	}
	s.countLocked(c.outcome, key, billed, c.promptTokens)
}

// serve answers an admitted call after its latency (never, for a hang),
// billing it at the tier that served it.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, c *call) {
	d := c.latency
	if c.outcome == OutcomeHang {
		d = -1
	}
	if !s.wait(r.Context(), d) {
		s.abortIfClosing()
		return
	}
	if c.outcome.billed() {
		s.mu.Lock()
		s.billServed(c)
		s.mu.Unlock()
	}
	s.respond(w, c)
}

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

// wait sleeps d (forever if d < 0) and reports whether it slept it all:
// false if the client went away or the server is closing.
func (s *Server) wait(ctx context.Context, d time.Duration) bool {
	if d == 0 {
		return true
	}
	var timer <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-timer:
		return true
	case <-ctx.Done():
	case <-s.closing:
	}
	return false
}

// abortIfClosing aborts the response when Close released the request, so
// the client sees the connection drop rather than an empty 200.
func (s *Server) abortIfClosing() {
	select {
	case <-s.closing:
		panic(http.ErrAbortHandler)
	default:
	}
}

// quota returns model's quota. Call with s.mu held.
func (s *Server) quota(model string) *Quota {
	q := s.quotas[model]
	if q == nil {
		q = NewQuota(s.cfg, s.start)
		s.quotas[model] = q
	}
	return q
}

// second is the timeline second of t.
func (s *Server) second(t time.Time) int64 {
	return max(0, int64(t.Sub(s.start)/time.Second))
}

func (s *Server) keyOK(r *http.Request) bool {
	key := r.Header.Get("X-Goog-Api-Key")
	if key == "" {
		key = r.URL.Query().Get("key")
	}
	return subtle.ConstantTimeCompare([]byte(key), []byte(s.cfg.APIKey)) == 1
}

// count records an outcome; key is the item's key in Stats.Items, "" when
// the body was not read.
func (s *Server) count(o Outcome, key string, billed, promptTokens int) {
	s.mu.Lock()
	s.countLocked(o, key, billed, promptTokens)
	s.mu.Unlock()
}

func (s *Server) countLocked(o Outcome, key string, billed, promptTokens int) {
	s.acct.outcomes[o]++
	if key == "" {
		return
	}
	it := s.acct.items[key]
	if it == nil {
		it = &ItemStats{}
		s.acct.items[key] = it
	}
	it.Calls++
	if o == OutcomeOK {
		it.OK++
	}
	it.BilledTokens += int64(billed)
	it.PromptTokens = int64(promptTokens)
}

func (s *Server) countTokens(w http.ResponseWriter, r *http.Request, model string) {
	s.mu.Lock()
	s.acct.countTokens++
	s.mu.Unlock()
	if !s.keyOK(r) {
		writeBadKey(w)
		return
	}
	if !s.models[model] {
		writeNotFound(w, model, "countTokens")
		return
	}
	var req genRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Invalid JSON payload received. "+err.Error())
		return
	}
	if g := req.GenerateContentRequest; g != nil && len(req.Contents) == 0 {
		req = *g
	}
	writeJSON(w, http.StatusOK, map[string]int{"totalTokens": req.promptTokens()})
}
