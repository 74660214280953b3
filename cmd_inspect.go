package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/report"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/urfave/cli/v2"
)

// stageNames is the pipeline every sawtooth DB holds, in order.
var stageNames = []string{"sanitize", "classify", "aggregate"}

// openReadOnly opens the DB for a command that only reads. Stage
// fingerprints do not matter here, only the names.
func openReadOnly(path string) (*store.DB, error) {
	defs := make([]store.StageDef, len(stageNames))
	for i, n := range stageNames {
		defs[i].Name = n
	}
	return store.Open(path, store.Options{Stages: defs, ReadOnly: true, LockTimeout: 500 * time.Millisecond})
}

// openWritable opens the DB for a command that changes it without running.
func openWritable(path string) (*store.DB, error) {
	defs := make([]store.StageDef, len(stageNames))
	for i, n := range stageNames {
		defs[i].Name = n
	}
	return store.Open(path, store.Options{Stages: defs, MustExist: true})
}

func stageFlag(dest *string, required bool) cli.Flag {
	return &cli.StringFlag{Name: "stage", Usage: "stage: " + strings.Join(stageNames, "|"), Required: required, Destination: dest}
}

func statusCommand() *cli.Command {
	var asJSON, watch bool
	return &cli.Command{
		Name:  "status",
		Usage: "per-stage queued/done/dead counts, tokens and cost, and the last runs (live figures while a run holds the DB)",
		Flags: []cli.Flag{dbFlag(), &cli.BoolFlag{Name: "json", Destination: &asJSON},
			&cli.BoolFlag{Name: "watch", Aliases: []string{"w"}, Usage: "refresh every second until Ctrl-C", Destination: &watch}},
		Action: func(c *cli.Context) error {
			if watch {
				return watchStatus(c.Context, c.App.Writer, c.String("db"), asJSON, time.Second)
			}
			return statusFrame(c.App.Writer, c.String("db"), asJSON)
		},
	}
}

type statusView struct {
	DB       string                `json:"db"`
	Counts   store.Counts          `json:"counts"`
	Usage    pipeline.Usage        `json:"usage"`
	CostUSD  float64               `json:"cost_usd"`
	Limit    int                   `json:"learned_limit,omitempty"`
	LastRuns []pipeline.RunSummary `json:"last_runs"`
}

