// This file serves the Batch API: POST models/{m}:batchGenerateContent
// (inlined requests or an uploaded JSONL file), GET and DELETE batches/{id},
// POST batches/{id}:cancel and the paged GET batches, with the
// long-running-operation bodies the genai SDK reads: the job in metadata
// (state, displayName, times, batchStats, output), and once it ended done,
// response (the output again, as the REST samples read it) or error. Files
// (the resumable upload, metadata, download) are in files.go.
//
// A job's state is a function of the clock (Config.Now): PENDING for
// BatchConfig.Pending, RUNNING for Running, then its Fate. Its requests
// are answered the first time it is seen SUCCEEDED (by a get, a list or
// BatchStats), exactly as the online path answers them (labels, faults,
// safety blocks; a fault that only a connection can have becomes an error
// status), and each is counted as one call of its item in Stats.Items,
// billed unless it is an error status. Per-request errors are
// google.rpc.Status objects with gRPC codes (13 INTERNAL, 14 UNAVAILABLE, 4
// DEADLINE_EXCEEDED) and no details.

package geminisim

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Defaults for the zero fields of BatchConfig.
const (
	DefaultBatchExpire   = 48 * time.Hour
	DefaultBatchPageSize = 20
)

// BatchConfig configures the Batch API surface. The zero value runs every
// job to SUCCEEDED at once, in request order, with no limits.
type BatchConfig struct {
	// Pending and Running are how long a job spends in each state after
	// creation before it ends (measured with Config.Now).
	Pending, Running time.Duration
	// Expire is when a job not ended since creation becomes EXPIRED with no
	// results; default DefaultBatchExpire (48h, as the real API).
	Expire time.Duration
	// Fates are the fates of the jobs in creation order (the first job
	// created gets Fates[0]); jobs past the end succeed.
	Fates []Fate
	// Shuffle returns each job's results in a seeded random order instead
	// of request order, as the real API may at 10k+ requests.
	Shuffle bool
	// RowErrors is the probability that one request of a succeeded job
	// comes back as an error status (INTERNAL) instead of a response,
	// drawn per (Seed, item, call number) like Config.Faults.
	RowErrors float64
	// MaxJobs and MaxEnqueuedTokens bound the jobs and their estimated
	// prompt tokens PENDING or RUNNING at once, per model; a create past
	// either gets 429 RESOURCE_EXHAUSTED. 0 means unlimited.
	MaxJobs, MaxEnqueuedTokens int
	// PageSize is the largest page of GET batches; default
	// DefaultBatchPageSize.
	PageSize int
	// CreateDelay is how long after a create is accepted the job first
	// shows in GET batches (measured with Config.Now), as a create the
	// server finishes after its client gave up on it: a client that lists
	// before then does not see it. Its creator, which got the name, can
	// get it at once. 0 lists it at once.
	CreateDelay time.Duration
	// Observe, if set, is called (without the server's lock, before the
	// answer is written) at each BatchEvent, so a test can act at an exact
	// step, such as killing its client between create and the client's
	// record of it.
	Observe func(BatchEvent)
}

// BatchEvent is a step of the Batch API that BatchConfig.Observe sees.
type BatchEvent string

const (
	// EventUpload: a resumable upload starts (a job's input file).
	EventUpload BatchEvent = "upload"
	// EventCreate: a create arrived; no job exists yet.
	EventCreate BatchEvent = "create"
	// EventCreated: the job exists; the answer is not written yet.
	EventCreated BatchEvent = "created"
	// EventPoll: a get of a job still PENDING or RUNNING.
	EventPoll BatchEvent = "poll"
	// EventResults: a get of a SUCCEEDED job, or a download of a file.
	EventResults BatchEvent = "results"
)

// observe reports ev to BatchConfig.Observe. Call without s.mu.
func (s *Server) observe(ev BatchEvent) {
	if f := s.cfg.Batch.Observe; f != nil {
		f(ev)
	}
}

// Fate is how a batch job ends.
type Fate string

const (
	// FateSucceed: SUCCEEDED after Pending+Running, every request answered
	// as the online path would (faults, safety blocks, RowErrors).
	FateSucceed Fate = "succeed"
	// FateFail: FAILED after Pending+Running, with a job-level error and
	// no results.
	FateFail Fate = "fail"
	// FateExpire: PENDING until Expire, then EXPIRED with no results.
	FateExpire Fate = "expire"
	// FateStuck: PENDING forever (never expires), until cancelled.
	FateStuck Fate = "stuck"
	// FateRowsFail: SUCCEEDED after Pending+Running, but every request
	// is an error status.
	FateRowsFail Fate = "rows_fail"
)

