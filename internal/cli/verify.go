package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/urfave/cli/v2"
)

// verifyOptions are `sawtooth verify`'s.
type verifyOptions struct {
	DB string
	// Aggregate is the configuration the tally is recomputed with; unless
	// FromFlags, the one the run recorded replaces it.
	Aggregate stages.Aggregate
	FromFlags bool
	Out       io.Writer
}

func newVerifyCommand() *cli.Command {
	var (
		opts    verifyOptions
		groupBy cli.StringSlice
	)
	return &cli.Command{
		Name:  "verify",
		Usage: "check every item is in exactly one place and recompute the aggregate from the stage outputs it counts (classify's label, or a job's count: STAGE.FIELD)",
		Flags: []cli.Flag{dbFlag(),
			&cli.StringSliceFlag{Name: "group-by", Category: catAgg, Value: cli.NewStringSlice("app", "month"), Usage: "fields the aggregate counts by, as given to run", DefaultText: "what the run recorded", Destination: &groupBy},
			&cli.StringFlag{Name: "date-field", Category: catAgg, Value: "date", Usage: "field holding the item's date, as given to run", DefaultText: "what the run recorded", Destination: &opts.Aggregate.DateField},
			&cli.StringFlag{Name: "rating-field", Category: catAgg, Value: "rating", Usage: "numeric field averaged per label, as given to run", DefaultText: "what the run recorded", Destination: &opts.Aggregate.RatingField},
		},
		Before: before("db"),
		Action: func(c *cli.Context) error {
			opts.DB, opts.Out = c.String("db"), c.App.Writer
			opts.Aggregate.GroupBy = splitList(groupBy.Value())
			opts.FromFlags = c.IsSet("group-by") || c.IsSet("date-field") || c.IsSet("rating-field")
			return runVerify(&opts)
		},
	}
}

// runVerify checks the DB and prints each problem; problems are an error.
func runVerify(opts *verifyOptions) error {
	db, err := openReadOnly(opts.DB)
	if err != nil {
		return err
	}
	defer db.Close()
	agg := opts.Aggregate
	// By default use the aggregate configuration the run recorded, so
	// verify checks what run actually did.
	if !opts.FromFlags {
		if err := storedAggregate(db, &agg); err != nil {
			return err
		}
	}
	defs, err := db.StoredDefinition()
	if err != nil {
		return err
	}
	var problems []string
	if hasStage(defs, agg.Name()) {
		problems, err = verify(db, &agg)
	} else {
		// A job without an aggregate stage: the tally counts the last
		// stage's labels, and Check recomputes it from those.
		problems, err = db.Check()
	}
	if err != nil {
		return err
	}
	for _, p := range problems {
		fmt.Fprintln(opts.Out, p)
	}
	if len(problems) > 0 {
		return fmt.Errorf("verify %s: %d problems (see above)", db.Path(), len(problems))
	}
	fmt.Fprintf(opts.Out, "%s: consistent; the aggregate matches the outputs it counts\n", db.Path())
	return nil
}

func hasStage(defs []store.StageDef, name string) bool {
	return slices.ContainsFunc(defs, func(d store.StageDef) bool { return d.Name == name })
}

// storedAggregate fills agg from the configuration recorded in the DB, if
// any (databases from before it was recorded keep the flag defaults).
func storedAggregate(db pipeline.Database, agg *stages.Aggregate) error {
	defs, err := db.StoredDefinition()
	if err != nil {
		return err
	}
	for _, d := range defs {
		if d.Name != agg.Name() || len(d.Config) == 0 {
			continue
		}
		// A job records its stage as the job file has it (job.Stage,
		// with its own key names); a run from flags records the stage's
		// own configuration.
		if a, ok := job.RecordedAggregate(d.Config); ok {
			*agg = a
			continue
		}
		if err := json.Unmarshal(d.Config, agg); err != nil {
			return fmt.Errorf("read the recorded aggregate configuration: %w", err)
		}
	}
	return nil
}

// verify checks the store's invariants and recomputes the tally from the
// classify outputs of every done item.
func verify(db pipeline.Database, agg *stages.Aggregate) ([]string, error) {
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
