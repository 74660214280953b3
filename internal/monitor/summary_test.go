package monitor

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

func TestPrintSummary(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	sum := pipeline.RunSummary{ID: "run-1", Started: start, Ended: start.Add(90 * time.Second), Status: "complete",
		Stages: map[string]*pipeline.StageStats{
			"sanitize": {Done: 9, Dead: 1, DeadReasons: map[string]int{"permanent: text is empty": 1}},
			"classify": {Done: 8, Dead: 1, Attempts: 9, Calls: 10, RateLimited: 1, Transient: 2, Unavailable: 3, BadAnswers: 4, LimitMin: 2, LimitMax: 8, LimitEnd: 6, InFlightMax: 7,
				Paid: 5, Cached: 3, CostUSD: 0.0012, SavedUSD: 0.0007,
				DeadReasons: map[string]int{"transient: server said \x1b[2Jhi": 1}},
		}}
	var buf bytes.Buffer
	next := []string{"sawtooth status --db 'my db.db'", "sawtooth dlq list --db 'my db.db'"}
	if err := PrintSummary(&buf, []string{"sanitize", "classify", "aggregate"}, sum, false, next); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"run run-1: complete in 1m30s",
		"5xx/timeouts  unreachable  bad answers", // the header, each class in its own column
		"classify: 429 share 10.00% of 10 calls; at most 7 calls in flight at once; concurrency limit ranged 2..8, ended at 6",
		`server said \x1b[2Jhi`,
		"edit those rows in the input file and run again",
		"classify: 5 paid calls, 3 cached answers (no call), $0.0012 spent, $0.0007 saved by the cache",
		"next:\n  sawtooth status --db 'my db.db'\n  sawtooth dlq list --db 'my db.db'\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		// stage done dead attempts calls 429s 5xx/timeouts unreachable bad ...
		if f := strings.Fields(line); len(f) > 8 && f[0] == "classify" && (f[6] != "2" || f[7] != "3" || f[8] != "4") {
			t.Errorf("classify row %q: want 2 5xx/timeouts, 3 unreachable and 4 bad answers", line)
		}
	}
	if strings.Contains(out, "\x1b") || strings.Contains(out, " | ") {
		t.Errorf("summary holds a raw ESC or hints joined with |:\n%q", out)
	}
	if strings.Index(out, "sanitize") > strings.Index(out, "classify") {
		t.Errorf("stages not in pipeline order:\n%s", out)
	}
}