// ParseFates reads a comma-separated list of fates ("succeed,expire").
func ParseFates(s string) ([]Fate, error) {
	var out []Fate
	for _, f := range strings.Split(s, ",") {
		switch f = strings.TrimSpace(f); Fate(f) {
		case FateSucceed, FateFail, FateExpire, FateStuck, FateRowsFail:
			out = append(out, Fate(f))
		case "":
		default:
			return nil, fmt.Errorf("unknown batch fate %q (use succeed, fail, expire, stuck or rows_fail)", f)
		}
	}
	return out, nil
}

// Batch job states as the REST API spells them (the SDK maps them to
// genai.JobState's JOB_STATE_*).
const (
	statePending   = "BATCH_STATE_PENDING"
	stateRunning   = "BATCH_STATE_RUNNING"
	stateSucceeded = "BATCH_STATE_SUCCEEDED"
	stateFailed    = "BATCH_STATE_FAILED"
	stateCancelled = "BATCH_STATE_CANCELLED"
	stateExpired   = "BATCH_STATE_EXPIRED"
)

// BatchStats is the Batch API's accounting, as served by GET
// /_sim/batchstats. Each request of a succeeded job is also counted in
// Stats.Items as one call of its item (billed unless it is an error
// status), so "nothing paid twice" covers online and batch calls alike.
type BatchStats struct {
	// Created counts jobs created; Refused the creates answered 429.
	Created int `json:"created"`
	Refused int `json:"refused"`
	// ByDisplayName counts creates per display name: above 1 means a
	// client created the same job twice.
	ByDisplayName map[string]int `json:"by_display_name"`
	// States counts the jobs still listed, by current state.
	States map[string]int `json:"states"`
	// Rows counts the requests of succeeded jobs; RowErrors those answered
	// with an error status; BilledTokens what the others were billed (at
	// the batch price, half the online one, on the real API).
	Rows         int   `json:"rows"`
	RowErrors    int   `json:"row_errors"`
	BilledTokens int64 `json:"billed_tokens"`
	// Cancels counts cancel calls that ended a live job.
	Cancels int `json:"cancels"`
}

// batchState is the Server's Batch API state, guarded by Server.mu.
type batchState struct {
	jobs    map[string]*simJob // by id (without "batches/")
	order   []string           // ids in creation order, for the list
	files   map[string]*simFile
	uploads map[string]*upload
	seq     int64
	stats   BatchStats
}

// simJob is one batch job.
type simJob struct {
	id, displayName, model string
	created                time.Time
	listed                 time.Time // first shown by the list (BatchConfig.CreateDelay)
	fate                   Fate
	rows                   []batchRow
	fromFile               bool
	tokens                 int
	cancelled              bool
	cancelTime             time.Time
	finalized              bool
	state                  string
	ended                  time.Time
	results                []json.RawMessage // inlined responses, or output lines
	outFile                string
	rowErrors              int
}

// batchRow is one request of a job: the key (file input) or metadata
// (inlined) it came with, and the request.
type batchRow struct {
	key      string
	metadata map[string]string
	req      genRequest
}

func (s *Server) batch() *batchState {
	if s.batches == nil {
		s.batches = &batchState{
			jobs: map[string]*simJob{}, files: map[string]*simFile{}, uploads: map[string]*upload{},
			stats: BatchStats{ByDisplayName: map[string]int{}},
		}
	}
	return s.batches
}

// BatchStats returns a snapshot of the Batch API accounting. Jobs whose
// time is up are finished (and their requests counted) first.
func (s *Server) BatchStats() BatchStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.batch()
	now := s.now()
	st := b.stats
	st.ByDisplayName = make(map[string]int, len(b.stats.ByDisplayName))
	for k, v := range b.stats.ByDisplayName {
		st.ByDisplayName[k] = v
	}
	st.States = map[string]int{}
	for _, id := range b.order {
		if j := b.jobs[id]; j != nil {
			st.States[s.advance(j, now)]++
		}
	}
	return st
}

// serveBatch routes the Batch API and Files requests; it reports whether r
// was one of them.
func (s *Server) serveBatch(w http.ResponseWriter, r *http.Request) bool {
	p := r.URL.Path
	switch {
	case p == "/_sim/batchstats" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, s.BatchStats())
		return true
	case strings.HasPrefix(p, "/v1beta/models/") && strings.HasSuffix(p, ":batchGenerateContent") && r.Method == http.MethodPost:
		if s.keyOK(r) {
			s.createBatch(w, r, strings.TrimSuffix(strings.TrimPrefix(p, "/v1beta/models/"), ":batchGenerateContent"))
		} else {
			writeBadKey(w)
		}
		return true
	case p == "/v1beta/batches" && r.Method == http.MethodGet:
		if s.keyOK(r) {
			s.listBatches(w, r)
		} else {
			writeBadKey(w)
		}
		return true
	case strings.HasPrefix(p, "/v1beta/batches/"):
		if !s.keyOK(r) {
			writeBadKey(w)
			return true
		}
		id, cancel := strings.CutSuffix(strings.TrimPrefix(p, "/v1beta/batches/"), ":cancel")
		switch {
		case cancel && r.Method == http.MethodPost:
			s.cancelBatch(w, id)
		case !cancel && r.Method == http.MethodGet:
			s.getBatch(w, id)
		case !cancel && r.Method == http.MethodDelete:
			s.deleteBatch(w, id)
		default:
			writeError(w, http.StatusMethodNotAllowed, "INVALID_ARGUMENT", r.Method+" is not allowed on "+p)
		}
		return true
	}
	return s.serveFiles(w, r)
}

