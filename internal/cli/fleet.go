package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/sawtooth-dev/sawtooth/internal/monitor"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
	"github.com/urfave/cli/v2"
)

// Quota sharing modes (--quota).
const (
	quotaShared      = "shared"
	quotaIndependent = "independent"
)

// fleetFlags are the flags of a run on a PostgreSQL --db, where many
// workers share the queues and the quota.
func fleetFlags(o *pipelineOptions) []cli.Flag {
	return []cli.Flag{
		&cli.DurationFlag{Name: "lease", Category: catDB, Value: pipeline.DefaultLease, Usage: "PostgreSQL: how long a worker's claim on an item lasts without a heartbeat (renewed every lease/4; a dead worker's items return after it)", EnvVars: envOf("lease"), Destination: &o.Lease},
		&cli.DurationFlag{Name: "heartbeat", Category: catDB, Value: pipeline.DefaultHeartbeat, Usage: "PostgreSQL: how long a worker may go without beating its session (every heartbeat/4) before the others take it for dead and claim its items, whatever their lease", EnvVars: envOf("heartbeat"), Destination: &o.Heartbeat},
		&cli.StringFlag{Name: "quota", Category: catDB, Value: quotaShared, Usage: "PostgreSQL: shared (one limit for every worker: one decrease per 429 event for the fleet, --rpm paces the fleet) or independent (each worker its own limiter, for comparison)", EnvVars: envOf("quota"), Destination: &o.Quota},
		&cli.StringFlag{Name: "quota-key", Category: catDB, Usage: "PostgreSQL: the shared quota's name: workers using one API project and model share one key", DefaultText: "gemini/MODEL", EnvVars: envOf("quota-key"), Destination: &o.QuotaKey},
	}
}

// checkFleet refuses fleet settings that cannot work.
func (o *pipelineOptions) checkFleet() error {
	if o.Lease < time.Second {
		return usagef("--lease %s: want at least 1s, and well above a call's latency (default %s)", o.Lease, pipeline.DefaultLease)
	}
	if o.Heartbeat < time.Second || o.Heartbeat > 10*time.Minute {
		return usagef("--heartbeat %s: want 1s to 10m (default %s): a dead worker's items return this long after its death", o.Heartbeat, pipeline.DefaultHeartbeat)
	}
	if o.set["heartbeat"] && o.Heartbeat >= o.Lease {
		return usagef("--heartbeat %s: want it shorter than --lease %s, or a dead worker is noticed no sooner than its lease ends", o.Heartbeat, o.Lease)
	}
	if o.Quota != quotaShared && o.Quota != quotaIndependent {
		return usagef("--quota %q: want %s or %s", o.Quota, quotaShared, quotaIndependent)
	}
	return nil
}

// postgresPipelineExists reports whether a pipeline is already in the
// PostgreSQL database at dsn (false when it cannot tell: the open that
// follows says why). A pipeline an older sawtooth stored exists too:
// with upgrade, its schema is upgraded now, as a run's first writable
// open would (refused, by name, while workers of the older version
// live), so that the settings recorded in it can be read; without, the
// read-only opens that follow refuse it with the command that upgrades
// it.
func postgresPipelineExists(dsn string, upgrade bool) (bool, error) {
	ctx := context.Background()
	db, err := postgres.Open(ctx, dsn, postgres.Options{Stages: namedStages(), ReadOnly: true, MustExist: true})
	var old *postgres.OldSchemaError
	if errors.As(err, &old) {
		if !upgrade {
			return true, nil
		}
		if db, err = postgres.Open(ctx, dsn, postgres.Options{Stages: namedStages(), MustExist: true}); err != nil {
			return false, wordStoreError(wordLiveWorkers(err, dsn, false), "--db")
		}
	}
	if err != nil {
		return false, nil
	}
	db.Close()
	return true, nil
}

// workerStatus is `status`'s view of a PostgreSQL pipeline: the counts
// and runs, and who holds what.
type workerStatus struct {
	monitor.StatusView
	Workers []postgres.Holder `json:"workers"`
}

// postgresStatus prints the status of a PostgreSQL pipeline: its counts
// and runs, and per worker (host:pid) the items it holds under a lease
// at each stage and when that lease ends (a live worker renews it every
// lease/4, so it stays about one lease ahead).
func postgresStatus(w io.Writer, dsn string, asJSON bool) error {
	db, err := openReadOnly(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	v, err := statusView(db)
	if err != nil {
		return err
	}
	var hs []postgres.Holder
	if pg, ok := db.(interface {
		Holders(context.Context) ([]postgres.Holder, error)
	}); ok {
		if hs, err = pg.Holders(context.Background()); err != nil {
			return err
		}
	}
	if asJSON {
		return monitor.WriteJSONSafe(w, workerStatus{StatusView: v, Workers: hs})
	}
	if err := monitor.PrintStatus(w, v, false); err != nil {
		return err
	}
	if len(hs) == 0 {
		fmt.Fprintln(w, "\nworkers: none holds an item now")
		return nil
	}
	fmt.Fprintln(w, "\nworkers (host:pid; items claimed under a live lease, in calls or about to be):")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  worker\tstage\tholding\tlease ends")
	now := time.Now()
	for _, h := range hs {
		fmt.Fprintf(tw, "  %s\t%s\t%d\tin %s\n", monitor.TerminalSafe(h.Owner), h.Stage, h.Held, h.LeaseEnd.Sub(now).Round(time.Second))
	}
	return tw.Flush()
}

// newMigrateCommand is `sawtooth migrate`: create or upgrade the schema
// of a PostgreSQL pipeline, once, before the workers start.
func newMigrateCommand() *cli.Command {
	return &cli.Command{
		Name:      "migrate",
		Usage:     "create or upgrade the pipeline's schema in a PostgreSQL --db (run and every command also do it on first open)",
		UsageText: "sawtooth migrate --db postgres://USER@HOST/DBNAME",
		Flags:     []cli.Flag{dbFlag()},
		Before:    before("db"),
		Action: func(c *cli.Context) error {
			dsn := c.String("db")
			if !isPostgres(dsn) {
				return usagef("--db %s: migrate is for a PostgreSQL database (a postgres:// URL or key=value string); a bbolt file is created and upgraded by run", dsn)
			}
			if err := checkPostgresDSN(dsn); err != nil {
				return err
			}
			db, err := postgres.Open(c.Context, dsn, postgres.Options{Stages: namedStages()})
			if err != nil {
				return wordLiveWorkers(err, dsn, true)
			}
			defer db.Close()
			fmt.Fprintf(c.App.Writer, "%s: schema %s is at version %d\n", db.Path(), db.Schema(), postgres.SchemaVersion)
			return nil
		},
	}
}
