package geminisim

import (
	"testing"
	"time"
)

// quotaStep is one request in a Quota table test: at At after the start, a
// request of Tokens tokens is admitted or refused; a refused one expects
// Wait to say Delay.
type quotaStep struct {
	at     time.Duration
	tokens int
	admit  bool
	delay  time.Duration // when refused
}

func TestQuota_Models(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name  string
		cfg   Config
		steps []quotaStep
	}{
		{
			name: "sliding log: the oldest call leaves the window",
			cfg:  Config{RPM: 2, Window: time.Second},
			steps: []quotaStep{
				{at: 0, tokens: 1, admit: true},
				{at: 400 * ms, tokens: 1, admit: true},
				{at: 500 * ms, tokens: 1, delay: 500 * ms},
				{at: time.Second, tokens: 1, admit: true},
				{at: time.Second, tokens: 1, delay: 400 * ms},
			},
		},
		{
			name: "fixed window: refused until the boundary, then a full burst",
			cfg:  Config{RPM: 2, Window: time.Second, QuotaModel: FixedWindow},
			steps: []quotaStep{
				{at: 900 * ms, tokens: 1, admit: true},
				{at: 950 * ms, tokens: 1, admit: true},
				{at: 960 * ms, tokens: 1, delay: 40 * ms},
				{at: time.Second, tokens: 1, admit: true},
				{at: time.Second + ms, tokens: 1, admit: true},
				{at: time.Second + 2*ms, tokens: 1, delay: 998 * ms},
			},
		},
		{
			name: "fixed window TPM: tokens reset at the boundary",
			cfg:  Config{TPM: 10, Window: time.Second, QuotaModel: FixedWindow},
			steps: []quotaStep{
				{at: 0, tokens: 8, admit: true},
				{at: 100 * ms, tokens: 3, delay: 900 * ms},
				{at: 100 * ms, tokens: 2, admit: true},
				{at: time.Second, tokens: 10, admit: true},
			},
		},
		{
			name: "token bucket: burst, then one request per refill",
			cfg:  Config{RPM: 10, Window: time.Second, QuotaModel: TokenBucket, BurstRequests: 2},
			steps: []quotaStep{
				{at: 0, tokens: 1, admit: true},
				{at: 0, tokens: 1, admit: true},
				{at: 0, tokens: 1, delay: 100 * ms},
				{at: 100 * ms, tokens: 1, admit: true},
				{at: 150 * ms, tokens: 1, delay: 50 * ms},
				{at: time.Second, tokens: 1, admit: true},
				{at: time.Second, tokens: 1, admit: true},
				{at: time.Second, tokens: 1, delay: 100 * ms},
			},
		},
		{
			name: "token bucket TPM: the missing tokens' refill time",
			cfg:  Config{TPM: 100, Window: time.Second, QuotaModel: TokenBucket, BurstTokens: 50},
			steps: []quotaStep{
				{at: 0, tokens: 40, admit: true},
				{at: 0, tokens: 30, delay: 200 * ms},
				{at: 200 * ms, tokens: 30, admit: true},
			},
		},
		{
			name: "refusals counted: a sliding log stays shut while knocked on",
			cfg:  Config{RPM: 1, Window: time.Second, CountRefused: true},
			steps: []quotaStep{
				{at: 0, tokens: 1, admit: true},
				{at: 500 * ms, tokens: 1, delay: 500 * ms},
				{at: time.Second, tokens: 1, delay: 500 * ms},
				{at: 1500 * ms, tokens: 1, delay: 500 * ms},
			},
		},
		{
			name: "refusals counted: a token bucket goes into debt",
			cfg:  Config{RPM: 10, Window: time.Second, QuotaModel: TokenBucket, BurstRequests: 1, CountRefused: true},
			steps: []quotaStep{
				{at: 0, tokens: 1, admit: true},
				{at: 0, tokens: 1, delay: 100 * ms},
				{at: 0, tokens: 1, delay: 200 * ms},
				{at: 200 * ms, tokens: 1, delay: 100 * ms},
			},
		},
		{
			name: "schedule: a fixed window at 50% then back",
			cfg: Config{RPM: 4, Window: time.Second, QuotaModel: FixedWindow,
				Schedule: []Step{{At: time.Second, Percent: 50}, {At: 2 * time.Second, Percent: 100}}},
			steps: []quotaStep{
				{at: time.Second, tokens: 1, admit: true},
				{at: time.Second, tokens: 1, admit: true},
				{at: 1500 * ms, tokens: 1, delay: 500 * ms},
				{at: 2 * time.Second, tokens: 1, admit: true},
			},
		},
		{
			name: "per day on top of per minute",
			cfg:  Config{RPM: 10, RPD: 2, Window: time.Second, Day: 10 * time.Second, QuotaModel: FixedWindow},
			steps: []quotaStep{
				{at: 0, tokens: 1, admit: true},
				{at: time.Second, tokens: 1, admit: true},
				{at: 2 * time.Second, tokens: 1, delay: 8 * time.Second},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
			q := NewQuota(tt.cfg, start)
			for i, st := range tt.steps {
				now := start.Add(st.at)
				got := q.Admits(now, st.tokens)
				if got != st.admit {
					t.Fatalf("step %d at %v: admitted %v, want %v", i, st.at, got, st.admit)
				}
				if got {
					q.Count(now, st.tokens)
					if d, ok := q.Wait(now, 0); !ok || d < 0 {
						t.Fatalf("step %d: wait %v %v after an admission", i, d, ok)
					}
					continue
				}
				d, ok := q.Wait(now, st.tokens)
				if !ok || d != st.delay {
					t.Errorf("step %d at %v: wait %v (ok %v), want %v", i, st.at, d, ok, st.delay)
				}
				// Probe just before, then at, the announced instant (a
				// Quota's times never go backwards).
				if d > 0 && !tt.cfg.CountRefused && q.Admits(now.Add(d-time.Nanosecond), st.tokens) {
					t.Errorf("step %d: admitted 1ns before the wait it announced (%v): not exact", i, d)
				}
				if !tt.cfg.CountRefused && !q.Admits(now.Add(d), st.tokens) {
					t.Errorf("step %d: refused again at the wait it announced (%v)", i, d)
				}
				if tt.cfg.CountRefused {
					q.Count(now, st.tokens)
				}
			}
		})
	}
}