// createBody is the batchGenerateContent request body.
type createBody struct {
	Batch struct {
		DisplayName string `json:"displayName"`
		InputConfig struct {
			FileName string `json:"fileName"`
			Requests *struct {
				Requests []struct {
					Request  genRequest        `json:"request"`
					Metadata map[string]string `json:"metadata"`
				} `json:"requests"`
			} `json:"requests"`
		} `json:"inputConfig"`
	} `json:"batch"`
}

func (s *Server) createBatch(w http.ResponseWriter, r *http.Request, model string) {
	model = strings.TrimPrefix(model, "models/")
	if !s.models[model] {
		writeNotFound(w, model, "batchGenerateContent")
		return
	}
	s.observe(EventCreate)
	var body createBody
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Invalid JSON payload received (inlined requests are limited to 20 MB: use a file). "+err.Error())
		return
	}
	in := body.Batch.InputConfig
	j := &simJob{displayName: body.Batch.DisplayName, model: model}
	switch {
	case in.FileName != "" && in.Requests != nil:
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "inputConfig: only one of fileName and requests may be set.")
		return
	case in.FileName != "":
		rows, err := s.readInputFile(in.FileName)
		if err != nil {
			writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", err.Error())
			return
		}
		j.rows, j.fromFile = rows, true
	case in.Requests != nil && len(in.Requests.Requests) > 0:
		for _, rq := range in.Requests.Requests {
			j.rows = append(j.rows, batchRow{metadata: rq.Metadata, req: rq.Request})
		}
	default:
		writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "inputConfig: no requests.")
		return
	}
	for i := range j.rows {
		if len(j.rows[i].req.Contents) == 0 {
			writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", fmt.Sprintf("request %d: contents is not specified", i))
			return
		}
		j.tokens += j.rows[i].req.promptTokens()
	}

	op, refusal := s.admitJob(j)
	if refusal != nil {
		refusal(w)
		return
	}
	s.observe(EventCreated)
	writeJSON(w, http.StatusOK, op)
}

// admitJob makes j a job, or returns the 429 that refuses it when a
// BatchConfig limit is reached.
func (s *Server) admitJob(j *simJob) (op map[string]any, refusal func(http.ResponseWriter)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.batch()
	now := s.now()
	jobs, tokens := 0, 0
	for _, id := range b.order {
		o := b.jobs[id]
		if o == nil || o.model != j.model {
			continue
		}
		if st := s.advance(o, now); st == statePending || st == stateRunning {
			jobs++
			tokens += o.tokens
		}
	}
	bc := s.cfg.Batch
	switch {
	case bc.MaxJobs > 0 && jobs >= bc.MaxJobs:
		b.stats.Refused++
		return nil, func(w http.ResponseWriter) {
			writeBatchQuota(w, j.model, "BatchConcurrentJobsPerProject", bc.MaxJobs)
		}
	case bc.MaxEnqueuedTokens > 0 && tokens+j.tokens > bc.MaxEnqueuedTokens:
		b.stats.Refused++
		return nil, func(w http.ResponseWriter) {
			writeBatchQuota(w, j.model, "BatchEnqueuedTokensPerModelPerProject", bc.MaxEnqueuedTokens)
		}
	}
	b.seq++
	j.id = s.resourceID('b', b.seq)
	j.created = now
	j.listed = now.Add(bc.CreateDelay)
	j.fate = FateSucceed
	if n := b.stats.Created; n < len(bc.Fates) {
		j.fate = bc.Fates[n]
	}
	b.jobs[j.id] = j
	b.order = append(b.order, j.id)
	b.stats.Created++
	b.stats.ByDisplayName[j.displayName]++
	return s.operation(j, now), nil
}

