package footprint

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

const mib = 1 << 20

func TestLimitFor(t *testing.T) {
	tests := []struct {
		name string
		h    heapState
		want int64
	}{
		{"a night's heap stays at the floor", heapState{live: 8 * mib, nonHeap: 5 * mib, gogc: 100}, 24 * mib},
		{"an empty heap", heapState{gogc: 100}, 24 * mib},
		{"a large heap: its goal and the rest, an eighth to spare", heapState{live: 80 * mib, nonHeap: 16 * mib, gogc: 100}, 198 * mib},
		{"GOGC=50 grows the heap by half", heapState{live: 64 * mib, nonHeap: 8 * mib, gogc: 50}, 117 * mib},
		{"the goal just past the floor", heapState{live: 10 * mib, nonHeap: 2 * mib, gogc: 100}, 24*mib + 3*mib/4},
		{"the stacks and globals scanned grow the goal", heapState{live: 64 * mib, scan: 8 * mib, nonHeap: 8 * mib, gogc: 100}, 162 * mib},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := limitFor(24*mib, tc.h); got != tc.want {
				t.Fatalf("limitFor = %d, want %d", got, tc.want)
			}
		})
	}
}

// fakeRuntime is the runtime's memory limit and heap as follow sees them.
type fakeRuntime struct {
	mu    sync.Mutex
	limit int64
	heap  heapState
	sets  []int64       // every limit set, in order
	setc  chan struct{} // a value per limit set
}

func (r *fakeRuntime) read() heapState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.heap
}

func (r *fakeRuntime) set(n int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	was := r.limit
	if n >= 0 {
		r.limit = n
		r.sets = append(r.sets, n)
		r.setc <- struct{}{}
	}
	return was
}

func (r *fakeRuntime) grow(live int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.heap.live = live
}

func TestFollow(t *testing.T) {
	defer goleak.VerifyNone(t)
	tests := []struct {
		name     string
		limit    int64 // found
		gogc     int
		wantSets []int64
	}{
		{"follows the heap from the floor and puts back no limit", math.MaxInt64, 100,
			[]int64{24 * mib, 24 * mib, 72 * mib, 24 * mib, math.MaxInt64}},
		{"a limit the user set stays", 512 * mib, 100, nil},
		{"the collector off stays off", math.MaxInt64, -1, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &fakeRuntime{limit: tc.limit, heap: heapState{live: 4 * mib, nonHeap: 4 * mib, gogc: tc.gogc}, setc: make(chan struct{}, 8)}
			ticks := make(chan time.Time)
			stop := follower{read: r.read, set: r.set}.follow(24*mib, ticks)
			if tc.wantSets != nil {
				<-r.setc // the limit set at once
				for _, live := range []int64{4 * mib, 30 * mib, 6 * mib} {
					r.grow(live)
					ticks <- time.Time{}
					<-r.setc
				}
			}
			stop()
			if len(r.sets) != len(tc.wantSets) {
				t.Fatalf("limits set %v, want %v", r.sets, tc.wantSets)
			}
			for i := range r.sets {
				if r.sets[i] != tc.wantSets[i] {
					t.Fatalf("limits set %v, want %v", r.sets, tc.wantSets)
				}
			}
			if r.limit != tc.limit {
				t.Fatalf("limit after stop %d, want the one found, %d", r.limit, tc.limit)
			}
		})
	}
}

func TestFollow_runtime(t *testing.T) {
	defer goleak.VerifyNone(t)
	if debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Skip("GOMEMLIMIT is set")
	}
	stop := Follow(24*mib, nil)
	if got := debug.SetMemoryLimit(-1); got < 24*mib || got == math.MaxInt64 {
		t.Fatalf("limit while following %d, want at least the floor", got)
	}
	stop()
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("limit after stop %d, want none", got)
	}
}

func TestFollow_runtimeGCOff(t *testing.T) {
	defer goleak.VerifyNone(t)
	if debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Skip("GOMEMLIMIT is set")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	stop := Follow(24*mib, nil)
	defer stop()
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("limit set to %d with GOGC=off, want none", got)
	}
}

// fragmented holds TestFollow_runtimeFragmentedHeap's live heap.
var fragmented [][]byte

// TestFollow_runtimeFragmentedHeap holds a heap whose spans are half
// empty, as a heap is after a run dropped most of what it built, and
// checks the runtime's heap goal under the limit is the one GOGC gives:
// the runtime counts a span's empty slots against the limit.
func TestFollow_runtimeFragmentedHeap(t *testing.T) {
	defer goleak.VerifyNone(t)
	if debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Skip("GOMEMLIMIT is set")
	}
	all := make([][]byte, 40000)
	for i := range all {
		all[i] = make([]byte, 400)
	}
	for i := 0; i < len(all); i += 2 {
		fragmented = append(fragmented, all[i])
	}
	all = nil
	defer func() { fragmented = nil }()
	runtime.GC()
	goal := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(goal)
	want := goal[0].Value.Uint64()
	stop := Follow(mib, nil)
	metrics.Read(goal)
	got := goal[0].Value.Uint64()
	limit := debug.SetMemoryLimit(-1)
	stop()
	if got < want {
		t.Fatalf("heap goal %d under a limit of %d, want GOGC's %d: the limit binds", got, limit, want)
	}
}

// TestFollow_runtimeGOMEMLIMITOff: GOMEMLIMIT=off reads as no limit, as
// the default does, but is the user's word that the run keeps none.
func TestFollow_runtimeGOMEMLIMITOff(t *testing.T) {
	defer goleak.VerifyNone(t)
	if debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Skip("GOMEMLIMIT is set")
	}
	t.Setenv("GOMEMLIMIT", "off")
	stop := Follow(24*mib, nil)
	defer stop()
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("limit set to %d with GOMEMLIMIT=off, want none", got)
	}
}
