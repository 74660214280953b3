package limiter

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/internal/quotasim"
)

// TestLaw_randomFamilies measures the law on quota shapes drawn at random
// from quotasim's families, in virtual time, and logs the distribution:
// p10, median and worst goodput against the perfect client, the 429 share
// and calls per item, overall and per family, with the worst shapes and
// their seeds so any case replays. It runs only when asked, since it
// measures rather than asserts:
//
//	SAWTOOTH_RANDOM_SHAPES=200 SAWTOOTH_RANDOM_SEED=7 go test -run TestLaw_randomFamilies -v ./limiter
//
// Draw a fresh seed for each measurement: a seed tuned on is no longer a
// measurement.
func TestLaw_randomFamilies(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SAWTOOTH_RANDOM_SHAPES"))
	if n <= 0 {
		t.Skip("set SAWTOOTH_RANDOM_SHAPES=N (and SAWTOOTH_RANDOM_SEED=S) to measure the law on N random quota shapes")
	}
	seed, _ := strconv.ParseUint(os.Getenv("SAWTOOTH_RANDOM_SEED"), 10, 64)
	var rs []quotasim.Result
	for _, sh := range quotasim.Draw(n, seed) {
		rs = append(rs, quotasim.Run(sh, NewVirtual(Config{})))
	}
	var b strings.Builder
	quotasim.WriteTable(&b, rs, 10)
	t.Logf("%d random shapes, seed %d\n%s", n, seed, b.String())
}
