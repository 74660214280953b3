package limiter

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/internal/quotasim"
)

// scratch: one shape by seed, not committed.
func TestZZOne(t *testing.T) {
	for _, ss := range strings.Split(os.Getenv("ZZ_ONE"), ",") {
		s, _ := strconv.ParseUint(ss, 10, 64)
		if s == 0 {
			t.Skip()
		}
		sh := quotasim.FromSeed(s)
		r := quotasim.Run(sh, NewVirtual(Config{}))
		fmt.Printf("%.3f %.2f%% %v vs %v %s\n", r.Goodput(), 100*r.Share(), r.Wall, r.Perfect, sh.Name)
	}
}
