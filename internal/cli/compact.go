package cli

import (
	"fmt"
	"io"

	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/urfave/cli/v2"
)

// compactOptions are `sawtooth compact`'s.
type compactOptions struct {
	DB  string
	Out io.Writer
}

func newCompactCommand() *cli.Command {
	var opts compactOptions
	return &cli.Command{
		Name:   "compact",
		Usage:  "rewrite a bbolt --db into a fresh file without free pages, in the current record format (an older file is upgraded), and put it in place; a kill leaves the original usable",
		Flags:  []cli.Flag{dbFlag()},
		Before: before("db"),
		Action: func(c *cli.Context) error {
			opts.DB, opts.Out = c.String("db"), c.App.Writer
			return runCompact(&opts)
		},
	}
}

// runCompact compacts the bbolt file at opts.DB and says by how much.
func runCompact(opts *compactOptions) error {
	if isPostgres(opts.DB) {
		return usagef("--db %s: compact rewrites a bbolt file; PostgreSQL reclaims space itself (VACUUM)", redactURL(opts.DB))
	}
	if err := checkDBPath(opts.DB, true); err != nil {
		return err
	}
	st, err := store.Compact(opts.DB, 0)
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

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
