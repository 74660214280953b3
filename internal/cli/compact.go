package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
	"github.com/urfave/cli/v2"
)

// compactOptions are `sawtooth compact`'s.
type compactOptions struct {
	DB  string
	Out io.Writer
	// LockTimeout is how long to wait for a lock another process holds
	// (a bbolt file's, a PostgreSQL table's) before giving up; zero is
	// the store's default.
	LockTimeout time.Duration
}

func newCompactCommand() *cli.Command {
	var opts compactOptions
	return &cli.Command{
		Name: "compact",
		Usage: "give back the space a drain left free inside the database: a bbolt --db is rewritten into a fresh file in the current record format (an older file is upgraded) and put in place; " +
			"a PostgreSQL --db has the pipeline's tables rewritten one by one (VACUUM FULL), refused while workers are live; a kill leaves the database usable either way",
		Flags: []cli.Flag{dbFlag(),
			&cli.DurationFlag{Name: "lock-timeout", Usage: fmt.Sprintf("how long to wait for a lock another process holds before giving up, changing nothing: a bbolt file in use (default %v), "+
				"a PostgreSQL table a reader holds (default %v; a long report or export holds one)", store.DefaultLockTimeout, postgres.DefaultCompactLockTimeout), Destination: &opts.LockTimeout},
		},
		Before: before("db"),
		Action: func(c *cli.Context) error {
			if opts.LockTimeout < 0 {
				return usagef("--lock-timeout %v: give a duration of zero or more (0 waits the default), e.g. 2m", opts.LockTimeout)
			}
			opts.DB, opts.Out = c.String("db"), c.App.Writer
			return runCompact(c.Context, &opts)
		},
	}
}

// runCompact compacts the database at opts.DB and says by how much.
func runCompact(ctx context.Context, opts *compactOptions) error {
	if err := checkDBPath(opts.DB, true); err != nil {
		return err
	}
	if isPostgres(opts.DB) {
		return runCompactPostgres(ctx, opts)
	}
	st, err := store.Compact(opts.DB, opts.LockTimeout)
	if err != nil {
		return err
	}
	upgraded := ""
	if st.Migrated {
		upgraded = fmt.Sprintf(", upgraded to record format %d", store.FormatVersion)
	}
	fmt.Fprintf(opts.Out, "%s: compacted %s -> %s%s\n", opts.DB, mb(st.Before), mb(st.After), upgraded)
	return nil
}

// pgCompacter is the PostgreSQL store's table rewrite.
type pgCompacter interface {
	Compact(ctx context.Context, opt postgres.CompactOptions) (postgres.CompactStats, error)
	Schema() string
}

// runCompactPostgres rewrites the pipeline's tables and prints the
// schema's size before and after, then each table mb shows as more than
// nothing (0.1 MB and up).
func runCompactPostgres(ctx context.Context, opts *compactOptions) error {
	db, err := openWritable(opts.DB)
	if err != nil {
		return err
	}
	defer db.Close()
	pg, ok := db.(pgCompacter)
	if !ok {
		return fmt.Errorf("compact %s: this store cannot rewrite its tables", postgres.Redact(opts.DB))
	}
	st, err := pg.Compact(ctx, postgres.CompactOptions{LockTimeout: opts.LockTimeout})
	if len(st.Tables) > 0 || err == nil {
		verb := "compacted"
		if err != nil {
			verb = fmt.Sprintf("partly compacted (%d tables, then stopped)", len(st.Tables))
		}
		fmt.Fprintf(opts.Out, "%s: schema %s %s %s -> %s\n", postgres.Redact(opts.DB), pg.Schema(), verb, mb(st.Before), mb(st.After))
		for _, t := range st.Tables {
			if t.Before >= 1e5 {
				fmt.Fprintf(opts.Out, "  %s %s -> %s\n", t.Name, mb(t.Before), mb(t.After))
			}
		}
	}
	return err
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
