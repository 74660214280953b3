package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/internal/reviewgen"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
)

// DefaultEngineItems is EngineConfig.Items' default.
const DefaultEngineItems = 20_000

// InstantClassify is a stand-in for the classify stage that makes no
// call at all: no HTTP, no model. It answers at once with a
// classify-shaped output whose label is a hash of the item's id, so an
// engine benchmark measures the store and the runner, not an API.
type InstantClassify struct{ calls atomic.Int64 }

// Name is "classify": the aggregate stage reads the output of the stage
// of that name.
func (c *InstantClassify) Name() string { return "classify" }

// UsesLimiter reports true, as the real classify stage does.
func (c *InstantClassify) UsesLimiter() bool { return true }

// Calls counts the items answered.
func (c *InstantClassify) Calls() int64 { return c.calls.Load() }

// Process answers it at once.
func (c *InstantClassify) Process(_ context.Context, it pipeline.Item) (pipeline.Result, error) {
	c.calls.Add(1)
	h := fnv.New32a()
	h.Write([]byte(it.ID))
	label := stages.DefaultLabels[h.Sum32()%uint32(len(stages.DefaultLabels))]
	out, err := json.Marshal(stages.ClassifyOutput{Label: label, Confidence: 0.9, Reason: "instant stand-in", Model: "none (instant stand-in)"})
	return pipeline.Result{Output: out, Usage: pipeline.Usage{PromptTokens: 50, CandidateTokens: 20, TotalTokens: 70}}, err
}

// engineAggregate is the aggregate stage as `sawtooth run` configures it
// by default (--group-by app,month, --date-field date, --rating-field
// rating).
func engineAggregate() *stages.Aggregate {
	return &stages.Aggregate{GroupBy: []string{"app", "month"}, DateField: "date", RatingField: "rating"}
}

// EngineStages are the real sanitize and aggregate stages around
// classify: --workers 8 per local stage, as `sawtooth run`, and 64 for the
// API stage (the pool `sawtooth run` gives it on PostgreSQL; a store
// drains the same whatever the pool past a few dozen). The API stage has
// no limiter here: with an instant stage it would only measure itself.
func EngineStages(classify pipeline.Stage) []pipeline.StageConfig {
	return []pipeline.StageConfig{
		{Stage: &stages.Sanitize{}, Workers: pipeline.DefaultWorkers, MaxAttempts: 1},
		{Stage: classify, Workers: 64, MaxAttempts: 1},
		{Stage: engineAggregate(), Workers: pipeline.DefaultWorkers, MaxAttempts: 1},
	}
}

// EngineConfig configures RunEngine.
type EngineConfig struct {
	// DB is a PostgreSQL URL or key=value string to measure; each run
	// creates its own schema there (sawtooth_bench_PID_N) and drops it
	// at the end, so the database's own pipelines are never touched.
	// Empty measures bbolt only.
	DB string `json:"-"`
	// Workers lists the worker counts to measure PostgreSQL with, each
	// a separate run.
	Workers []int `json:"workers"`
	// Bolt adds (or, without DB, is) one bbolt run, with one worker: a
	// bbolt file belongs to one process.
	Bolt bool `json:"bolt"`
	// Items is how many items each run drains. Default DefaultEngineItems.
	Items int `json:"items"`
	// Dir holds the bbolt file; "" means the system's temporary directory.
	Dir string `json:"-"`
	// Log receives progress lines; nil discards them.
	Log io.Writer `json:"-"`
}