func printStatus(w io.Writer, db *store.DB, asJSON bool) error {
	counts, err := db.Counts()
	if err != nil {
		return err
	}
	runs, err := db.Runs(1000)
	if err != nil {
		return err
	}
	v := statusView{DB: db.Path(), Counts: counts, Limit: db.LearnedLimit("classify")}
	for _, r := range runs {
		if s := r.Stages["classify"]; s != nil {
			v.Usage = v.Usage.Add(s.Usage)
			v.CostUSD += s.CostUSD
		}
	}
	v.LastRuns = runs[:min(len(runs), 5)]
	if asJSON {
		return writeJSON(w, v)
	}
	fmt.Fprintf(w, "%s: %d items, %d done\n\n", v.DB, counts.Items, counts.Done)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tqueued\tdead\toutputs\t")
	for _, s := range counts.Stages {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t\n", s.Stage, s.Queued, s.Dead, s.Output)
	}
	tw.Flush()
	fmt.Fprintf(w, "\ntokens (all runs): %d in, %d out; estimated cost $%.4f\n", v.Usage.PromptTokens, v.Usage.CandidateTokens, v.CostUSD)
	if v.Limit > 0 {
		fmt.Fprintf(w, "learned classify concurrency: %d (the next run starts there)\n", v.Limit)
	}
	if len(v.LastRuns) > 0 {
		fmt.Fprintln(w, "\nlast runs:")
		for _, r := range v.LastRuns {
			fmt.Fprintf(w, "  %s  %-8s  %s", r.ID, r.Status, r.Ended.Sub(r.Started).Round(time.Second))
			if r.Message != "" {
				fmt.Fprintf(w, "  %s", r.Message)
			}
			fmt.Fprintln(w)
		}
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func dlqCommand() *cli.Command {
	var stage, id string
	var all, asJSON bool
	return &cli.Command{
		Name:  "dlq",
		Usage: "list, inspect and re-queue dead letters (they are never deleted)",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list dead letters with their reasons",
				Flags: []cli.Flag{dbFlag(), stageFlag(&stage, false), &cli.BoolFlag{Name: "json", Destination: &asJSON}},
				Action: func(c *cli.Context) error {
					db, err := openReadOnly(c.String("db"))
					if err != nil {
						return err
					}
					defer db.Close()
					list := stageNames
					if stage != "" {
						list = []string{stage}
					}
					n := 0
					for _, s := range list {
						err := db.ForEachDead(s, func(e store.DeadEntry) error {
							n++
							if asJSON {
								return json.NewEncoder(c.App.Writer).Encode(struct {
									Stage string `json:"stage"`
									store.DeadEntry
								}{s, e})
							}
							fmt.Fprintf(c.App.Writer, "%s\t%s\t%s (%d attempts): %s\n", s, e.ID, e.Dead.Class, e.Dead.Attempts, e.Dead.Message)
							return nil
						})
						if err != nil {
							return err
						}
					}
					if !asJSON {
						fmt.Fprintf(c.App.ErrWriter, "%d dead letters; `sawtooth dlq show --id ID` for one, `sawtooth dlq requeue --stage S --all` to retry\n", n)
					}
					return nil
				},
			},
			{
				Name:  "show",
				Usage: "show one item: its record, outputs and dead letter",
				Flags: []cli.Flag{dbFlag(), &cli.StringFlag{Name: "id", Required: true, Destination: &id}},
				Action: func(c *cli.Context) error {
					db, err := openReadOnly(c.String("db"))
					if err != nil {
						return err
					}
					defer db.Close()
					loc, err := db.Locate(id)
					if err != nil {
						return err
					}
					return writeJSON(c.App.Writer, loc)
				},
			},
			{
				Name:  "requeue",
				Usage: "move dead letters back to their stage's queue (then `sawtooth run` to process them)",
				Flags: []cli.Flag{dbFlag(), stageFlag(&stage, true), &cli.StringFlag{Name: "id", Usage: "one item (or use --all)", Destination: &id}, &cli.BoolFlag{Name: "all", Destination: &all}},
				Action: func(c *cli.Context) error {
					if (id == "") == !all {
						return usagef("dlq requeue: pass exactly one of --id ID or --all")
					}
					db, err := openWritable(c.String("db"))
					if err != nil {
						return err
					}
					defer db.Close()
					var ids []string
					if id != "" {
						ids = []string{id}
					}
					n, err := db.Requeue(stage, ids)
					if err != nil {
						return err
					}
					fmt.Fprintf(c.App.Writer, "re-queued %d items at %s; run `sawtooth run --db %s` to process them\n", n, stage, db.Path())
					return nil
				},
			},
		},
	}
}

func exportCommand() *cli.Command {
	var stage, format string
	var all bool
	var columns cli.StringSlice
	return &cli.Command{
		Name:  "export",
		Usage: "write one row per item (stdout): --all for every stage's fields as columns, or --stage S",
		Description: `--all: id, status (done / dead at STAGE), the dead-letter reason, every input
field and each stage's output fields as their own columns (classify.label,
classify.confidence, ...). --stage S: id, the input fields and S's output
fields. Numbers are printed as people write them; the export streams.`,
		Flags: []cli.Flag{dbFlag(), stageFlag(&stage, false),
			&cli.BoolFlag{Name: "all", Usage: "every done and dead item with every stage's fields", Destination: &all},
			&cli.StringFlag{Name: "format", Value: "jsonl", Usage: "jsonl|csv|tsv", Destination: &format},
			&cli.StringSliceFlag{Name: "columns", Usage: "write only these `COLUMNS`, in this order", Destination: &columns},
		},
		Action: func(c *cli.Context) error {
			if format != report.FormatJSONL && format != report.FormatCSV && format != report.FormatTSV {
				return usagef("export: --format must be jsonl, csv or tsv, not %q", format)
			}
			if (stage == "") == !all {
				return usagef("export: pass exactly one of --stage S or --all")
			}
			db, err := openReadOnly(c.String("db"))
			if err != nil {
				return err
			}
			defer db.Close()
			return report.Export(c.App.Writer, db, report.ExportOptions{Stage: stage, Format: format, Columns: splitList(columns.Value())})
		},
	}
}

