package quotasim

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Latency draws one admitted call's round trip.
type Latency func(rng *rand.Rand) time.Duration

// Uniform latency in [lo, hi].
func Uniform(lo, hi time.Duration) Latency {
	return func(rng *rand.Rand) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
}

// HeavyTail is log-normal around median, clamped to [lo, hi]: most
// answers quick, some very slow, as thinking models answer.
func HeavyTail(median time.Duration, sigma float64, lo, hi time.Duration) Latency {
	return func(rng *rand.Rand) time.Duration {
		d := time.Duration(float64(median) * math.Exp(sigma*rng.NormFloat64()))
		return min(max(d, lo), hi)
	}
}

// Shape is one server: its quotas, its cap on calls in progress, its
// latency, what its 429s say, and the work sent to it.
type Shape struct {
	// Name says every parameter, so a case can be read and replayed.
	Name string
	// Family is the kind of quota: sliding, fixed, bucket, cap, tpm, minute.
	Family string
	// Seed draws the latencies and the prompts' sizes.
	Seed  uint64
	Items int
	// Requests counts calls (cost 1), Tokens counts input tokens; nil for
	// none. Each returns a fresh quota for one run.
	Requests, Tokens func() Quota
	// Cap is the server's cap on calls in progress, answered with bare
	// 429s; 0 for none.
	Cap     int
	Latency Latency
	Retry   Retry
	// Refusal is a 429's round trip.
	Refusal time.Duration
	// NamedRPM and NamedTPM are the per-minute budgets a quota 429 names
	// (QuotaFailure's quotaValue); 0 for none. NamedDrift makes them live.
	NamedRPM, NamedTPM int64
	NamedDrift         Drift
	// Prompt draws an item's input tokens; nil means DefaultTokens.
	Prompt func(rng *rand.Rand) int
}

// DefaultTokens is the input tokens of an item on a shape with no Prompt.
const DefaultTokens = 100

// PromptSize is what a client sees of a call's size before it starts: a
// length in runes that grows with the tokens, not the tokens themselves.
func PromptSize(tokens int) int64 { return int64(4*tokens - tokens%3) }

// prompts draws every item's input tokens.
func (sh Shape) prompts() []int {
	out := make([]int, sh.Items)
	rng := rand.New(rand.NewPCG(sh.Seed, 11))
	for i := range out {
		out[i] = DefaultTokens
		if sh.Prompt != nil {
			out[i] = sh.Prompt(rng)
		}
	}
	return out
}

// server is one run's server state.
type server struct {
	sh               Shape
	requests, tokens Quota
	active           endTimes // of the calls in progress, soonest first
}

// endTimes is a min-heap of instants.
type endTimes []time.Time

func (h endTimes) Len() int           { return len(h) }
func (h endTimes) Less(i, j int) bool { return h[i].Before(h[j]) }
func (h endTimes) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endTimes) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *endTimes) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

func newServer(sh Shape) *server {
	s := &server{sh: sh}
	if sh.Requests != nil {
		s.requests = sh.Requests()
	}
	if sh.Tokens != nil {
		s.tokens = sh.Tokens()
	}
	return s
}

func (s *server) trim(t time.Time) {
	for len(s.active) > 0 && !s.active[0].After(t) {
		heap.Pop(&s.active)
	}
}

// call decides a call for item (of tokens) arriving at t: admitted
// taking took, or refused with the retry delay its 429 carries and
// whether it names the quota's budgets. An item's answer takes the same
// time whoever sends it and whenever, so that the perfect client and a
// law differ by when they send, not by the latencies they drew.
func (s *server) call(t time.Time, item, tokens int) (took, retryAfter time.Duration, ok, named bool) {
	s.trim(t)
	if s.sh.Cap > 0 && len(s.active) >= s.sh.Cap {
		return s.sh.Refusal, 0, false, false
	}
	named = s.sh.NamedRPM > 0 || s.sh.NamedTPM > 0
	if s.requests != nil {
		if ok, wait := s.requests.Admit(t, 1); !ok {
			return s.sh.Refusal, s.sh.Retry.delay(wait), false, named
		}
	}
	if s.tokens != nil {
		if ok, wait := s.tokens.Admit(t, tokens); !ok {
			return s.sh.Refusal, s.sh.Retry.delay(wait), false, named
		}
	}
	took = s.sh.Latency(rand.New(rand.NewPCG(s.sh.Seed, uint64(item))))
	heap.Push(&s.active, t.Add(took))
	return took, 0, true, false
}

// namedAt is what a 429 of a call started at t names.
func (sh Shape) namedAt(t time.Time) (rpm, tpm int64) {
	pct := int64(sh.NamedDrift.pctAt(t))
	return sh.NamedRPM * pct / 100, sh.NamedTPM * pct / 100
}