// EngineResult is one run of the engine benchmark.
type EngineResult struct {
	// Store is "postgresql" or "bbolt".
	Store string `json:"store"`
	// Workers is how many runners drained the items together; Mode says
	// what a worker is.
	Workers int    `json:"workers"`
	Mode    string `json:"mode"`
	Items   int    `json:"items"`
	// Seconds is the drain's wall time, from the workers' start to the
	// last one's end (ingest is not timed).
	Seconds     float64 `json:"seconds"`
	ItemsPerSec float64 `json:"items_per_s"`
	// Durable says whether a commit that returned survives a crash of the
	// machine; Durability says why (the server's settings, or bbolt's
	// fsync).
	Durable    bool   `json:"durable"`
	Durability string `json:"durability"`
	// LeasesLost counts the claims fenced off or lost (PostgreSQL): a
	// healthy run has none.
	LeasesLost int64 `json:"leases_lost"`
	// Load is the 1-minute load average before and after the run.
	Load string `json:"load"`
	// Space is, for bbolt, the file's bytes after the drain ("file"),
	// after `sawtooth compact` ("compacted") and the bytes of pages of
	// each bucket before compacting; InputBytes is the items as JSON
	// Lines, what the file is measured against.
	Space      map[string]int64 `json:"space,omitempty"`
	InputBytes int64            `json:"input_bytes,omitempty"`
	// PeakRSS is the process's peak resident set in bytes when the run
	// ended (getrusage): for one bbolt run, what the drain needed, the
	// file's mapped pages included.
	PeakRSS int64 `json:"peak_rss,omitempty"`
	// Claims counts the workers' claim statements that leased entries
	// (PostgreSQL), EmptyClaims those that found none, Claimed the
	// entries leased; Commits the fenced commit transactions and
	// Committed the transitions they carried. The rates are over
	// Seconds.
	Claims        int64   `json:"claims,omitempty"`
	EmptyClaims   int64   `json:"empty_claims,omitempty"`
	Claimed       int64   `json:"claimed,omitempty"`
	ClaimsPerSec  float64 `json:"claims_per_s,omitempty"`
	Commits       int64   `json:"commits,omitempty"`
	Committed     int64   `json:"committed,omitempty"`
	CommitsPerSec float64 `json:"commits_per_s,omitempty"`
	// DatabaseBytes is pg_database_size after the drain and a VACUUM of
	// the bench's schema (everything the database holds); SchemaBytes
	// the bench schema's tables, indexes and TOAST included, and Tables
	// each of them.
	DatabaseBytes int64            `json:"database_bytes,omitempty"`
	SchemaBytes   int64            `json:"schema_bytes,omitempty"`
	Tables        map[string]int64 `json:"tables,omitempty"`
	// CompactedBytes is SchemaBytes after `sawtooth compact` rewrote
	// every table of the schema (PostgreSQL), CompactedTables each
	// table's bytes then; CompactSeconds how long the rewrite took.
	CompactedBytes  int64            `json:"compacted_bytes,omitempty"`
	CompactedTables map[string]int64 `json:"compacted_tables,omitempty"`
	CompactSeconds  float64          `json:"compact_s,omitempty"`
	// ReportSeconds is the time to load the report with a pivot by app
	// and month (`report --by app,month` without rendering);
	// ExportRows and ExportSeconds are `export --all` as JSON Lines to
	// nowhere, streamed.
	ReportSeconds    float64 `json:"report_s"`
	ExportRows       int64   `json:"export_rows"`
	ExportSeconds    float64 `json:"export_s"`
	ExportRowsPerSec float64 `json:"export_rows_per_s"`
}

// Worker modes.
const (
	modeInProcess = "in-process: own connection pool and runner each"
	modeBolt      = "one process owns the file"
)

