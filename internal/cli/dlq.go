package cli

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/urfave/cli/v2"
)

// dlqOptions are those of `sawtooth dlq list|show|requeue`.
type dlqOptions struct {
	DB string
	// Stage limits list to one stage; requeue needs it.
	Stage string
	// ID is the one item to show or re-queue.
	ID string
	// All re-queues every dead letter of Stage.
	All         bool
	JSON        bool
	Out, ErrOut io.Writer
}

func newDLQCommand() *cli.Command {
	var opts dlqOptions
	bind := func(c *cli.Context) *dlqOptions {
		opts.DB, opts.Out, opts.ErrOut = c.String("db"), c.App.Writer, c.App.ErrWriter
		return &opts
	}
	return &cli.Command{
		Name:  "dlq",
		Usage: "list, inspect and re-queue dead letters (they are never deleted)",
		Subcommands: []*cli.Command{
			{
				Name:   "list",
				Usage:  "list dead letters with their reasons",
				Flags:  []cli.Flag{dbFlag(), stageFlag(&opts.Stage, false), &cli.BoolFlag{Name: "json", Destination: &opts.JSON}},
				Action: func(c *cli.Context) error { return runDLQList(bind(c)) },
			},
			{
				Name:   "show",
				Usage:  "show one item: its record, outputs and dead letter",
				Flags:  []cli.Flag{dbFlag(), &cli.StringFlag{Name: "id", Required: true, Destination: &opts.ID}},
				Action: func(c *cli.Context) error { return runDLQShow(bind(c)) },
			},
			{
				Name:  "requeue",
				Usage: "move dead letters back to their stage's queue (then `sawtooth run` to process them)",
				Flags: []cli.Flag{dbFlag(), stageFlag(&opts.Stage, true), &cli.StringFlag{Name: "id", Usage: "one item (or use --all)", Destination: &opts.ID},
					&cli.BoolFlag{Name: "all", Destination: &opts.All}},
				Action: func(c *cli.Context) error { return runDLQRequeue(bind(c)) },
			},
		},
	}
}

// runDLQList prints every dead letter (of Stage, if set).
func runDLQList(opts *dlqOptions) error {
	db, err := openReadOnly(opts.DB)
	if err != nil {
		return err
	}
	defer db.Close()
	list := stageNames
	if opts.Stage != "" {
		list = []string{opts.Stage}
	}
	n := 0
	for _, s := range list {
		err := db.ForEachDead(s, func(e store.DeadEntry) error {
			n++
			if opts.JSON {
				return json.NewEncoder(opts.Out).Encode(struct {
					Stage string `json:"stage"`
					store.DeadEntry
				}{s, e})
			}
			fmt.Fprintf(opts.Out, "%s\t%s\t%s (%d attempts): %s\n", s, e.ID, e.Dead.Class, e.Dead.Attempts, e.Dead.Message)
			return nil
		})
		if err != nil {
			return err
		}
	}
	if !opts.JSON {
		fmt.Fprintf(opts.ErrOut, "%d dead letters; `sawtooth dlq show --id ID` for one, `sawtooth dlq requeue --stage S --all` to retry\n", n)
	}
	return nil
}

// runDLQShow prints where one item is: its record, outputs and dead letter.
func runDLQShow(opts *dlqOptions) error {
	db, err := openReadOnly(opts.DB)
	if err != nil {
		return err
	}
	defer db.Close()
	loc, err := db.Locate(opts.ID)
	if err != nil {
		return err
	}
	return writeJSON(opts.Out, loc)
}

// runDLQRequeue moves one dead letter (ID) or all of Stage's back to its
// queue.
func runDLQRequeue(opts *dlqOptions) error {
	if (opts.ID == "") == !opts.All {
		return usagef("dlq requeue: pass exactly one of --id ID or --all")
	}
	db, err := openWritable(opts.DB)
	if err != nil {
		return err
	}
	defer db.Close()
	var ids []string
	if opts.ID != "" {
		ids = []string{opts.ID}
	}
	n, err := db.Requeue(opts.Stage, ids)
	if err != nil {
		return err
	}
	fmt.Fprintf(opts.Out, "re-queued %d items at %s; run `sawtooth run --db %s` to process them\n", n, opts.Stage, db.Path())
	return nil
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
