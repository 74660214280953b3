package limiter

import (
	"testing"
	"time"
)

// A 429's per-minute budget is believed unless the calls the quota
// admitted in the minute before the refused call's start add up to more
// than twice it: a window's count named as a minute's paced runs at a
// sixtieth of their quota for hours (0.06 of the perfect client on random
// shapes named that way).
func TestLaw_namedBudgetContradicted(t *testing.T) {
	const tokens = 100 // billed per admitted call
	tests := []struct {
		name     string
		admitted int           // calls admitted, 4 ms apart
		ago      time.Duration // how long before the refused call the first started (<0: after it)
		believed int64         // the RPM recorded before, 0 for none
		rpm, tpm int64         // what the 429 names
		wantRPM  int64
		wantTPM  int64
	}{
		{name: "a window's count named as a minute's", admitted: 200, ago: time.Second, rpm: 23},
		{name: "the same name believed before is forgotten", admitted: 200, ago: time.Second, believed: 23, rpm: 23},
		{name: "a fixed window's end and the next one's start", admitted: 46, ago: time.Second, rpm: 23, wantRPM: 23},
		{name: "the truth", admitted: 200, ago: time.Second, rpm: 12000, wantRPM: 12000},
		{name: "admissions over a minute before do not count", admitted: 200, ago: 62 * time.Second, rpm: 23, wantRPM: 23},
		{name: "tokens contradicted, requests not", admitted: 200, ago: time.Second, rpm: 12000, tpm: 5000, wantRPM: 12000},
		{name: "tokens believed", admitted: 200, ago: time.Second, tpm: 600000, wantTPM: 600000},
		{name: "calls started after the refused one do not count", admitted: 200, ago: -time.Second, rpm: 23, wantRPM: 23},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newTestLaw(Config{})
			if tt.believed > 0 {
				w.nameQuota(tt.believed, 0)
			}
			refusedAt := simEpoch.Add(2 * time.Minute)
			first := refusedAt.Add(-tt.ago)
			var starts []time.Time
			for i := range tt.admitted {
				starts = append(starts, w.start(first.Add(time.Duration(i)*4*time.Millisecond), i%64))
			}
			for _, s := range starts {
				w.onSuccess(s.Add(rtt), s, tokens, 64)
			}
			var s time.Time
			if tt.ago < 0 {
				s = refusedAt // stamped before the calls admitted beside it
			} else {
				s = w.start(refusedAt, 20)
			}
			w.nameQuotaAt(s, tt.rpm, tt.tpm)
			if tt.believed > 0 && tt.wantRPM == 0 && w.lastRPM == tt.believed {
				// It would still pace requests whenever tokens bind.
				t.Errorf("the contradicted %d RPM is still the last named", tt.believed)
			}
			if w.namedRPM != tt.wantRPM || w.namedTPM != tt.wantTPM {
				t.Errorf("named %d RPM, %d TPM after %d admitted: recorded %d RPM, %d TPM; want %d, %d",
					tt.rpm, tt.tpm, tt.admitted, w.namedRPM, w.namedTPM, tt.wantRPM, tt.wantTPM)
			}
		})
	}
}
