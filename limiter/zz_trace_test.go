package limiter

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/internal/quotasim"
)

type zzTrace struct {
	*Virtual
	next    time.Time
	every   time.Duration
	ok, ref int
}

func (z *zzTrace) tick(t time.Time, inFlight int) {
	if z.next.IsZero() {
		z.next = t
	}
	for !t.Before(z.next) {
		w := &z.w
		fmt.Printf("%6.1fs limit %5d inflight %5d rate %8.1f safe %8.1f refused %8.1f ss %v ok %6d 429 %5d lat %v win %v\n", z.next.Sub(quotasim.Epoch).Seconds(), w.limit, inFlight, w.rate, w.safe, w.refused, w.slowStart, z.ok, z.ref, w.latency().Round(time.Millisecond), w.window)
		z.next = z.next.Add(z.every)
	}
}
func (z *zzTrace) Succeeded(t, s time.Time, tok int64, n int) {
	z.tick(t, n)
	z.ok++
	z.Virtual.Succeeded(t, s, tok, n)
}
func (z *zzTrace) RateLimited(t, s time.Time, ra time.Duration, rpm, tpm int64, n int) {
	z.tick(t, n)
	z.ref++
	z.Virtual.RateLimited(t, s, ra, rpm, tpm, n)
}

func TestZZTrace(t *testing.T) {
	s, _ := strconv.ParseUint(os.Getenv("ZZ_SEED"), 10, 64)
	if s == 0 {
		t.Skip()
	}
	ev, _ := time.ParseDuration(os.Getenv("ZZ_EVERY"))
	sh := quotasim.FromSeed(s)
	r := quotasim.Run(sh, &zzTrace{Virtual: NewVirtual(Config{}), every: ev})
	fmt.Println(sh.Name, r.Goodput(), r.Share(), r.Wall, r.Perfect)
}
