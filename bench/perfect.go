package bench

import (
	"container/heap"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// Request is one call of a perfect client: the item's key in the
// simulator's Stats.Items and its input tokens.
type Request struct {
	Key    string
	Tokens int
}

// Perfect is the time a perfect client needs to get every request of reqs
// (in order) answered by a simulator
// configured as sim: a client that knows the quota and sends each request
// the very instant the quota admits it, never a refused call, with at
// most workers requests in flight (no bound if workers <= 0). The
// matrix holds it to as many workers as the run it measures kept in
// flight at its 95th percentile, and at least 64 (see perfectWorkers; the
// limiter's virtual-time perfect client is held the same way): a client
// given 64 workers cannot send a window's 200 or 400 requests at once,
// so an unbounded yardstick would charge a controller that needs few
// calls in flight for a burst no polite client sends, while one that
// keeps hundreds in flight is measured against a client with as many.
// It runs the
// simulator's own quota (geminisim.Quota) in virtual time, so it is exact
// for every quota model, burst, schedule and per-day limit, and honours
// the other limits a client cannot beat: no request while MaxConcurrent
// are in flight, none during an overload burst. Each request takes the
// latency the simulator draws for that item's first call with the
// requests then in flight (geminisim.CallLatency; Latency.Mean for a key
// it cannot read), so a heavy tail costs the perfect client what it costs
// any client; the time is when the last answer arrives. ok is false when the quota
// never admits some request (a prompt above the TPM, a schedule ending at
// 0%).
func Perfect(sim geminisim.Config, reqs []Request, workers int) (d time.Duration, ok bool) {
	start := time.Unix(0, 0).UTC()
	q := geminisim.NewQuota(sim, start)
	var inFlight endTimes // answer times of the requests in flight
	t, last := start, start
	for _, r := range reqs {
		n := r.Tokens
		for {
			for inFlight.Len() > 0 && !inFlight[0].After(t) {
				heap.Pop(&inFlight)
			}
			if sim.MaxConcurrent > 0 && inFlight.Len() >= sim.MaxConcurrent || workers > 0 && inFlight.Len() >= workers {
				t = inFlight[0]
				continue
			}
			if in, end := sim.Overload.Active(t.Sub(start)); in {
				t = start.Add(end)
				continue
			}
			if q.Admits(t, n) {
				break
			}
			wait, ok := q.Wait(t, n)
			if !ok {
				return 0, false
			}
			// Wait can be 0 when a token bucket sits within rounding of
			// the level needed; step on rather than spin.
			t = t.Add(max(wait, time.Nanosecond))
		}
		q.Count(t, n)
		lat, ok := geminisim.CallLatency(sim, r.Key, 0, n, inFlight.Len())
		if !ok {
			lat = sim.Latency.Mean(n, inFlight.Len())
		}
		end := t.Add(lat)
		heap.Push(&inFlight, end)
		last = maxTime(last, end)
	}
	return last.Sub(start), true
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// endTimes is a min-heap of instants.
type endTimes []time.Time

func (h endTimes) Len() int           { return len(h) }
func (h endTimes) Less(i, j int) bool { return h[i].Before(h[j]) }
func (h endTimes) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endTimes) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *endTimes) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
