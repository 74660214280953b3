package bench

import (
	"fmt"
	"io"

	"github.com/sawtooth-dev/sawtooth/internal/quotasim"
	"github.com/sawtooth-dev/sawtooth/limiter"
)

// RandomOptions configure RunRandom.
type RandomOptions struct {
	// Shapes is how many shapes to draw (quotasim.Draw).
	Shapes int
	// Seed draws them: shape i is quotasim.FromSeed(Seed+i), so one
	// shape replays alone with Shapes 1 and its own seed.
	Seed uint64
	// Worst is how many of the worst shapes to list with their seeds.
	Worst int
}

// RunRandom (`sawtooth bench --matrix --random N --seed S`) drives the
// law `sawtooth run` uses (limiter.NewVirtual with the default Config) in
// virtual time through Shapes quota shapes drawn from quotasim's random
// families, and writes the distribution of its goodput against the
// perfect client (one that knows the quota, with no bound of its own on
// calls in flight), its 429 share and calls per item, overall and per
// family, then the worst shapes with their seeds. It takes seconds, not
// the minutes a real-time matrix takes: nothing sleeps.
func RunRandom(opts RandomOptions, w io.Writer) []quotasim.Result {
	var rs []quotasim.Result
	for _, sh := range quotasim.Draw(opts.Shapes, opts.Seed) {
		rs = append(rs, quotasim.Run(sh, limiter.NewVirtual(limiter.Config{})))
	}
	fmt.Fprintf(w, "%d random quota shapes, seed %d (virtual time, the default law against the perfect client)\n", opts.Shapes, opts.Seed)
	quotasim.WriteTable(w, rs, opts.Worst)
	return rs
}