// Perfect is the time a perfect client takes for the shape's items: one
// that knows the quota and sends each item, in order, the instant the
// quotas and the server's cap admit it, with no bound of its own on calls
// in flight. No client that does not know the quota can beat it.
func Perfect(sh Shape) time.Duration {
	s := newServer(sh)
	t, end := Epoch, Epoch
	for item, tokens := range sh.prompts() {
		for {
			s.trim(t)
			if sh.Cap > 0 && len(s.active) >= sh.Cap {
				t = s.active[0]
				continue
			}
			n := t
			if s.requests != nil {
				n = s.requests.Next(n, 1)
			}
			if s.tokens != nil {
				n = s.tokens.Next(n, tokens)
			}
			if s.requests != nil && n.After(t) {
				n = s.requests.Next(n, 1) // the token quota's instant may be past a request window's edge
			}
			if !n.After(t) {
				break
			}
			t = n
		}
		took, _, ok, _ := s.call(t, item, tokens)
		if !ok {
			panic(fmt.Sprintf("quotasim: the perfect client was refused on %s", sh.Name))
		}
		end = maxTime(end, t.Add(took))
	}
	return end.Sub(Epoch)
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Law is a rate law driven in virtual time: every method takes the
// instant it happens at. inFlight counts the calls in flight, including
// the one an outcome reports.
type Law interface {
	// Ready reports whether a call of size (see PromptSize) may start at
	// t. When not, wake is when to ask again; zero means when an outcome
	// comes.
	Ready(t time.Time, inFlight int, size int64) (ok bool, wake time.Time)
	// Start records a call starting at t and returns its start stamp.
	Start(t time.Time, inFlight int, size int64) (started time.Time)
	// Succeeded reports an answer billing tokens.
	Succeeded(t, started time.Time, tokens int64, inFlight int)
	// RateLimited reports a 429 with its retry delay (0: none) and the
	// per-minute budgets it names (0: none).
	RateLimited(t, started time.Time, retryAfter time.Duration, rpm, tpm int64, inFlight int)
	// MostInFlight is the most calls the law lets be in flight: the
	// runner's pool.
	MostInFlight() int
}

// Result is one run of a law on a shape.
type Result struct {
	Shape        Shape
	Wall         time.Duration // the law's time for every item
	Perfect      time.Duration // the perfect client's
	Calls, R429s int
	Done         int
	// Stalled says the law stopped starting calls with items left, or
	// made more than maxCallsPerItem calls per item: Wall is then where
	// it stopped and Goodput counts what it finished.
	Stalled string
}

// Goodput is the perfect client's time over the law's, scaled by the
// items finished: 1 is perfect.
func (r Result) Goodput() float64 {
	if r.Wall <= 0 {
		return 0
	}
	return r.Perfect.Seconds() / r.Wall.Seconds() * float64(r.Done) / float64(r.Shape.Items)
}

// Share is the share of calls refused with a 429.
func (r Result) Share() float64 { return float64(r.R429s) / float64(max(r.Calls, 1)) }

// CallsPerItem is the calls made per item finished.
func (r Result) CallsPerItem() float64 { return float64(r.Calls) / float64(max(r.Done, 1)) }

// maxCallsPerItem stops a run that spirals: its figures are already a
// failure.
const maxCallsPerItem = 20

// outcome is a call's answer reaching the client.
type outcome struct {
	at, started time.Time
	item        int
	ok          bool
	retryAfter  time.Duration
	named       bool
}

type outcomes []outcome

func (q outcomes) Len() int { return len(q) }
func (q outcomes) Less(i, j int) bool {
	return cmp.Or(q[i].at.Compare(q[j].at), q[i].started.Compare(q[j].started)) < 0
}
func (q outcomes) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *outcomes) Push(x any)   { *q = append(*q, x.(outcome)) }
func (q *outcomes) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// Run drives law through the shape as pipeline.Runner does: workers (the
// law's MostInFlight) each hold an item, wait until the law lets a call
// start, call, report the outcome, and after a 429 wait again with the
// same item, first in line behind those already waiting.
func Run(sh Shape, law Law) Result {
	s := newServer(sh)
	prompts := sh.prompts()
	var (
		t        = Epoch
		events   outcomes
		waiting  []int // the items workers hold, not in flight, first in line first
		assigned = min(max(law.MostInFlight(), 1), sh.Items)
		inFlight int
		r        = Result{Shape: sh, Perfect: Perfect(sh)}
	)
	for i := range assigned {
		waiting = append(waiting, i)
	}
	for r.Done < sh.Items {
		var wake time.Time
		for len(waiting) > 0 {
			item := waiting[0]
			size := PromptSize(prompts[item])
			ok, at := law.Ready(t, inFlight, size)
			if !ok {
				wake = at
				break
			}
			started := law.Start(t, inFlight, size)
			took, retryAfter, admitted, named := s.call(t, item, prompts[item])
			heap.Push(&events, outcome{at: t.Add(took), started: started, item: item, ok: admitted, retryAfter: retryAfter, named: named})
			waiting = waiting[1:]
			inFlight++
			r.Calls++
		}
		next := wake
		if !next.After(t) {
			next = time.Time{}
		}
		if len(events) > 0 && (next.IsZero() || events[0].at.Before(next)) {
			next = events[0].at
		}
		if next.IsZero() || r.Calls > maxCallsPerItem*sh.Items {
			r.Stalled = fmt.Sprintf("stopped at %v with %d waiting, %d calls", t.Sub(Epoch), len(waiting), r.Calls)
			break
		}
		t = next
		for len(events) > 0 && !events[0].at.After(t) {
			e := heap.Pop(&events).(outcome)
			if e.ok {
				law.Succeeded(t, e.started, int64(prompts[e.item]), inFlight)
				r.Done++
				if assigned < sh.Items {
					waiting = append(waiting, assigned)
					assigned++
				}
			} else {
				r.R429s++
				var rpm, tpm int64
				if e.named {
					rpm, tpm = sh.namedAt(e.started)
				}
				law.RateLimited(t, e.started, e.retryAfter, rpm, tpm, inFlight)
				waiting = append(waiting, e.item)
			}
			inFlight--
		}
	}
	r.Wall = t.Sub(Epoch)
	return r
}
