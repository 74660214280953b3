// This file is a batch job's life: its state as a function of the clock,
// the answers to its requests once it succeeds, and the operation body the
// API returns for it.

package geminisim

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"strconv"
	"time"
)

// advance brings j's state up to now and returns it; the first time j is
// seen SUCCEEDED its requests are answered and counted. Call with s.mu held.
func (s *Server) advance(j *simJob, now time.Time) string {
	if j.state != "" && j.state != statePending && j.state != stateRunning {
		return j.state
	}
	bc := s.cfg.Batch
	expire := bc.Expire
	if expire <= 0 {
		expire = DefaultBatchExpire
	}
	age := now.Sub(j.created)
	end := bc.Pending + bc.Running
	switch {
	case j.cancelled:
		j.state, j.ended = stateCancelled, j.cancelTime
	case j.fate == FateStuck:
		j.state = statePending
	case j.fate == FateExpire || end >= expire:
		j.state = statePending
		if age >= expire {
			j.state, j.ended = stateExpired, j.created.Add(expire)
		}
	case age < bc.Pending:
		j.state = statePending
	case age < end:
		j.state = stateRunning
	case j.fate == FateFail:
		j.state, j.ended = stateFailed, j.created.Add(end)
	default:
		j.state, j.ended = stateSucceeded, j.created.Add(end)
		s.answerJob(j)
	}
	return j.state
}

// answerJob answers every request of a succeeded job, as the online path
// would (same labels, faults and blocks), and counts each as one call of
// its item. Call with s.mu held.
func (s *Server) answerJob(j *simJob) {
	b := s.batch()
	order := make([]int, len(j.rows))
	for i := range order {
		order[i] = i
	}
	if s.cfg.Batch.Shuffle {
		seed := sha256.Sum256([]byte(fmt.Sprintf("%d/%s", s.cfg.Seed, j.id)))
		rng := rand.New(rand.NewPCG(binary.BigEndian.Uint64(seed[:8]), binary.BigEndian.Uint64(seed[8:16])))
		rng.Shuffle(len(order), func(a, c int) { order[a], order[c] = order[c], order[a] })
	}
	for _, i := range order {
		row := &j.rows[i]
		user := row.req.userText()
		c := call{model: j.model, promptTokens: row.req.promptTokens()}
		key := rowKey(row, user, &c.item)
		labels, props := row.req.schema()
		c.n = s.itemCalls[c.item]
		s.itemCalls[c.item]++
		s.decide(&c, user, answerFor(row.req.GenerationConfig, user, labels, props), row.req.GenerationConfig, 0)
		errCode, errMsg := 0, ""
		switch {
		case j.fate == FateRowsFail || s.draw(&c, 'b') < s.cfg.Batch.RowErrors || c.outcome == OutcomeErr500:
			errCode, errMsg = 13, "Internal error encountered."
			c.outcome = OutcomeErr500
		case c.outcome == OutcomeErr503:
			errCode, errMsg = 14, "The model is overloaded. Please try again later."
		case c.outcome == OutcomeHang:
			errCode, errMsg = 4, "Deadline expired before operation could complete."
		case c.outcome == OutcomeMalformed:
			// No transport to cut a body in half: the answer arrives whole.
			c.outcome = OutcomeOK
		}
		var entry map[string]any
		billed := 0
		if errCode != 0 {
			// google.rpc.Status without details: the SDK's JobError.Details
			// is []string and an object there would fail its decoding.
			entry = map[string]any{"error": map[string]any{"code": errCode, "message": errMsg}}
			j.rowErrors++
			b.stats.RowErrors++
			c.answerTokens = 0
		} else {
			rec := httptest.NewRecorder()
			s.respond(rec, &c)
			entry = map[string]any{"response": json.RawMessage(rec.Body.Bytes())}
			billed = c.promptTokens + c.answerTokens
			b.stats.BilledTokens += int64(billed)
		}
		if j.fromFile {
			entry["key"] = row.key
		} else if row.metadata != nil {
			entry["metadata"] = row.metadata
		}
		line, _ := json.Marshal(entry)
		j.results = append(j.results, line)
		b.stats.Rows++
		s.countLocked(c.outcome, key, billed, c.promptTokens)
	}
	if j.fromFile {
		var out bytes.Buffer
		for _, l := range j.results {
			out.Write(l)
			out.WriteByte('\n')
		}
		b.seq++
		id := s.resourceID('o', b.seq)
		b.files[id] = &simFile{id: id, displayName: "batch-" + j.id + "-output", mimeType: "application/jsonl", data: out.Bytes(), created: s.now()}
		j.outFile = "files/" + id
		j.results = nil
	}
}

// operation is j as the API returns it: a long-running operation whose
// metadata is the batch (what the SDK reads) and, once done, a response
// with the output (what the REST docs' samples read) or an error.
func (s *Server) operation(j *simJob, now time.Time) map[string]any {
	state := s.advance(j, now)
	meta := map[string]any{
		"@type":       "type.googleapis.com/google.ai.generativelanguage.v1beta.GenerateContentBatch",
		"model":       "models/" + j.model,
		"displayName": j.displayName,
		"state":       state,
		"createTime":  j.created.UTC().Format(time.RFC3339Nano),
		"updateTime":  now.UTC().Format(time.RFC3339Nano),
	}
	n := len(j.rows)
	stats := map[string]any{"requestCount": strconv.Itoa(n)}
	switch state {
	case statePending, stateRunning:
		stats["pendingRequestCount"] = strconv.Itoa(n)
	case stateSucceeded:
		stats["successfulRequestCount"] = strconv.Itoa(n - j.rowErrors)
		stats["failedRequestCount"] = strconv.Itoa(j.rowErrors)
	}
	meta["batchStats"] = stats
	op := map[string]any{"name": "batches/" + j.id, "metadata": meta}
	if !j.ended.IsZero() {
		meta["endTime"] = j.ended.UTC().Format(time.RFC3339Nano)
		op["done"] = true
	}
	switch state {
	case stateSucceeded:
		var output map[string]any
		if j.fromFile {
			output = map[string]any{"responsesFile": j.outFile}
		} else {
			inl := make([]json.RawMessage, len(j.results))
			copy(inl, j.results)
			output = map[string]any{"inlinedResponses": map[string]any{"inlinedResponses": inl}}
		}
		meta["output"] = output
		resp := map[string]any{"@type": "type.googleapis.com/google.ai.generativelanguage.v1beta.GenerateContentBatchOutput"}
		for k, v := range output {
			resp[k] = v
		}
		op["response"] = resp
	case stateFailed:
		op["error"] = map[string]any{"code": 13, "message": "Batch job failed: internal error."}
	case stateExpired:
		op["error"] = map[string]any{"code": 4, "message": "Batch job expired before it could run (48 h)."}
	case stateCancelled:
		op["error"] = map[string]any{"code": 1, "message": "Batch job was cancelled."}
	}
	return op
}

// rowKey is the accounting key of a batch request, as itemKey is an
// online request's: the item the request names (a file line's key, or an
// inlined request's metadata "key") when it names one, so that an item's
// batch and online calls add up in one Stats.Items entry; else the hash
// of its user text.
func rowKey(row *batchRow, user string, draw *[32]byte) string {
	id := row.key
	if id == "" {
		id = row.metadata["key"]
	}
	if id != "" && len(id) <= maxItemKey {
		*draw = sha256.Sum256([]byte("item\x00" + id))
		return ItemID(id)
	}
	*draw = sha256.Sum256([]byte(user))
	return hex.EncodeToString(draw[:])
}
