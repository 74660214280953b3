// Package batch drains an API stage through the Gemini Batch API, at half
// the online price, keeping the per-item guarantees of the online path.
//
// # The model
//
// A Driver groups the items queued at its stage into jobs of Config.Size
// requests. Each job goes through the store's job records (see the bbolt
// and PostgreSQL stores' batch.go), one transaction per step:
//
//  1. intent: the job's number, display name and item ids are recorded and
//     the items leave the queue (they are "in batch job N": the online
//     dispatcher never sees them and no other job takes them);
//  2. create: the requests are built exactly as the online call
//     (stages.LLM.BatchRequest), each carrying its item id as its key
//     (metadata "key" inlined, "key" of a JSONL line in a file), sent
//     inlined while the job is under Config.InlineBytes (the API's limit is
//     20 MB) and as a JSONL file through the Files upload otherwise, and
//     created with the display name; the API's name is then recorded;
//  3. poll with a growing interval (Config.Poll doubling to PollMax);
//  4. on SUCCEEDED the results are matched to items by key, never by
//     position, judged exactly as the online answers (DecodeBatch), and
//     committed per item through the store's transition code: an answer
//     becomes the stage's output, a permanent error a dead letter, a fatal
//     one stops the run; the rest (transient errors, rate limits, answers
//     the online path would repair, items with no result) go back to the
//     queue. A job whose every request failed is a failed job, whatever
//     its state says.
//  5. FAILED, CANCELLED, EXPIRED, or still PENDING/RUNNING at
//     Config.Deadline after create: the job is cancelled if live and its
//     items go back to the queue.
//
// Create is not idempotent (the same request twice makes two jobs), so a
// crash between create and the record must not lead to a second create: on
// start, an intent without an API name is looked up at the API by its
// display name (Batches.All) and re-attached when found; only an intent
// found nowhere is created. Found nowhere is not proof while a create may
// still be in flight: the server can finish a create after its client
// died, or list the job late. So the time a create is sent is recorded
// before it is sent (pipeline.BatchJob.CreateSent), and an intent whose
// create's outcome is unknown (its answer lost, the run killed) is looked
// up again until Config.CreateSettle after that time before it is
// created. A 429 on create waits (Config.CreateBackoff,
// doubling to CreateBackoffMax) and retries; it never spins.
//
// # The answer cache and the budget
//
// A job asks only what the store's answer cache cannot answer, under the
// key the online path uses (pipeline.CacheKeyOf): at create, an item
// whose question is cached is committed from the cache without a
// request, and an item whose question another request asks (in the same
// job, or in a job in flight) is held without one; when the results are
// applied it shares that answer (or finds it in the cache, or goes back
// to the queue). Every answer bought fills the cache.
//
// With Config.Budget, a job's requests are reserved, at the batch price,
// what the runner reserves for an online call (the input estimated from
// the request, scaled by what was billed; the output at the request's
// cap) before it is created, and the reservation is recorded with the
// create (pipeline.BatchJob.ReservedUSD), so a run resumed after a kill
// counts what its open jobs may cost (a job left open by a run without a
// budget reserved nothing: it holds its items' estimate). Results settle it at what they were
// billed, committed to the ledger with them, once: a job whose results
// were committed before its run died (pipeline.BatchJob.ResultsCommitted;
// what create commits without a request does not count), not yet closed,
// is applied again without billing its rows again. A job whose
// reservation does not fit is not created: the driver waits for the jobs in flight, then
// creates one last job with what fits, and stops with a BudgetError.
//
// Modes: in ModeBatch the driver runs rounds, sending what came back to the
// queue again, up to Config.MaxRounds (a round sends each item once: what
// its jobs give back waits for the next round; with other workers, what
// their jobs gave back while it waited for them too); in ModeAuto it runs one round and
// leaves whatever the batch did not answer by the deadline in the queue for
// the online runner (and its AIMD limiter) to drain. ModeAuto's deadline is
// the run's, counted from its start (or its oldest open intent), never
// renewed per job: past it no job is reserved and every open one is
// cancelled.
//
// However many rounds, runs and workers take their turn at an item, it is
// sent in at most Config.MaxSends jobs at its stage (the store counts
// them, see sends.go); an item whose answers never commit then goes to
// the stage's dead letters, saying so, instead of being paid for again.
//
// # What the genai SDK does (v1.77.0, checked in its source)
//
//   - Batches.Create(ctx, model, *BatchJobSource, *CreateBatchJobConfig)
//     sends POST {model}:batchGenerateContent with
//     {"batch":{"displayName", "inputConfig":{"fileName"} or
//     {"requests":{"requests":[{"request":{..},"metadata":{..}}]}}}};
//     exactly one of FileName and InlinedRequests (checked client-side). An
//     inlined request's Config is converted like GenerateContent's: the
//     system instruction (and tools, safety settings) move to the request,
//     the rest to request.generationConfig.
//   - The job is read from the long-running operation's metadata only
//     (batchJobFromMldev): name, metadata.displayName, state
//     (BATCH_STATE_* mapped to JOB_STATE_*), createTime, endTime,
//     updateTime, model and metadata.output (responsesFile ->
//     Dest.FileName, inlinedResponses.inlinedResponses -> Dest.
//     InlinedResponses). startTime, batchStats (request counts) and the
//     operation's error are dropped on this backend; BatchJob.Error stays
//     nil. The driver counts from the results instead.
//   - InlinedResponse{Response, Metadata, Error *JobError}; JobError.Details
//     is []string, so a row error with object details (a full
//     google.rpc.Status) would fail the SDK's decoding of the whole job.
//   - Batches.Get / Cancel / Delete accept only names matching
//     "batches/[^/]+$". Cancel returns only an error. List/All page with
//     pageSize/pageToken over GET batches (response "operations").
//   - Files.Upload: POST upload/v1beta/files with X-Goog-Upload-Protocol:
//     resumable and Command: start, then 8 MiB chunks to the returned
//     X-Goog-Upload-Url (its host replaced by the base URL's) with
//     "upload" and a final "upload, finalize", each needing an
//     X-Goog-Upload-Status answer; the body of the last is {"file":{..}}.
//   - Files.Download(ctx, NewDownloadURIFromFile(f)) reads f.DownloadURI
//     ("files/ID" works), GETs v1beta/files/ID:download?alt=media and
//     returns the whole body in memory without checking the HTTP status:
//     an error body comes back as if it were the file. The driver therefore
//     refuses a responses file with a line that is not a keyed result.
//
// A Driver is not safe for concurrent use; run one per stage and process.
// On a store that workers share (a Leaser) each runs its own Driver: a
// job is driven by the one worker holding its lease (see lease.go).
package batch
