package bench

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/report"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
)

// countingDB is a worker's PostgreSQL handle that counts its claim and
// commit statements on their way to the store. Every other method,
// and every interface the runner asks the store for, is the embedded
// handle's own, so the worker claims, renews and commits through the
// fleet path exactly as without it.
type countingDB struct {
	*postgres.DB
	c *claimCounts
}

// claimCounts are the claim and commit statements of a run's workers.
// Safe for concurrent use.
type claimCounts struct {
	claims, empty, claimed atomic.Int64
	commits, committed     atomic.Int64
}

// Claim counts a claim that leased something, the entries it leased,
// and a claim that found nothing (a worker polling an empty queue).
func (d countingDB) Claim(ctx context.Context, stage string, max int, lease time.Duration) ([]pipeline.Claim, error) {
	cs, err := d.DB.Claim(ctx, stage, max, lease)
	if err == nil {
		if len(cs) == 0 {
			d.c.empty.Add(1)
		} else {
			d.c.claims.Add(1)
			d.c.claimed.Add(int64(len(cs)))
		}
	}
	return cs, err
}

// CommitFenced counts a commit (one transaction) and the transitions it
// was given.
func (d countingDB) CommitFenced(ctx context.Context, ts []pipeline.FencedTransition) ([]uint64, error) {
	rejected, err := d.DB.CommitFenced(ctx, ts)
	if err == nil {
		d.c.commits.Add(1)
		d.c.committed.Add(int64(len(ts)))
	}
	return rejected, err
}

// record puts the counts, and their rates over the drain's seconds, in res.
func (c *claimCounts) record(res *EngineResult) {
	res.Claims, res.EmptyClaims, res.Claimed = c.claims.Load(), c.empty.Load(), c.claimed.Load()
	res.Commits, res.Committed = c.commits.Load(), c.committed.Load()
	if res.Seconds > 0 {
		res.ClaimsPerSec = float64(res.Claims) / res.Seconds
		res.CommitsPerSec = float64(res.Commits) / res.Seconds
	}
}

// measureReads times what is read from a drained database: the report
// with a pivot by app and month (`sawtooth report --by app,month`'s
// Load, rendering aside) and a streamed `export --all` as JSON Lines,
// whose rows it counts.
func measureReads(db pipeline.Database, res *EngineResult) error {
	start := time.Now()
	if _, err := report.Load(db, report.LoadOptions{By: []string{"app", "month"}}); err != nil {
		return fmt.Errorf("report --by app,month: %w", err)
	}
	res.ReportSeconds = time.Since(start).Seconds()
	var rows lineCounter
	start = time.Now()
	if err := report.Export(&rows, db, report.ExportOptions{Format: report.FormatJSONL}); err != nil {
		return fmt.Errorf("export --all: %w", err)
	}
	res.ExportSeconds = time.Since(start).Seconds()
	res.ExportRows = int64(rows)
	if res.ExportSeconds > 0 {
		res.ExportRowsPerSec = float64(rows) / res.ExportSeconds
	}
	return nil
}

// lineCounter is an io.Writer that counts the lines written to it.
type lineCounter int

func (l *lineCounter) Write(p []byte) (int, error) {
	for _, b := range p {
		if b == '\n' {
			*l++
		}
	}
	return len(p), nil
}

var _ io.Writer = (*lineCounter)(nil)

// postgresSpace reads the bytes of the database (pg_database_size: the
// bench's schema and whatever else the database holds) and of each
// table of the bench's schema with its indexes and TOAST
// (pg_total_relation_size). The bench reads them after vacuumSchema.
func postgresSpace(ctx context.Context, dsn, schema string, res *EngineResult) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", postgres.Redact(dsn), err)
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'`, schema)
	res.Tables = map[string]int64{}
	var name string
	var size int64
	if _, err := pgx.ForEachRow(rows, []any{&name, &size}, func() error {
		res.Tables[name] = size
		return nil
	}); err != nil {
		return fmt.Errorf("read the table sizes of schema %s: %w", schema, err)
	}
	var total int64
	for _, s := range res.Tables {
		total += s
	}
	res.SchemaBytes = total
	if err := conn.QueryRow(ctx, `SELECT pg_database_size(current_database())`).Scan(&res.DatabaseBytes); err != nil {
		return fmt.Errorf("read the database size: %w", err)
	}
	return nil
}

// vacuumSchema vacuums (and analyzes) every table of schema, so that
// the sizes read after it are what the data takes once autovacuum has
// caught up, not the drain's dead row versions awaiting it. VACUUM
// gives freed pages back to the table, not to the file system, except
// at a table's end.
func vacuumSchema(ctx context.Context, dsn, schema string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", postgres.Redact(dsn), err)
	}
	defer conn.Close(ctx)
	rows, _ := conn.Query(ctx, `SELECT c.relname FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY 1`, schema)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("list the tables of schema %s: %w", schema, err)
	}
	for _, t := range tables {
		if _, err := conn.Exec(ctx, `VACUUM (ANALYZE) `+pgx.Identifier{schema, t}.Sanitize()); err != nil {
			return fmt.Errorf("vacuum %s.%s: %w", schema, t, err)
		}
	}
	return nil
}

// LargestTables is the names of res.Tables of at least floor bytes,
// largest first.
func (res EngineResult) LargestTables(floor int64) []string {
	var names []string
	for k, v := range res.Tables {
		if v >= floor {
			names = append(names, k)
		}
	}
	sort.Slice(names, func(i, j int) bool {
		if res.Tables[names[i]] != res.Tables[names[j]] {
			return res.Tables[names[i]] > res.Tables[names[j]]
		}
		return names[i] < names[j]
	})
	return names
}