// RunEngine drains cfg.Items generated reviews through sanitize, the
// instant classify stand-in and aggregate with the same pipeline.Runner
// `sawtooth run` uses, once per PostgreSQL worker count and once on
// bbolt, and checks each run: every item done, nothing queued or dead,
// the store's invariants hold and the stored aggregate equals its
// recomputation from the outputs. A run that fails the check is an error.
func RunEngine(ctx context.Context, cfg EngineConfig) ([]EngineResult, error) {
	if cfg.Items <= 0 {
		cfg.Items = DefaultEngineItems
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	var out []EngineResult
	if cfg.DB != "" {
		durable, why, err := postgresDurability(ctx, cfg.DB)
		if err != nil {
			return out, err
		}
		for n, w := range cfg.Workers {
			if w <= 0 {
				return out, fmt.Errorf("engine bench: %d workers: want at least 1", w)
			}
			fmt.Fprintf(cfg.Log, "bench: postgresql, %s, %d items...\n", workerCount(w), cfg.Items)
			r, err := runPostgresEngine(ctx, cfg, w, fmt.Sprintf("sawtooth_bench_%d_%d", os.Getpid(), n+1))
			if err != nil {
				return out, fmt.Errorf("engine bench on PostgreSQL with %d workers: %w", w, err)
			}
			r.Durable, r.Durability = durable, why
			fmt.Fprintf(cfg.Log, "bench: postgresql, %s: %.0f items/s\n", workerCount(w), r.ItemsPerSec)
			out = append(out, r)
		}
	}
	if cfg.Bolt || cfg.DB == "" {
		fmt.Fprintf(cfg.Log, "bench: bbolt, 1 worker, %d items...\n", cfg.Items)
		r, err := runBoltEngine(ctx, cfg)
		if err != nil {
			return out, fmt.Errorf("engine bench on bbolt: %w", err)
		}
		fmt.Fprintf(cfg.Log, "bench: bbolt: %.0f items/s\n", r.ItemsPerSec)
		out = append(out, r)
	}
	return out, nil
}

// runBoltEngine drains the items in a fresh bbolt file with durable
// commits (fsync per group commit, as a run does).
func runBoltEngine(ctx context.Context, cfg EngineConfig) (EngineResult, error) {
	res := EngineResult{Store: "bbolt", Workers: 1, Mode: modeBolt, Items: cfg.Items,
		Durable: true, Durability: "fsync per group commit"}
	dir, err := os.MkdirTemp(cfg.Dir, "sawtooth-engine-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "engine.db")
	db, err := store.Open(path, store.Options{Stages: stageDefs})
	if err != nil {
		return res, err
	}
	defer db.Close()
	if res.InputBytes, err = ingestEngineItems(db, cfg.Items); err != nil {
		return res, err
	}
	load := loadAverage()
	r := &pipeline.Runner{Store: db, Stages: EngineStages(&InstantClassify{})}
	start := time.Now()
	_, err = r.Run(ctx)
	res.Seconds = time.Since(start).Seconds()
	res.Load = load + "-" + loadAverage()
	if err != nil {
		return res, err
	}
	res.ItemsPerSec = float64(cfg.Items) / res.Seconds
	res.PeakRSS = peakRSS()
	if err := verifyEngine(db, cfg.Items); err != nil {
		return res, err
	}
	if err := measureReads(db, &res); err != nil {
		return res, err
	}
	if res.Space, err = db.Space(); err != nil {
		return res, err
	}
	db.Close()
	st, err := store.Compact(path, 0)
	res.Space["compacted"] = st.After
	return res, err
}

// runPostgresEngine ingests the items into a fresh schema, then drains
// them with workers runners at once, each with its own handle (its own
// connection pool) and owner name, as separate processes would: they
// share nothing but the database, and claim, renew and commit through
// the fleet path (leases, fenced commits).
func runPostgresEngine(ctx context.Context, cfg EngineConfig, workers int, schema string) (res EngineResult, err error) {
	res = EngineResult{Store: "postgresql", Workers: workers, Mode: modeInProcess, Items: cfg.Items}
	defer func() {
		if derr := dropSchema(cfg.DB, schema); derr != nil && err == nil {
			err = derr
		}
	}()
	open := func(owner string) (*postgres.DB, error) {
		return postgres.Open(ctx, cfg.DB, postgres.Options{Stages: stageDefs, Schema: schema, Owner: owner})
	}
	admin, err := open("bench-ingest")
	if err != nil {
		return res, err
	}
	defer admin.Close()
	if res.InputBytes, err = ingestEngineItems(admin, cfg.Items); err != nil {
		return res, err
	}
	counts := &claimCounts{}
	handles := make([]*postgres.DB, workers)
	defer func() {
		for _, h := range handles {
			if h != nil {
				h.Close()
			}
		}
	}()
	for w := range handles {
		if handles[w], err = open(fmt.Sprintf("bench-worker-%d", w+1)); err != nil {
			return res, err
		}
	}
	load := loadAverage()
	errs := make([]error, workers)
	sums := make([]pipeline.RunSummary, workers)
	var wg sync.WaitGroup
	start := time.Now()
	for w, h := range handles {
		wg.Go(func() {
			r := &pipeline.Runner{Store: countingDB{h, counts}, Stages: EngineStages(&InstantClassify{}), Log: workerLog(cfg.Log, w+1)}
			sums[w], errs[w] = r.Run(ctx)
		})
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	res.Load = load + "-" + loadAverage()
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	for _, s := range sums {
		for _, st := range s.Stages {
			res.LeasesLost += st.LeasesLost
		}
	}
	res.ItemsPerSec = float64(cfg.Items) / res.Seconds
	counts.record(&res)
	if err := verifyEngine(admin, cfg.Items); err != nil {
		return res, err
	}
	if err := measureReads(admin, &res); err != nil {
		return res, err
	}
	if err := vacuumSchema(ctx, cfg.DB, schema); err != nil {
		return res, err
	}
	if err := postgresSpace(ctx, cfg.DB, schema, &res); err != nil {
		return res, err
	}
	start = time.Now()
	st, err := admin.Compact(ctx, postgres.CompactOptions{})
	res.CompactSeconds = time.Since(start).Seconds()
	if err != nil {
		return res, err
	}
	res.CompactedBytes, res.CompactedTables = st.After, map[string]int64{}
	for _, t := range st.Tables {
		res.CompactedTables[t.Name] = t.After
	}
	return res, verifyEngine(admin, cfg.Items)
}

// workerLog passes a worker's warnings (a heartbeat that failed, leases
// lost and why) to the bench's log, naming the worker: without them a
// run that lost leases would not say why.
func workerLog(w io.Writer, n int) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})).With("worker", n)
}

