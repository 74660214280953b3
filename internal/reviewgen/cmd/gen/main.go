// Command gen writes generated app reviews (see package reviewgen) to a
// file or to stdout, as JSON Lines or CSV.
//
//	go run ./internal/reviewgen/cmd/gen -n 3000 -seed 1 -o testdata/reviews.jsonl
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/sawtooth-dev/sawtooth/internal/reviewgen"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	n := fs.Int("n", 1000, "number of reviews")
	seed := fs.Uint64("seed", 1, "random seed: the same seed gives the same reviews")
	out := fs.String("o", "-", "output file, - for stdout")
	format := fs.String("format", "", "jsonl or csv (default: from the -o extension, else jsonl)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 0 {
		return fmt.Errorf("-n is %d: it must be at least 0", *n)
	}
	if *format == "" {
		*format = "jsonl"
		if strings.EqualFold(filepath.Ext(*out), ".csv") {
			*format = "csv"
		}
	}
	generate := reviewgen.Generate
	switch *format {
	case "jsonl":
	case "csv":
		generate = reviewgen.GenerateCSV
	default:
		return fmt.Errorf("-format %q: use jsonl or csv", *format)
	}

	if *out == "-" {
		bw := bufio.NewWriter(stdout)
		if err := generate(bw, *n, *seed); err != nil {
			return err
		}
		return bw.Flush()
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	if err := generate(bw, *n, *seed); err != nil {
		f.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
