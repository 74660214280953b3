package geminisim

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
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
	addr      string // the listener's, once Start has run (Quiesce dials it)
	// listen opens Start's listener; nil means net.Listen (a test holds
	// its accepts back).
	listen  func(network, addr string) (net.Listener, error)
	closed  bool
	closing chan struct{} // closed by Close: releases hung and sleeping requests
	// held, while not nil, keeps every admitted call from being answered
	// until Release closes it (Hold); guarded by mu.
	held     chan struct{}
	handlers sync.WaitGroup // requests being served, for Close
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
	listen := s.listen
	if listen == nil {
		listen = net.Listen
	}
	ln, err := listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("geminisim: listen on %s: %w", addr, err)
	}
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnState:         s.countConn,
	}
	s.addr = ln.Addr().String()
	go s.srv.Serve(ln) //nolint:errcheck // returns ErrServerClosed after Close
	return "http://" + s.addr, nil
}

// countConn keeps Stats.OpenConns: a connection counts from its accept
// to its close. A request a dead client wrote before it died is read
// (and answered, and billed) only after the server's goroutine for that
// connection runs, so "nothing in flight" alone is not "nothing more
// will arrive"; no open connection is.
func (s *Server) countConn(_ net.Conn, state http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch state {
	case http.StateNew:
		s.acct.openConns++
	case http.StateClosed, http.StateHijacked:
		s.acct.openConns--
	}
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
	s.serve(w, r, &c, key)
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
// billing it at the tier that served it. A client gone before the answer
// (its timeout, its death) with a billed outcome is counted as the item's abandoned call: the
// call was admitted and counted by its outcome, as the real API may bill
// it, but the client never saw the answer, so its retry is a second call.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, c *call, key string) {
	d := c.latency
	if c.outcome == OutcomeHang {
		d = -1
	}
	if !s.wait(r.Context(), d) || !s.waitHeld(r.Context()) {
		s.abortIfClosing()
		if c.outcome.billed() {
			s.mu.Lock()
			s.acct.abandonedLocked(key)
			s.mu.Unlock()
		}
		return
	}
	if c.outcome.billed() {
		s.mu.Lock()
		s.billServed(c)
		s.mu.Unlock()
	}
	s.respond(w, c)
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

// Hold keeps every admitted call, once its latency has passed, from
// being answered until Release: a test that must see many calls in
// flight at once gets them whatever the machine's speed, instead of
// racing their answers. A call whose client goes away meanwhile ends as
// one cut off by its latency does.
func (s *Server) Hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = make(chan struct{})
	}
}

// Release answers the calls Hold keeps and stops keeping new ones.
func (s *Server) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held != nil {
		close(s.held)
		s.held = nil
	}
}

// waitHeld waits while Hold keeps calls, and reports whether the call may
// be answered: false if the client went away or the server is closing.
func (s *Server) waitHeld(ctx context.Context) bool {
	s.mu.Lock()
	held := s.held
	s.mu.Unlock()
	if held == nil {
		return true
	}
	select {
	case <-held:
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
