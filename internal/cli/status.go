package cli

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/sawtooth-dev/sawtooth/internal/monitor"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
	"github.com/urfave/cli/v2"
)

// statusOptions are `sawtooth status`'s.
type statusOptions struct {
	DB    string
	JSON  bool
	Watch bool
	// Every is the --watch period.
	Every time.Duration
	Out   io.Writer
}

func newStatusCommand() *cli.Command {
	opts := statusOptions{Every: time.Second}
	return &cli.Command{
		Name:  "status",
		Usage: "per-stage queued/done/dead counts, tokens and cost, and the last runs (live figures while a run holds the DB)",
		Flags: []cli.Flag{dbFlag(), &cli.BoolFlag{Name: "json", Category: catOutput, Usage: "print the status as JSON (with --watch: one object per line)", Destination: &opts.JSON},
			&cli.BoolFlag{Name: "watch", Category: catOutput, Aliases: []string{"w"}, Usage: "refresh every second until Ctrl-C", Destination: &opts.Watch}},
		Before: before("db"),
		Action: func(c *cli.Context) error {
			opts.DB, opts.Out = c.String("db"), c.App.Writer
			return runStatus(c.Context, &opts)
		},
	}
}

// runStatus prints the status once, or every period with Watch.
func runStatus(ctx context.Context, opts *statusOptions) error {
	if err := checkDBPath(opts.DB, true); err != nil {
		return err
	}
	if opts.Watch && isPostgres(opts.DB) {
		return monitor.WatchFrames(ctx, opts.Out, postgres.Redact(opts.DB), opts.JSON, opts.Every, func(w io.Writer) error {
			return statusFrame(w, opts.DB, opts.JSON)
		})
	}
	if opts.Watch {
		return monitor.Watch(ctx, opts.Out, opts.DB, opts.JSON, opts.Every, func(w io.Writer) error {
			return statusFrame(w, opts.DB, opts.JSON)
		})
	}
	return statusFrame(opts.Out, opts.DB, opts.JSON)
}

// statusFrame prints the status of the DB at path once: while a run holds
// it, from the live status the run publishes (without waiting for the
// lock), else from the DB.
func statusFrame(w io.Writer, path string, asJSON bool) error {
	if isPostgres(path) {
		return postgresStatus(w, path, asJSON)
	}
	if live, err := monitor.ReadLiveStatus(path); err == nil && time.Since(live.Updated) < monitor.LiveStatusMaxAge {
		return monitor.ShowLiveStatus(w, path, live, asJSON)
	}
	db, err := openReadOnly(path)
	if errors.Is(err, store.ErrInUse) {
		return monitor.PrintLiveStatus(w, path, asJSON)
	}
	if err != nil {
		return err
	}
	defer db.Close()
	v, err := statusView(db)
	if err != nil {
		return err
	}
	return printStatusWithBatch(w, db, v, asJSON)
}

// statusView reads what `status` shows of a DB no run holds.
func statusView(db pipeline.Database) (monitor.StatusView, error) {
	counts, err := db.Counts()
	if err != nil {
		return monitor.StatusView{}, err
	}
	runs, err := db.Runs(1000)
	if err != nil {
		return monitor.StatusView{}, err
	}
	v := monitor.NewStatusView(db.Path(), counts, db.LearnedLimit("classify"), runs)
	for _, s := range counts.Stages {
		if n := db.LearnedLimit(s.Stage); n > 0 {
			if v.Limits == nil {
				v.Limits = map[string]int{}
			}
			v.Limits[s.Stage] = n
		}
	}
	if lg, ok := db.(pipeline.Ledgers); ok {
		if v.Money, err = lg.Ledgers(); err != nil {
			return monitor.StatusView{}, err
		}
		v.UseLedger()
	}
	return v, nil
}
