package job

import (
	"errors"
	"strings"
	"testing"
)

func TestLoad_EngineKeys(t *testing.T) {
	job := func(name, extra, top string) string {
		return "db: r.db\ninput: {path: in.jsonl}\n" + top + "stages:\n  - llm:\n      name: " + name + "\n      output: {label: [a]}\n" + extra
	}
	for _, tc := range []struct {
		name, body string
		wantKey    string // "" means no error
		wantMsg    string
	}{
		{"the flags' keys", job("classify", "      preset: classify\n      mode: auto\n      batch: {size: 10, deadline: 1h, poll: 5s}\n      timeout: 30s\n      max_wait: 2m\n      max_outage: 5m\n      max_refused: 0s\n      price: {input_per_m: 0.3, output_per_m: 2.5}\n      limiter: {start: 4, fixed: 0, decrease: 0.5, cooldown: 2s, tpm: 1000, rpm: 60}\n",
			"workers: 4\nfleet: {lease: 30s, quota: independent, quota_key: k}\n"), "", ""},
		{"the batch steps' keys", job("c", "      mode: batch\n      batch: {inline_bytes: 1000, create_settle: 15s, max_sends: 2}\n", ""), "", ""},
		{"inline_bytes not negative", job("c", "      batch: {inline_bytes: -1}\n", ""), "stages[0].llm.batch.inline_bytes", "negative"},
		{"max_sends not negative", job("c", "      batch: {max_sends: -1}\n", ""), "stages[0].llm.batch.max_sends", "negative"},
		{"create_settle a duration", job("c", "      batch: {create_settle: 0s}\n", ""), "stages[0].llm.batch.create_settle", "not a positive duration"},
		{"preset needs the name", job("label", "      preset: classify\n", ""), "stages[0].llm.preset", "needs name classify"},
		{"preset is classify", job("classify", "      preset: summarise\n", ""), "stages[0].llm.preset", "not a preset"},
		{"preset has no when", job("classify", "      preset: classify\n      system: be brief\n", ""), "stages[0].llm.preset", "no when, system"},
		{"a duration", job("c", "      timeout: soon\n", ""), "stages[0].llm.timeout", "not a positive duration"},
		{"max_refused 0 is never", job("c", "      max_refused: 0s\n", ""), "", ""},
		{"decrease below 1", job("c", "      limiter: {decrease: 1.5}\n", ""), "stages[0].llm.limiter.decrease", "below 1"},
		{"a negative rpm", job("c", "      limiter: {rpm: -1}\n", ""), "stages[0].llm.limiter.rpm", "negative"},
		{"a negative price", job("c", "      price: {input_per_m: -1}\n", ""), "stages[0].llm.price.input_per_m", "negative"},
		{"a lease of 1s or more", job("c", "", "fleet: {lease: 10ms}\n"), "fleet.lease", "1s or more"},
		{"a quota mode", job("c", "", "fleet: {quota: mine}\n"), "fleet.quota", "shared or independent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeJob(t, tc.body))
			if tc.wantKey == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var es Errors
			if !errors.As(err, &es) || len(es) != 1 || es[0].Key != tc.wantKey || !strings.Contains(es[0].Msg, tc.wantMsg) {
				t.Errorf("err = %v, want one problem at %s: %q", err, tc.wantKey, tc.wantMsg)
			}
		})
	}
}
