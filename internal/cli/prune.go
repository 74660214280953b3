package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/urfave/cli/v2"
)

// pruneOptions are `sawtooth prune`'s.
type pruneOptions struct {
	DB    string
	Input inputOptions
	// DryRun counts the items that would go and changes nothing; Yes
	// removes them without asking.
	DryRun, Yes bool
	Out, ErrOut io.Writer
	// Confirm asks on the terminal; nil when there is none.
	Confirm func(question string) bool
}

func newPruneCommand(cfg Config) *cli.Command {
	var opts pruneOptions
	in := inputFlags(&opts.Input)
	in[0].(*cli.StringFlag).Usage = "JSONL, CSV or TSV `FILE` holding every item to keep (required)"
	return &cli.Command{
		Name:  "prune",
		Usage: "remove the items whose ids the input file no longer holds, with their outputs and dead letters, folding them out of the aggregate (try --dry-run first)",
		Flags: append([]cli.Flag{dbFlag(),
			&cli.BoolFlag{Name: "dry-run", Category: catRerun, Usage: "count the items prune would remove and change nothing", Destination: &opts.DryRun},
			&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Category: catRerun, Usage: "remove them without asking", Destination: &opts.Yes},
		}, in...),
		Before: before("db", "input"),
		Action: func(c *cli.Context) error {
			opts.DB, opts.Out, opts.ErrOut, opts.Confirm = c.String("db"), c.App.Writer, c.App.ErrWriter, cfg.Confirm
			return runPrune(c.Context, &opts)
		},
	}
}

// runPrune reads every id of the input file, then removes (or with DryRun
// counts) the DB's items that are not among them. The file is read in
// full before the DB is opened, and a file with skipped lines or no
// record is refused: an id prune could not read would cost its item and
// the calls paid for it.
func runPrune(ctx context.Context, opts *pruneOptions) error {
	if err := checkDBPath(opts.DB, true); err != nil {
		return err
	}
	keep, err := inputIDs(ctx, &opts.Input, opts.ErrOut)
	if err != nil {
		return err
	}
	var db pipeline.Database
	if opts.DryRun {
		db, err = openReadOnly(opts.DB)
	} else {
		db, err = openWritable(opts.DB)
	}
	if err != nil {
		return err
	}
	defer db.Close()
	held := 0 // the database's items the input holds, counted by the dry run
	inFile := func(id string) bool {
		_, ok := keep[id]
		if ok {
			held++
		}
		return ok
	}
	n, err := db.Prune(inFile, true)
	if err != nil {
		return err
	}
	p, in := shellQuote(db.Path()), shellQuote(opts.Input.Path)
	switch {
	case n > 0 && held == 0:
		// A file of other ids (last night's delta, a wrong --id-field)
		// is no list of what to keep; with --yes it emptied the database.
		return usagef("input %s holds none of the %s in %s: prune would remove every one; give the file the items came from, or check --id-field (nothing was removed)",
			opts.Input.Path, plural(n, "item"), db.Path())
	case n == 0:
		fmt.Fprintf(opts.Out, "%s: every item is in %s; nothing to prune\n", db.Path(), opts.Input.Path)
		return nil
	case opts.DryRun:
		fmt.Fprintf(opts.Out, "would remove %s that %s no longer holds (their outputs and dead letters too, folded out of the aggregate); to remove them:\n  sawtooth prune --db %s --input %s --yes\n",
			plural(n, "item"), opts.Input.Path, p, in)
		return nil
	case !opts.Yes && (opts.Confirm == nil || !opts.Confirm(fmt.Sprintf("remove %s that %s no longer holds?", plural(n, "item"), opts.Input.Path))):
		return usagef("stopped before removing %s that %s no longer holds, with the calls paid for them; nothing was changed. To go ahead:\n  sawtooth prune --db %s --input %s --yes",
			plural(n, "item"), opts.Input.Path, p, in)
	}
	if n, err = db.Prune(inFile, false); err != nil {
		return err
	}
	fmt.Fprintf(opts.Out, "removed %s that %s no longer holds\n", plural(n, "item"), opts.Input.Path)
	return nil
}

// inputIDs checks the input file as run does and returns every id it
// holds. A file with a skipped line, or without a record, is an error.
func inputIDs(ctx context.Context, in *inputOptions, stderr io.Writer) (map[string]struct{}, error) {
	plan, err := checkInput(ctx, &pipelineOptions{}, in, stderr)
	if err != nil {
		return nil, err
	}
	if res := plan.Result(); res.BadLines > 0 {
		printProblems(stderr, res)
		return nil, fmt.Errorf("input %s: %s skipped (see above): prune cannot tell their items from removed ones; fix those lines, then prune again (nothing was removed)",
			in.Path, plural(res.BadLines, "line"))
	}
	ids := map[string]struct{}{}
	if _, err := plan.Apply(ctx, ingestBatch, func(recs []pipeline.Record) error {
		for _, r := range recs {
			ids[r.ID] = struct{}{}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("input %s holds no record: prune would remove every item; give the file the items came from (nothing was removed)", in.Path)
	}
	return ids, nil
}