func verifyCommand() *cli.Command {
	var groupBy cli.StringSlice
	var dateField, ratingField string
	return &cli.Command{
		Name:  "verify",
		Usage: "check every item is in exactly one place and recompute the aggregate from out/classify",
		Flags: []cli.Flag{dbFlag(),
			&cli.StringSliceFlag{Name: "group-by", Value: cli.NewStringSlice("app", "month"), Usage: "as given to run", Destination: &groupBy},
			&cli.StringFlag{Name: "date-field", Value: "date", Destination: &dateField},
			&cli.StringFlag{Name: "rating-field", Value: "rating", Destination: &ratingField},
		},
		Action: func(c *cli.Context) error {
			db, err := openReadOnly(c.String("db"))
			if err != nil {
				return err
			}
			defer db.Close()
			agg := &stages.Aggregate{GroupBy: splitList(groupBy.Value()), DateField: dateField, RatingField: ratingField}
			// By default use the aggregate configuration the run recorded,
			// so verify checks what run actually did.
			if !c.IsSet("group-by") && !c.IsSet("date-field") && !c.IsSet("rating-field") {
				if err := storedAggregate(db, agg); err != nil {
					return err
				}
			}
			problems, err := verify(db, agg)
			if err != nil {
				return err
			}
			for _, p := range problems {
				fmt.Fprintln(c.App.Writer, p)
			}
			if len(problems) > 0 {
				return fmt.Errorf("verify %s: %d problems (see above)", db.Path(), len(problems))
			}
			fmt.Fprintf(c.App.Writer, "%s: consistent; aggregate matches out/classify\n", db.Path())
			return nil
		},
	}
}

// storedAggregate fills agg from the configuration recorded in the DB, if
// any (databases from before it was recorded keep the flag defaults).
func storedAggregate(db *store.DB, agg *stages.Aggregate) error {
	defs, err := db.StoredDefinition()
	if err != nil {
		return err
	}
	for _, d := range defs {
		if d.Name == agg.Name() && len(d.Config) > 0 {
			if err := json.Unmarshal(d.Config, agg); err != nil {
				return fmt.Errorf("read the recorded aggregate configuration: %w", err)
			}
		}
	}
	return nil
}

// verify checks the store's invariants and recomputes the tally from the
// classify outputs of every done item.
func verify(db *store.DB, agg *stages.Aggregate) ([]string, error) {
	problems, err := db.Check()
	if err != nil {
		return nil, err
	}
	var fresh pipeline.Tally
	err = db.ForEachDone(func(it pipeline.Item) error {
		it.Prev = it.Outputs["classify"]
		f, err := agg.Fact(it)
		if err != nil {
			problems = append(problems, fmt.Sprintf("item %q: %v", it.ID, err))
			return nil
		}
		fresh.Fold(it.ID, f, +1)
		return nil
	})
	if err != nil {
		return nil, err
	}
	stored, err := db.Tally()
	if err != nil {
		return nil, err
	}
	for _, d := range stored.Diff(fresh) {
		problems = append(problems, "aggregate (stored != recomputed): "+d)
	}
	return problems, nil
}
