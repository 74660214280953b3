package geminisim

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Step is one point of a live-quota schedule: from At after the server
// started, the effective RPM and TPM are Percent% of the configured values
// (rounded down). Before the first step the quota is 100%. RPD is not
// scheduled. A Percent of 0 refuses every request while it lasts.
type Step struct {
	At      time.Duration
	Percent int
}

// ParseSchedule parses a schedule written as comma-separated "duration:percent"
// pairs, e.g. "0s:100,30s:50,60s:100" (durations in time.ParseDuration
// syntax). The steps are returned sorted by At; an empty string is an empty
// schedule. Negative values and two steps at the same instant are errors.
func ParseSchedule(s string) ([]Step, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var steps []Step
	for _, field := range strings.Split(s, ",") {
		field = strings.TrimSpace(field)
		at, pct, ok := strings.Cut(field, ":")
		if !ok {
			return nil, fmt.Errorf("schedule step %q: want duration:percent, e.g. 30s:50", field)
		}
		d, err := time.ParseDuration(strings.TrimSpace(at))
		if err != nil {
			return nil, fmt.Errorf("schedule step %q: %w", field, err)
		}
		p, err := strconv.Atoi(strings.TrimSpace(pct))
		if err != nil {
			return nil, fmt.Errorf("schedule step %q: percent: %w", field, err)
		}
		if d < 0 || p < 0 {
			return nil, fmt.Errorf("schedule step %q: duration and percent must not be negative", field)
		}
		steps = append(steps, Step{At: d, Percent: p})
	}
	slices.SortStableFunc(steps, func(a, b Step) int { return cmp.Compare(a.At, b.At) })
	for i := 1; i < len(steps); i++ {
		if steps[i].At == steps[i-1].At {
			return nil, fmt.Errorf("schedule: two steps at %v", steps[i].At)
		}
	}
	return steps, nil
}

// percentAt is the schedule's percent at elapsed time e since start.
func percentAt(steps []Step, e time.Duration) int {
	pct := 100
	for _, st := range steps {
		if st.At > e {
			break
		}
		pct = st.Percent
	}
	return pct
}

// nextStepAfter is the first step strictly after elapsed time e.
func nextStepAfter(steps []Step, e time.Duration) (time.Duration, bool) {
	for _, st := range steps {
		if st.At > e {
			return st.At, true
		}
	}
	return 0, false
}
