package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sawtooth-dev/sawtooth/internal/monitor"
	"github.com/sawtooth-dev/sawtooth/pipeline"
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
		Name:   "dlq",
		Usage:  "list, inspect and re-queue dead letters (they are never deleted)",
		Action: unknownSubcommand("dlq", "list", "show", "requeue"),
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list dead letters with their reasons",
				Flags: []cli.Flag{dbFlag(), stageFlag(&opts.Stage, "only this stage's dead letters", false),
					&cli.BoolFlag{Name: "json", Category: catOutput, Usage: "one JSON object per dead letter, with its stage", Destination: &opts.JSON}},
				Before: before("db"),
				Action: func(c *cli.Context) error { return runDLQList(bind(c)) },
			},
			{
				Name:   "show",
				Usage:  "show one item: its record, outputs and dead letter",
				Flags:  []cli.Flag{dbFlag(), &cli.StringFlag{Name: "id", Category: catDB, Usage: "the item's id (required)", Destination: &opts.ID}},
				Before: before("db", "id"),
				Action: func(c *cli.Context) error { return runDLQShow(bind(c)) },
			},
			{
				Name:  "requeue",
				Usage: "move dead letters back to their stage's queue (then `sawtooth run` to process them)",
				Flags: []cli.Flag{dbFlag(), stageFlag(&opts.Stage, "stage whose dead letters to re-queue", true),
					&cli.StringFlag{Name: "id", Category: catDB, Usage: "re-queue this one item (or use --all)", Destination: &opts.ID},
					&cli.BoolFlag{Name: "all", Category: catDB, Usage: "re-queue every dead letter of --stage", Destination: &opts.All}},
				Before: before("db", "stage"),
				Action: func(c *cli.Context) error { return runDLQRequeue(bind(c)) },
			},
		},
	}
}

// runDLQList prints every dead letter (of Stage, if set), each field
// made terminal-safe, then on stderr the count and the commands that
// deal with them.
func runDLQList(opts *dlqOptions) error {
	if opts.Stage != "" {
		if err := checkStageOf(opts.DB, "stage", opts.Stage); err != nil {
			return err
		}
	}
	db, err := openReadOnly(opts.DB)
	if err != nil {
		return err
	}
	defer db.Close()
	words := storedWords(db)
	list := stageOrder(db)
	if opts.Stage != "" {
		list = []string{opts.Stage}
	}
	n, claims := 0, 0
	byClass := map[pipeline.Class]int{}
	retryable := map[string]bool{} // stages holding a letter neither permanent nor claimed too often
	for _, s := range list {
		err := db.ForEachDead(s, func(e store.DeadEntry) error {
			n++
			if deadCause(e.Dead) == pipeline.CauseClaimsExhausted {
				claims++
			} else {
				byClass[e.Dead.Class]++
				retryable[s] = retryable[s] || e.Dead.Class != pipeline.ClassPermanent
			}
			if opts.JSON {
				var line bytes.Buffer
				if err := json.NewEncoder(&line).Encode(struct {
					Stage string `json:"stage"`
					store.DeadEntry
				}{s, e}); err != nil {
					return err
				}
				_, err := opts.Out.Write(monitor.EscapeJSONControls(line.Bytes()))
				return err
			}
			fmt.Fprintf(opts.Out, "%s\t%s\t%s (%s): %s\n", s, monitor.TerminalSafe(e.ID), monitor.TerminalSafe(string(e.Dead.Class)),
				plural(e.Dead.Attempts, "attempt"), monitor.TerminalSafe(deadMessage(e.Dead, words)))
			return nil
		})
		if err != nil {
			return err
		}
	}
	if opts.JSON {
		return nil
	}
	fmt.Fprintf(opts.ErrOut, "%s\n", plural(n, "dead letter"))
	if n == 0 {
		return nil
	}
	p := shellQuote(db.Path())
	fmt.Fprintf(opts.ErrOut, "one item in full:\n  sawtooth dlq show --db %s --id ID\n", p)
	if byClass[pipeline.ClassPermanent] > 0 {
		fmt.Fprintf(opts.ErrOut, "permanent failures (safety blocks, empty or unusable text) fail the same way if re-queued unchanged:\n"+
			"  edit the row in your input file and run again; the edited text re-enters by itself:\n  sawtooth run --db %s --input FILE\n", p)
	}
	if claims > 0 {
		fmt.Fprintf(opts.ErrOut, "%s claimed too often (the workers holding them died or lost their lease each time; the item may be what crashes them): look at each one first, then re-queue it alone:\n"+
			"  sawtooth dlq requeue --db %s --stage STAGE --id ID\n", plural(claims, "item"), p)
	}
	for _, s := range list {
		if retryable[s] {
			fmt.Fprintf(opts.ErrOut, "to retry what failed at %s (transient errors: outages, timeouts):\n  sawtooth retry --db %s --stage %s\n", s, p, shellQuote(s))
		}
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
	if errors.Is(err, pipeline.ErrNotFound) {
		return usagef("--id %q: %s holds no item with this id; check it against `sawtooth dlq list --db %s` (the dead letters) or `sawtooth export --db %s --all` (every item)",
			opts.ID, db.Path(), shellQuote(db.Path()), shellQuote(db.Path()))
	}
	if err != nil {
		return err
	}
	if err := monitor.WriteJSONSafe(opts.Out, loc); err != nil || loc.Dead == nil {
		return err
	}
	_, err = fmt.Fprint(opts.ErrOut, deadNextStep(db.Path(), loc.Stage, loc.ID, *loc.Dead, storedWords(db)))
	return err
}

// runDLQRequeue moves one dead letter (ID) or all of Stage's back to its
// queue.
func runDLQRequeue(opts *dlqOptions) error {
	if (opts.ID == "") == !opts.All {
		return usagef("dlq requeue: pass exactly one of --id ID or --all")
	}
	if err := checkStageOf(opts.DB, "stage", opts.Stage); err != nil {
		return err
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
		return wordNotDead(err, db.Path())
	}
	fmt.Fprintf(opts.Out, "re-queued %s at %s; to process them:\n  sawtooth run --db %s\n", plural(n, "item"), opts.Stage, shellQuote(db.Path()))
	return nil
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// unknownSubcommand is the action of a command that only groups others
// (dlq, batch, job): with no argument it shows their help, and an
// unknown one is a usage error naming the nearest.
func unknownSubcommand(parent string, subs ...string) cli.ActionFunc {
	return func(c *cli.Context) error {
		if !c.Args().Present() {
			return cli.ShowSubcommandHelp(c)
		}
		name := c.Args().First()
		return usagef("unknown command \"%s %s\"%s (the %s commands: %s)", parent, name,
			didYouMean(name, subs, parent+" %s"), parent, strings.Join(subs, ", "))
	}
}
