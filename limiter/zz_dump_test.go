package limiter

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sawtooth-dev/sawtooth/internal/quotasim"
)

// scratch: per-shape dump, not committed.
func TestZZDump(t *testing.T) {
	out := os.Getenv("ZZ_OUT")
	if out == "" {
		t.Skip()
	}
	var b strings.Builder
	for _, ss := range strings.Split(os.Getenv("ZZ_SEEDS"), ",") {
		seed, _ := strconv.ParseUint(ss, 10, 64)
		shapes := quotasim.Draw(200, seed)
		rs := make([]quotasim.Result, len(shapes))
		var wg sync.WaitGroup
		sem := make(chan struct{}, 2)
		for i, sh := range shapes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				rs[i] = quotasim.Run(sh, NewVirtual(Config{}))
				<-sem
			}()
		}
		wg.Wait()
		for _, r := range rs {
			fmt.Fprintf(&b, "%d\t%s\t%.4f\t%.5f\t%.4f\t%.2f\t%.2f\t%s\n", seed, r.Shape.Family, r.Goodput(), r.Share(), r.CallsPerItem(), r.Wall.Seconds(), r.Perfect.Seconds(), r.Shape.Name)
		}
	}
	os.WriteFile(out, []byte(b.String()), 0o644)
}
