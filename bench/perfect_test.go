package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

func TestPerfect(t *testing.T) {
	ms := time.Millisecond
	ones := func(n int) []int {
		out := make([]int, n)
		for i := range out {
			out[i] = 1
		}
		return out
	}
	// Requests without a readable key take the mean latency.
	reqs := func(tokens []int) []Request {
		out := make([]Request, len(tokens))
		for i, n := range tokens {
			out[i] = Request{Tokens: n}
		}
		return out
	}
	tests := []struct {
		name    string
		sim     geminisim.Config
		workers int // 0: no bound
		tokens  []int
		want    time.Duration
		never   bool
	}{
		{"sliding log: a window per RPM", geminisim.Config{RPM: 10, Window: time.Second}, 0, ones(25), 2 * time.Second, false},
		{"fixed window: bursts at the boundaries", geminisim.Config{RPM: 10, Window: time.Second, QuotaModel: geminisim.FixedWindow}, 0, ones(25), 2 * time.Second, false},
		{"token bucket, burst 1: evenly spaced", geminisim.Config{RPM: 10, Window: time.Second, QuotaModel: geminisim.TokenBucket, BurstRequests: 1}, 0, ones(25), 2400 * ms, false},
		{"token bucket, full burst, then the rate", geminisim.Config{RPM: 10, Window: time.Second, QuotaModel: geminisim.TokenBucket}, 0, ones(25), 1500 * ms, false},
		{"schedule halves the second window", geminisim.Config{RPM: 10, Window: time.Second, Schedule: []geminisim.Step{{At: time.Second, Percent: 50}, {At: 2 * time.Second, Percent: 100}}}, 0, ones(20), 2 * time.Second, false},
		{"TPM binds", geminisim.Config{TPM: 10, Window: time.Second}, 0, []int{4, 4, 4, 4, 4}, 2 * time.Second, false},
		{"concurrency cap and latency", geminisim.Config{MaxConcurrent: 2, Latency: geminisim.Latency{Base: 100 * ms}}, 0, ones(5), 300 * ms, false},
		{"latency ends the last answer", geminisim.Config{RPM: 10, Window: time.Second, Latency: geminisim.Latency{Base: 100 * ms, Jitter: 50 * ms}}, 0, ones(11), time.Second + 125*ms, false},
		{"overload burst blocks admission", geminisim.Config{RPM: 10, Window: time.Second, Overload: geminisim.Overload{Every: time.Second, For: 500 * ms}}, 0, ones(15), 1500 * ms, false},
		{"per day", geminisim.Config{RPM: 10, RPD: 12, Window: time.Second, Day: 10 * time.Second}, 0, ones(14), 10 * time.Second, false},
		{"workers bound a window's burst", geminisim.Config{RPM: 10, Window: time.Second, Latency: geminisim.Latency{Base: 100 * ms}}, 4, ones(10), 300 * ms, false},
		{"workers and the quota: the bound that binds", geminisim.Config{RPM: 10, Window: time.Second, Latency: geminisim.Latency{Base: 100 * ms}}, 4, ones(14), 1100 * ms, false},
		{"a prompt above the TPM is never admitted", geminisim.Config{TPM: 10}, 0, []int{11}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Perfect(tt.sim, reqs(tt.tokens), tt.workers)
			if ok == tt.never {
				t.Fatalf("ok %v", ok)
			}
			if got != tt.want {
				t.Errorf("Perfect = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestPerfect_DrawnLatency checks that a perfect client waits for the
// latency the simulator draws for each item, heavy tail included.
func TestPerfect_DrawnLatency(t *testing.T) {
	sim := geminisim.Config{Latency: geminisim.Latency{Base: 50 * time.Millisecond, Tail: 1.2, Max: 4 * time.Second}, Seed: 1}
	var reqs []Request
	var longest time.Duration
	for i := range 300 {
		key := geminisim.ItemID(fmt.Sprintf("r%06d", i+1))
		reqs = append(reqs, Request{Key: key, Tokens: 10})
		d, _ := geminisim.CallLatency(sim, key, 0, 10, 0)
		longest = max(longest, d)
	}
	got, ok := Perfect(sim, reqs, 0)
	if !ok || got != longest {
		t.Errorf("Perfect = %v, want the longest drawn latency %v (no quota: all sent at once)", got, longest)
	}
}
