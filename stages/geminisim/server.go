package geminisim

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Defaults for the zero fields of Config.
const (
	DefaultAPIKey = "sim-key"
	DefaultWindow = time.Minute
	DefaultDay    = 24 * time.Hour
)

// DefaultModels are the models a zero Config knows. Do not modify it.
var DefaultModels = []string{"gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-2.5-pro", "gemini-2.0-flash"}

// maxBody bounds a request body (the real API's inline limit is 20 MB).
const maxBody = 20 << 20

// Config configures a Server. The zero value is a usable simulator: key
// "sim-key", the DefaultModels, no quota, no latency, no faults.
type Config struct {
	// APIKey is the only key accepted (X-Goog-Api-Key header or ?key=).
	// Default DefaultAPIKey.
	APIKey string
	// Models are the model ids served (without "models/"). Default
	// DefaultModels.
	Models []string
	// RPM and TPM bound the requests and the estimated input tokens
	// admitted per Window, RPD the requests per Day. Each quota applies per
	// model, as the real API's do. 0 means unlimited.
	RPM, TPM, RPD int
	// Window is the RPM/TPM window; default DefaultWindow (1m). Tests
	// shorten it; the 429 quotaId still says PerMinute.
	Window time.Duration
	// Day is the RPD window; default DefaultDay (24h). It slides like
	// Window rather than resetting at midnight Pacific.
	Day time.Duration
	// Schedule makes the quota live: from each step's At after the server
	// started, RPM and TPM are Percent% of the values above. Nil keeps
	// 100%. See ParseSchedule.
	Schedule []Step
	// Latency delays every request that passed the quota check.
	Latency Latency
	// MaxConcurrent, if > 0, answers 503 overloaded to a generateContent
	// request that arrives while MaxConcurrent are already in flight
	// (before the quota check: such calls consume no quota).
	MaxConcurrent int
	// Faults are the injected failure rates.
	Faults Faults
	// Seed makes faults, jitter and response ids repeatable: the same seed
	// and the same sequence of calls per item give the same answers,
	// whatever the interleaving of items.
	Seed int64
	// Now is the clock used for quotas, the schedule and the timeline.
	// Default time.Now. Latency always uses real timers.
	Now func() time.Time
}

// Latency is the service time of an admitted request:
// Base + PerToken*promptTokens + a uniform draw in [0, Jitter], the draw
// being deterministic per (Seed, item, call number). All zero: no delay.
type Latency struct {
	Base     time.Duration
	PerToken time.Duration // per estimated prompt token
	Jitter   time.Duration
}

// Faults are probabilities in [0, 1] that an admitted call fails in a given
// way. One uniform draw per call, deterministic per (Seed, item hash,
// number of calls of that item admitted before), picks at most one fault,
// tried in field order; if the rates sum above 1 the later ones get what is
// left.
type Faults struct {
	Err500         float64 // 500 INTERNAL
	Err503         float64 // 503 UNAVAILABLE, "The model is overloaded..."
	Hang           float64 // no answer until the client gives up or Close
	Malformed      float64 // 200 whose JSON body is cut in half
	BlockPrompt    float64 // 200, promptFeedback.blockReason SAFETY, no candidates
	BlockCandidate float64 // 200, candidate finishReason SAFETY without text
	MaxTokens      float64 // 200, candidate text is cut-off JSON, finishReason MAX_TOKENS
}

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
	quotas    map[string]*quota  // by model
	itemCalls map[[32]byte]int64 // admitted calls per item, numbering faults
	acct      accounting
	srv       *http.Server
	closed    bool
	closing   chan struct{}  // closed by Close: releases hung and sleeping requests
	handlers  sync.WaitGroup // requests being served, for Close
}

