package footprint

import (
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// DefaultFloor is the memory limit, in bytes of the Go runtime's own
// memory (heap, stacks, metadata; not the binary or a file mapping), a
// run keeps while its heap is small. A night's live heap is 6-9 MB: at
// GOGC's pace the heap grows to twice that before a collection, and the
// freed spans stay resident a while; under this floor it is collected
// and scavenged a little sooner, at no CPU cost measured (a lower floor,
// 20 MiB, cost half the night's CPU again).
const DefaultFloor = 24 << 20

// heapState is what the limit is computed from, in bytes.
type heapState struct {
	live    int64 // the heap marked live by the last collection
	scan    int64 // the stacks and globals the last collection scanned
	nonHeap int64 // the runtime's memory beside the heap's objects: stacks, metadata, spans' empty slots
	gogc    int   // GOGC; negative when the collector is off
}

// limitFor is the memory limit for h under floor: the floor, or room for
// the heap to reach the goal GOGC gives it (live + (live + scan) x
// GOGC/100) beside the rest of the runtime's memory with an eighth to
// spare, whichever is larger. Above the floor it stays over the goal GOGC
// alone sets, so a run whose heap is large collects as often as without
// it: the runtime takes the heap's goal under a limit as the limit less
// all its memory but free spans and objects, and less 3%.
func limitFor(floor int64, h heapState) int64 {
	grown := h.live + (h.live+h.scan)*int64(max(h.gogc, 0))/100 + h.nonHeap
	return max(floor, grown+grown/8)
}

var heapSamples = []string{
	"/gc/heap/live:bytes",
	"/gc/gogc:percent",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/free:bytes",
	"/gc/scan/stack:bytes",
	"/gc/scan/globals:bytes",
}

// readHeap reads h from runtime/metrics.
func readHeap() heapState {
	s := make([]metrics.Sample, len(heapSamples))
	for i, n := range heapSamples {
		s[i].Name = n
	}
	metrics.Read(s)
	v := func(i int) int64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(min(s[i].Value.Uint64(), math.MaxInt64))
	}
	gogc := -1 // GOGC=off reads as -1 turned unsigned
	if g := s[1].Value; g.Kind() == metrics.KindUint64 && g.Uint64() <= math.MaxInt32 {
		gogc = int(g.Uint64())
	}
	return heapState{
		live:    v(0),
		scan:    v(6) + v(7),
		gogc:    gogc,
		nonHeap: v(2) - v(3) - v(4) - v(5),
	}
}

// follower sets the memory limit at each tick; its hooks are the
// runtime's outside tests.
type follower struct {
	read func() heapState
	set  func(int64) int64 // debug.SetMemoryLimit: sets, returns the previous
}

// Follow keeps the Go runtime's memory limit at limitFor(floor, the heap
// now), set at once and again at each tick, until the returned stop is
// called; stop puts back the limit found and returns once no further
// limit is set. It does nothing (and stop does nothing) when a limit is
// already set (GOMEMLIMIT, or debug.SetMemoryLimit), GOMEMLIMIT is set
// at all (GOMEMLIMIT=off says no limit) or the collector is off
// (GOGC=off): those are the user's choice. ticks is typically a
// time.Ticker's channel; between ticks a heap that grows fast meets the
// floor's collections for at most one tick.
func Follow(floor int64, ticks <-chan time.Time) (stop func()) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	return follower{read: readHeap, set: debug.SetMemoryLimit}.follow(floor, ticks)
}

func (f follower) follow(floor int64, ticks <-chan time.Time) (stop func()) {
	h := f.read()
	was := f.set(-1) // -1 reads the limit without changing it
	if was != math.MaxInt64 || h.gogc < 0 {
		return func() {}
	}
	f.set(limitFor(floor, h))
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-ticks:
				f.set(limitFor(floor, f.read()))
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		f.set(was)
	}
}