// writeBatchQuota is the 429 for a create past a Batch API limit.
func writeBatchQuota(w http.ResponseWriter, model, quotaID string, limit int) {
	writeError(w, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED",
		fmt.Sprintf("You exceeded your current quota for batch jobs (%s, limit: %d, model: %s). Wait for running batch jobs to finish.", quotaID, limit, model),
		map[string]any{
			"@type": "type.googleapis.com/google.rpc.QuotaFailure",
			"violations": []map[string]any{{
				"quotaMetric":     "generativelanguage.googleapis.com/batch_enqueued_tokens",
				"quotaId":         quotaID,
				"quotaDimensions": map[string]string{"location": "global", "model": model},
				"quotaValue":      strconv.Itoa(limit),
			}},
		})
}

// resourceID is a repeatable lowercase id for the n-th resource of a kind
// (the SDK's file-name parser accepts only [a-z0-9]).
func (s *Server) resourceID(kind byte, n int64) string {
	var buf [17]byte
	binary.BigEndian.PutUint64(buf[:8], uint64(s.cfg.Seed))
	binary.BigEndian.PutUint64(buf[8:16], uint64(n))
	buf[16] = kind
	h := sha256.Sum256(buf[:])
	return hex.EncodeToString(h[:8])
}

func (s *Server) getBatch(w http.ResponseWriter, id string) {
	s.mu.Lock()
	j := s.batch().jobs[id]
	if j == nil {
		s.mu.Unlock()
		writeError(w, http.StatusNotFound, "NOT_FOUND", "Batch batches/"+id+" not found.")
		return
	}
	op := s.operation(j, s.now())
	state := j.state
	s.mu.Unlock()
	switch state {
	case statePending, stateRunning:
		s.observe(EventPoll)
	case stateSucceeded:
		if !j.fromFile {
			s.observe(EventResults)
		}
	}
	writeJSON(w, http.StatusOK, op)
}

func (s *Server) cancelBatch(w http.ResponseWriter, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.batch()
	j := b.jobs[id]
	if j == nil {
		writeError(w, http.StatusNotFound, "NOT_FOUND", "Batch batches/"+id+" not found.")
		return
	}
	now := s.now()
	switch s.advance(j, now) {
	case statePending, stateRunning:
		j.cancelled, j.cancelTime = true, now
		j.state = ""
		s.advance(j, now)
		b.stats.Cancels++
	case stateCancelled:
	default:
		writeError(w, http.StatusBadRequest, "FAILED_PRECONDITION", "Batch batches/"+id+" has already ended ("+j.state+").")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{})
}

func (s *Server) deleteBatch(w http.ResponseWriter, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.batch()
	if b.jobs[id] == nil {
		writeError(w, http.StatusNotFound, "NOT_FOUND", "Batch batches/"+id+" not found.")
		return
	}
	delete(b.jobs, id)
	writeJSON(w, http.StatusOK, map[string]any{})
}

// listBatches serves one page of the jobs, oldest first; the page token is
// the index of the page's first job.
func (s *Server) listBatches(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	size := s.cfg.Batch.PageSize
	if size <= 0 {
		size = DefaultBatchPageSize
	}
	if n, err := strconv.Atoi(q.Get("pageSize")); err == nil && n > 0 && n < size {
		size = n
	}
	from := 0
	if t := q.Get("pageToken"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Invalid page token.")
			return
		}
		from = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.batch()
	now := s.now()
	var live []string
	for _, id := range b.order {
		if j := b.jobs[id]; j != nil && !now.Before(j.listed) {
			live = append(live, id)
		}
	}
	ops := []any{}
	for i := from; i < len(live) && i < from+size; i++ {
		ops = append(ops, s.operation(b.jobs[live[i]], now))
	}
	body := map[string]any{"operations": ops}
	if from+size < len(live) {
		body["nextPageToken"] = strconv.Itoa(from + size)
	}
	writeJSON(w, http.StatusOK, body)
}

// readInputFile parses an uploaded JSONL input: one {"key", "request"}
// object per line. Call without s.mu.
func (s *Server) readInputFile(name string) ([]batchRow, error) {
	id := strings.TrimPrefix(name, "files/")
	s.mu.Lock()
	f := s.batch().files[id]
	s.mu.Unlock()
	if f == nil {
		return nil, fmt.Errorf("inputConfig.fileName: %s not found", name)
	}
	var rows []batchRow
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(f.data))
	sc.Buffer(make([]byte, 0, 64<<10), maxBody)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var l struct {
			Key     string     `json:"key"`
			Request genRequest `json:"request"`
		}
		if err := json.Unmarshal(line, &l); err != nil || !utf8.Valid(line) {
			return nil, fmt.Errorf("%s line %d: not a JSON request line: %v", name, n, err)
		}
		if l.Key == "" || seen[l.Key] {
			return nil, fmt.Errorf("%s line %d: key %q is missing or repeated", name, n, l.Key)
		}
		seen[l.Key] = true
		rows = append(rows, batchRow{key: l.Key, req: l.Request})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s has no requests", name)
	}
	return rows, nil
}