// New returns a Server for cfg, its defaults filled in. The schedule clock
// starts now (cfg.Now()).
func New(cfg Config) *Server {
	if cfg.APIKey == "" {
		cfg.APIKey = DefaultAPIKey
	}
	if len(cfg.Models) == 0 {
		cfg.Models = DefaultModels
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Day <= 0 {
		cfg.Day = DefaultDay
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Models = slices.Clone(cfg.Models)
	cfg.Schedule = slices.Clone(cfg.Schedule)
	slices.SortStableFunc(cfg.Schedule, func(a, b Step) int { return cmp.Compare(a.At, b.At) })
	s := &Server{
		cfg:       cfg,
		now:       cfg.Now,
		models:    make(map[string]bool),
		quotas:    make(map[string]*quota),
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

// Request bodies: only the fields the simulator reads; others are ignored.
type (
	genRequest struct {
		Contents          []content  `json:"contents"`
		SystemInstruction *content   `json:"systemInstruction"`
		GenerationConfig  *genConfig `json:"generationConfig"`
		// GenerateContentRequest is countTokens' alternative to Contents.
		GenerateContentRequest *genRequest `json:"generateContentRequest"`
	}
	content struct {
		Role  string `json:"role"`
		Parts []struct {
			Text string `json:"text"`
		} `json:"parts"`
	}
	genConfig struct {
		MaxOutputTokens    int             `json:"maxOutputTokens"`
		ResponseSchema     json.RawMessage `json:"responseSchema"`
		ResponseJSONSchema json.RawMessage `json:"responseJsonSchema"`
	}
)

// userText joins the text of the user turns' parts with "\n".
func (q *genRequest) userText() string {
	var texts []string
	for _, c := range q.Contents {
		if c.Role != "" && c.Role != "user" {
			continue
		}
		for _, p := range c.Parts {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// promptTokens estimates the input tokens of contents and system instruction.
func (q *genRequest) promptTokens() int {
	runes := 0
	add := func(c *content) {
		for _, p := range c.Parts {
			runes += utf8.RuneCountInString(p.Text)
		}
	}
	for i := range q.Contents {
		add(&q.Contents[i])
	}
	if q.SystemInstruction != nil {
		add(q.SystemInstruction)
	}
	return estimateTokens(runes)
}

// schema reads the label enum and the answer's property names from the
// response schema (responseSchema or responseJsonSchema).
func (q *genRequest) schema() (labels []string, props map[string]bool) {
	if q.GenerationConfig == nil {
		return nil, nil
	}
	raw := q.GenerationConfig.ResponseSchema
	if len(raw) == 0 || string(raw) == "null" {
		raw = q.GenerationConfig.ResponseJSONSchema
	}
	var sch struct {
		Properties map[string]struct {
			Enum []any `json:"enum"`
		} `json:"properties"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &sch) != nil {
		return nil, nil
	}
	for _, v := range sch.Properties["label"].Enum {
		if s, ok := v.(string); ok {
			labels = append(labels, s)
		}
	}
	props = make(map[string]bool)
	for name := range sch.Properties {
		props[name] = true
	}
	return labels, props
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
}

func (s *Server) generate(w http.ResponseWriter, r *http.Request, model string) {
	s.mu.Lock()
	s.acct.calls++
	s.acct.inFlight++
	inFlight := s.acct.inFlight
	s.acct.peak = max(s.acct.peak, inFlight)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.acct.inFlight--
		s.mu.Unlock()
	}()

	if !s.keyOK(r) {
		s.count(OutcomeBadKey, nil, 0)
		writeBadKey(w)
		return
	}
	if !s.models[model] {
		s.count(OutcomeNotFound, nil, 0)
		writeNotFound(w, model, "generateContent")
		return
	}
	var req genRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&req); err != nil {
		s.count(OutcomeBadRequest, nil, 0)
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Invalid JSON payload received. "+err.Error())
		return
	}
	if len(req.Contents) == 0 {
		s.count(OutcomeBadRequest, nil, 0)
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "* GenerateContentRequest.contents: contents is not specified\n")
		return
	}

	user := req.userText()
	c := call{
		model:        model,
		item:         sha256.Sum256([]byte(user)),
		promptTokens: req.promptTokens(),
	}
	labels, props := req.schema()
	answer := answerFor(req.GenerationConfig, user, labels, props)

	if s.cfg.MaxConcurrent > 0 && inFlight > s.cfg.MaxConcurrent {
		s.count(OutcomeOverloaded, &c.item, 0)
		writeOverloaded(w)
		return
	}

	s.mu.Lock()
	now := s.now()
	q := s.quota(model)
	q.prune(now)
	lim := s.limitsAt(now)
	if vs := q.violations(c.promptTokens, lim); len(vs) > 0 {
		delay := s.retryDelay(q, now, c.promptTokens)
		s.countLocked(OutcomeRateLimited, &c.item, 0)
		s.acct.bucket(s.second(now)).RateLimited++
		s.mu.Unlock()
		writeRateLimited(w, model, vs, delay)
		return
	}
	q.admit(now, c.promptTokens)
	c.n = s.itemCalls[c.item]
	s.itemCalls[c.item]++
	s.decide(&c, user, answer, req.GenerationConfig)
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
	s.countLocked(c.outcome, &c.item, billed)
	s.mu.Unlock()

	d := c.latency
	if c.outcome == OutcomeHang {
		d = -1
	}
	if !s.wait(r.Context(), d) {
		s.abortIfClosing()
		return
	}
	s.respond(w, &c)
}

// decide picks the outcome, answer and latency of an admitted call. It is a
// pure function of the request, the seed and the call number.
func (s *Server) decide(c *call, user, answer string, gc *genConfig) {
	lat := s.cfg.Latency
	c.latency = lat.Base + lat.PerToken*time.Duration(c.promptTokens)
	if lat.Jitter > 0 {
		c.latency += time.Duration(s.draw(c, 'j') * float64(lat.Jitter+1))
	}
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

// quota returns model's quota log. Call with s.mu held.
func (s *Server) quota(model string) *quota {
	q := s.quotas[model]
	if q == nil {
		q = &quota{
			window:   s.cfg.Window,
			day:      s.cfg.Day,
			trackWin: s.cfg.RPM > 0 || s.cfg.TPM > 0,
			trackDay: s.cfg.RPD > 0,
		}
		s.quotas[model] = q
	}
	return q
}

// limitsAt are the effective quotas at t, the schedule applied.
func (s *Server) limitsAt(t time.Time) limits {
	pct := percentAt(s.cfg.Schedule, t.Sub(s.start))
	return limits{
		rpm: scale(s.cfg.RPM, pct),
		tpm: scale(s.cfg.TPM, pct),
		rpd: scale(s.cfg.RPD, 100),
	}
}

// retryDelay is the exact time from now until a request of n tokens would be
// admitted if nothing else were, following the schedule's changes. When no
// future instant would admit it (a zero quota with no later step, or a
// prompt above the TPM), it is one Window. Call with s.mu held, after
// q.prune(now).
func (s *Server) retryDelay(q *quota, now time.Time, n int) time.Duration {
	for t := now; ; {
		d, ok := q.wait(t, n, s.limitsAt(t))
		next, more := nextStepAfter(s.cfg.Schedule, t.Sub(s.start))
		nextAt := s.start.Add(next)
		if ok && (!more || t.Add(d).Before(nextAt)) {
			return t.Add(d).Sub(now)
		}
		if !more {
			return s.cfg.Window
		}
		t = nextAt
	}
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

// count records an outcome; item is nil when the body was not read.
func (s *Server) count(o Outcome, item *[32]byte, billed int) {
	s.mu.Lock()
	s.countLocked(o, item, billed)
	s.mu.Unlock()
}

func (s *Server) countLocked(o Outcome, item *[32]byte, billed int) {
	s.acct.outcomes[o]++
	if item == nil {
		return
	}
	key := fmt.Sprintf("%x", item[:])
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

// answerJSON is the model's JSON answer for a user text: label, confidence
// and reason, restricted to those the schema names (all three when it names
// none of them).
func answerJSON(user string, labels []string, props map[string]bool) string {
	label, kw := classify(user, labels)
	if !props["label"] && !props["confidence"] && !props["reason"] {
		props = map[string]bool{"label": true, "confidence": true, "reason": true}
	}
	var a struct {
		Label      string  `json:"label,omitempty"`
		Confidence float64 `json:"confidence,omitempty"`
		Reason     string  `json:"reason,omitempty"`
	}
	if props["label"] {
		a.Label = label
	}
	if props["confidence"] {
		a.Confidence = confidence(user)
	}
	if props["reason"] {
		a.Reason = reason(label, kw)
	}
	b, _ := json.Marshal(a)
	return string(b)
}

// safetyRatings are the ratings sent with a block; blocked marks the one
// that tripped.
func safetyRatings(blocked bool) []map[string]any {
	return []map[string]any{
		{"category": "HARM_CATEGORY_SEXUALLY_EXPLICIT", "probability": "NEGLIGIBLE"},
		{"category": "HARM_CATEGORY_HATE_SPEECH", "probability": "NEGLIGIBLE"},
		{"category": "HARM_CATEGORY_HARASSMENT", "probability": "NEGLIGIBLE"},
		{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": blocked},
	}
}

// respond writes the answer of an admitted call.
func (s *Server) respond(w http.ResponseWriter, c *call) {
	switch c.outcome {
	case OutcomeErr500:
		writeError(w, http.StatusInternalServerError, "INTERNAL",
			"An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting")
		return
	case OutcomeErr503:
		writeOverloaded(w)
		return
	}
	resp := map[string]any{
		"modelVersion": c.model + "-sim",
		"responseId":   s.responseID(c),
	}
	usage := map[string]any{"promptTokenCount": c.promptTokens}
	if c.answerTokens > 0 {
		usage["candidatesTokenCount"] = c.answerTokens
	}
	usage["totalTokenCount"] = c.promptTokens + c.answerTokens
	resp["usageMetadata"] = usage
	cand := map[string]any{"index": 0}
	switch c.outcome {
	case OutcomeBlockPrompt:
		resp["promptFeedback"] = map[string]any{"blockReason": "SAFETY", "safetyRatings": safetyRatings(true)}
	case OutcomeBlockCandidate:
		cand["finishReason"] = "SAFETY"
		cand["safetyRatings"] = safetyRatings(true)
	default:
		cand["content"] = map[string]any{"role": "model", "parts": []map[string]any{{"text": c.answer}}}
		cand["finishReason"] = "STOP"
		if c.outcome == OutcomeMaxTokens {
			cand["finishReason"] = "MAX_TOKENS"
		}
	}
	if c.outcome != OutcomeBlockPrompt {
		resp["candidates"] = []any{cand}
	}
	body, _ := json.Marshal(resp)
	if c.outcome == OutcomeMalformed {
		body = body[:len(body)/2]
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(http.StatusOK)
	w.Write(body) //nolint:errcheck // the client may be gone
}

// apiError is the body of every error answer, as the API sends it.
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Status  string `json:"status"`
	Details []any  `json:"details,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		code, body = http.StatusInternalServerError, []byte(`{"error":{"code":500,"message":"encode response","status":"INTERNAL"}}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(code)
	w.Write(body) //nolint:errcheck // the client may be gone
}

func writeError(w http.ResponseWriter, code int, status, msg string, details ...any) {
	writeJSON(w, code, map[string]apiError{"error": {Code: code, Message: msg, Status: status, Details: details}})
}

func writeBadKey(w http.ResponseWriter) {
	writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.",
		map[string]any{
			"@type":    "type.googleapis.com/google.rpc.ErrorInfo",
			"reason":   "API_KEY_INVALID",
			"domain":   "googleapis.com",
			"metadata": map[string]string{"service": "generativelanguage.googleapis.com"},
		})
}

func writeNotFound(w http.ResponseWriter, model, method string) {
	writeError(w, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf(
		"models/%s is not found for API version v1beta, or is not supported for %s. Call ListModels to see the list of available models and their supported methods.",
		model, method))
}

func writeOverloaded(w http.ResponseWriter) {
	writeError(w, http.StatusServiceUnavailable, "UNAVAILABLE", "The model is overloaded. Please try again later.")
}

// quotaNames are each quota's metric and id as the API reports them.
var quotaNames = map[quotaKind]struct{ metric, id string }{
	kindRPM: {"generativelanguage.googleapis.com/generate_requests_per_model", "GenerateRequestsPerMinutePerProjectPerModel"},
	kindTPM: {"generativelanguage.googleapis.com/generate_content_input_token_count", "GenerateContentInputTokensPerModelPerMinute"},
	kindRPD: {"generativelanguage.googleapis.com/generate_requests_per_model_per_day", "GenerateRequestsPerDayPerProjectPerModel"},
}

func writeRateLimited(w http.ResponseWriter, model string, vs []violation, delay time.Duration) {
	var msg strings.Builder
	msg.WriteString("You exceeded your current quota, please check your plan and billing details. " +
		"For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. " +
		"To monitor your current usage, head to: https://ai.dev/usage?tab=rate-limit. ")
	violations := make([]map[string]any, 0, len(vs))
	for _, v := range vs {
		n := quotaNames[v.kind]
		fmt.Fprintf(&msg, "\n* Quota exceeded for metric: %s, limit: %d, model: %s", n.metric, v.limit, model)
		violations = append(violations, map[string]any{
			"quotaMetric":     n.metric,
			"quotaId":         n.id,
			"quotaDimensions": map[string]string{"location": "global", "model": model},
			"quotaValue":      strconv.Itoa(v.limit),
		})
	}
	fmt.Fprintf(&msg, "\nPlease retry in %s.", strconv.FormatFloat(delay.Seconds(), 'f', -1, 64)+"s")
	writeError(w, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", msg.String(),
		map[string]any{
			"@type":      "type.googleapis.com/google.rpc.QuotaFailure",
			"violations": violations,
		},
		map[string]any{
			"@type": "type.googleapis.com/google.rpc.Help",
			"links": []map[string]string{{
				"description": "Learn more about Gemini API quotas",
				"url":         "https://ai.google.dev/gemini-api/docs/rate-limits",
			}},
		},
		map[string]any{
			"@type":      "type.googleapis.com/google.rpc.RetryInfo",
			"retryDelay": formatDuration(delay),
		})
}