// ingestEngineItems ingests n generated reviews, 1000 per transaction,
// skipping the few whose text is empty once sanitized (they would be
// dead-lettered), so that every item of a correct run ends done. It
// returns the bytes the items take as JSON Lines.
func ingestEngineItems(db pipeline.Database, n int) (int64, error) {
	g := reviewgen.New(DefaultItemSeed)
	batch := make([]pipeline.Record, 0, 1000)
	var size int64
	for i := 1; i <= n; {
		rv := g.Next()
		if _, err := stages.Clean(rv.Text, stages.SanitizeOptions{}); err != nil {
			continue
		}
		r := record(rv, i)
		batch = append(batch, r)
		size += jsonlBytes(r)
		if len(batch) == cap(batch) || i == n {
			if _, err := db.Ingest(batch); err != nil {
				return size, fmt.Errorf("ingest: %w", err)
			}
			batch = batch[:0]
		}
		i++
	}
	return size, nil
}

// jsonlBytes is r's size as a line of an input file: id, text and each
// field at the top level, the rating a number.
func jsonlBytes(r pipeline.Record) int64 {
	line := map[string]any{"id": r.ID, "text": r.Text}
	for k, v := range r.Fields {
		line[k] = v
	}
	if n, err := strconv.Atoi(r.Fields["rating"]); err == nil {
		line["rating"] = n
	}
	b, _ := json.Marshal(line)
	return int64(len(b)) + 1
}

// verifyEngine checks a drained database: n items, all done, none queued
// or dead, the store's own invariants, and the stored aggregate equal to
// the one recomputed from every done item's outputs (what `sawtooth
// verify` does).
func verifyEngine(db pipeline.Database, n int) error {
	counts, err := db.Counts()
	if err != nil {
		return err
	}
	var problems []string
	if counts.Items != n || counts.Done != n {
		problems = append(problems, fmt.Sprintf("%d items, %d done: want %d and %d", counts.Items, counts.Done, n, n))
	}
	for _, s := range counts.Stages {
		if s.Queued != 0 || s.Dead != 0 {
			problems = append(problems, fmt.Sprintf("stage %s: %d queued, %d dead: want none", s.Stage, s.Queued, s.Dead))
		}
	}
	check, err := db.Check()
	if err != nil {
		return err
	}
	problems = append(problems, check...)
	agg := engineAggregate()
	var fresh pipeline.Tally
	err = db.ForEachDone(func(it pipeline.Item) error {
		f, err := agg.Fact(it)
		if err != nil {
			return fmt.Errorf("item %s: %w", it.ID, err)
		}
		fresh.Fold(it.ID, f, +1)
		return nil
	})
	if err != nil {
		return err
	}
	stored, err := db.Tally()
	if err != nil {
		return err
	}
	for _, d := range stored.Diff(fresh) {
		problems = append(problems, "aggregate (stored != recomputed): "+d)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s after the drain: %s", db.Path(), strings.Join(problems, "; "))
	}
	return nil
}

// postgresDurability reads the server settings that decide whether a
// commit that returned survives a crash: fsync, synchronous_commit and
// full_page_writes must all be on (synchronous_commit may also be local
// or a replica level).
func postgresDurability(ctx context.Context, dsn string) (bool, string, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return false, "", fmt.Errorf("connect to %s: %w", postgres.Redact(dsn), err)
	}
	defer conn.Close(ctx)
	var fsync, syncCommit, fullPages string
	if err := conn.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit'), current_setting('full_page_writes')`).
		Scan(&fsync, &syncCommit, &fullPages); err != nil {
		return false, "", fmt.Errorf("read the durability settings of %s: %w", postgres.Redact(dsn), err)
	}
	why := fmt.Sprintf("fsync=%s synchronous_commit=%s full_page_writes=%s", fsync, syncCommit, fullPages)
	return fsync == "on" && syncCommit != "off" && fullPages == "on", why, nil
}

// dropSchema removes a run's schema and everything in it, giving up
// after a minute rather than hanging the bench on a stuck server.
func dropSchema(dsn, schema string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	drop := "DROP SCHEMA IF EXISTS " + pgx.Identifier{schema}.Sanitize() + " CASCADE"
	conn, err := pgx.Connect(ctx, dsn)
	if err == nil {
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, drop)
	}
	if err != nil {
		return fmt.Errorf("drop the bench schema %s in %s: %w (drop it by hand: psql -c '%s')", schema, postgres.Redact(dsn), err, drop)
	}
	return nil
}

// loadAverage is the 1-minute load average ("?" where /proc has none).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	first, _, _ := strings.Cut(string(b), " ")
	return first
}

func workerCount(n int) string {
	if n == 1 {
		return "1 worker"
	}
	return fmt.Sprintf("%d workers", n)
}