func TestQuota_NeverAdmits(t *testing.T) {
	start := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, model := range QuotaModels {
		t.Run(string(model), func(t *testing.T) {
			q := NewQuota(Config{TPM: 10, QuotaModel: model}, start)
			if _, ok := q.Wait(start, 11); ok {
				t.Error("a prompt above the TPM has a wait")
			}
			z := NewQuota(Config{RPM: 5, QuotaModel: model, Schedule: []Step{{At: 0, Percent: 0}}}, start)
			if z.Admits(start, 1) {
				t.Error("a 0% quota admitted a call")
			}
			if _, ok := z.Wait(start, 1); ok {
				t.Error("a 0% quota with no later step has a wait")
			}
		})
	}
}

func TestOverload_Active(t *testing.T) {
	o := Overload{Every: 10 * time.Second, For: 2 * time.Second}
	tests := []struct {
		name string
		e    time.Duration
		in   bool
		end  time.Duration
	}{
		{"not at the start", time.Second, false, 0},
		{"first burst", 10 * time.Second, true, 12 * time.Second},
		{"inside", 11*time.Second + 999*time.Millisecond, true, 12 * time.Second},
		{"after", 12 * time.Second, false, 0},
		{"third", 31 * time.Second, true, 32 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, end := o.Active(tt.e)
			if in != tt.in || end != tt.end {
				t.Errorf("Active(%v) = %v, %v; want %v, %v", tt.e, in, end, tt.in, tt.end)
			}
		})
	}
}
