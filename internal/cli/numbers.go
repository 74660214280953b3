package cli

import (
	"math"
	"strconv"

	"github.com/sawtooth-dev/sawtooth/ingest"
	"github.com/urfave/cli/v2"
)

// numberRule is what a numeric flag accepts. strconv (and so the flag
// parser) reads "NaN" and "Inf" as numbers: a NaN compares false with
// everything, so `--budget NaN` passed every "< 0" check and capped
// nothing. Every value is checked here, finite first.
type numberRule struct {
	ok   func(v float64) bool
	want string // what to give instead, for the message
}

func atLeast0(v float64) bool  { return v >= 0 }
func aRate(v float64) bool     { return v >= 0 && v <= 1 }
func aFraction(v float64) bool { return v > 0 && v < 1 }

// numberRules holds every float flag of every command (a test keeps it
// so), and the integer flags that reach a run without pipelineOptions'
// validate (the flags a job file may be given with).
var numberRules = map[string]numberRule{
	"budget":        {atLeast0, "a number of US dollars, or 0 for no cap"},
	"budget-total":  {atLeast0, "a number of US dollars, or 0 for no cap"},
	"price-in":      {atLeast0, "US dollars per million input tokens, 0 or more (leave the flag out for the model's list price)"},
	"price-out":     {atLeast0, "US dollars per million output tokens, 0 or more (leave the flag out for the model's list price)"},
	"decrease":      {aFraction, "a factor between 0 and 1, e.g. 0.5"},
	"confirm-above": {atLeast0, "a number of items, 0 or more"},

	"fault-500":             {aRate, "a rate from 0 to 1, e.g. 0.01"},
	"fault-503":             {aRate, "a rate from 0 to 1, e.g. 0.01"},
	"fault-hang":            {aRate, "a rate from 0 to 1, e.g. 0.01"},
	"fault-malformed":       {aRate, "a rate from 0 to 1, e.g. 0.01"},
	"fault-block-prompt":    {aRate, "a rate from 0 to 1, e.g. 0.01"},
	"fault-block-candidate": {aRate, "a rate from 0 to 1, e.g. 0.01"},
	"fault-max-tokens":      {aRate, "a rate from 0 to 1, e.g. 0.01"},
	"batch-row-errors":      {aRate, "a rate from 0 to 1, e.g. 0.01"},
	"latency-tail":          {atLeast0, "a Pareto shape, e.g. 1.2, or 0 for none"},

	"sim-flex-shed":            {aRate, "a share of flex calls from 0 to 1, e.g. 0.33"},
	"sim-priority-as-standard": {aRate, "a share of priority calls from 0 to 1, e.g. 0.1"},
}

// checkNumber returns the usage error of flag's value v, if any; where
// says where the value came from ("--budget", or a config file's line).
func checkNumber(where, flag string, v float64) error {
	rule, ok := numberRules[flag]
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		want := "a finite number"
		if ok {
			want = rule.want
		}
		return usagef("%s %s is not a number: want %s", where, formatNumber(v), want)
	case ok && !rule.ok(v):
		return usagef("%s %s: want %s", where, formatNumber(v), rule.want)
	}
	return nil
}

func formatNumber(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// checkNumbers refuses a numeric flag of c's command whose value (from
// the command line, the environment or the --config file) is not a
// finite number its rule accepts, and a --rating-range that cannot be
// read, before the command opens or writes anything.
func checkNumbers(c *cli.Context) error {
	for _, f := range c.Command.Flags {
		name := f.Names()[0]
		if !c.IsSet(name) {
			continue
		}
		var err error
		switch f.(type) {
		case *cli.Float64Flag:
			err = checkNumber("--"+name, name, c.Float64(name))
		case *cli.IntFlag:
			if isNumberFlag(f) {
				err = checkNumber("--"+name, name, float64(c.Int(name)))
			}
		case *cli.StringFlag:
			if name == "rating-range" {
				if _, _, perr := ingest.ParseRatingRange(c.String(name)); perr != nil {
					err = usagef("--rating-range: %v", perr)
				}
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// isNumberFlag says whether checkNumbers checks f's value as a number.
func isNumberFlag(f cli.Flag) bool {
	if _, ok := f.(*cli.Float64Flag); ok {
		return true
	}
	_, ruled := numberRules[f.Names()[0]]
	_, isInt := f.(*cli.IntFlag)
	return ruled && isInt
}
