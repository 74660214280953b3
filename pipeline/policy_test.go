package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

type namedStage string

func (s namedStage) Name() string { return string(s) }
func (namedStage) Process(context.Context, Item) (Result, error) {
	return Result{}, errors.New("not called")
}

// nopLimiter is a Limiter that admits everything: decide only asks
// whether one is configured.
type nopLimiter struct{}

func (nopLimiter) Acquire(context.Context) (time.Time, error) { return time.Time{}, nil }
func (nopLimiter) Succeeded(time.Time, int64)                 {}
func (nopLimiter) RateLimited(time.Time, time.Duration)       {}
func (nopLimiter) Failed(time.Time)                           {}
func (nopLimiter) Limit() int                                 { return 1 }
func (nopLimiter) InFlight() int                              { return 0 }

// holdingLimiter is a nopLimiter that backs off bare 429s itself.
type holdingLimiter struct{ nopLimiter }

func (holdingLimiter) HoldsRefusals() bool { return true }

func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	cfg := func(limited bool) *StageConfig {
		sc := &StageConfig{Stage: namedStage("api")}
		if limited {
			sc.Limiter = nopLimiter{}
		}
		sc.setDefaults()
		return sc
	}
	refused := func(after time.Duration, daily bool) error {
		return RateLimited(errors.New("429 RESOURCE_EXHAUSTED"), after, daily)
	}
	down := Unavailable(errors.New("dial tcp: connection refused"))
	overloaded := Overloaded(errors.New("503 UNAVAILABLE: The model is overloaded"))
	tests := []struct {
		name    string
		f       failure
		limited bool
		holding bool // the limiter backs off bare 429s itself
		// maxRefused replaces the default StageConfig.MaxRefused when not 0.
		maxRefused time.Duration
		want       actionKind
		wantAt     time.Duration // retryAt: after now
		wantMsg    string        // a part of the message (park, deadLetter, stop)
	}{
		{name: "canceled gives the item back", f: failure{class: ClassCanceled, err: context.Canceled}, want: requeue},
		{name: "fatal stops", f: failure{class: ClassFatal, err: errors.New("API key not valid")}, want: stop, wantMsg: "api: API key not valid"},
		{name: "a halt stops the run with its own message, not the item's", f: failure{class: ClassFatal, err: fmt.Errorf("item r1: %w", Halt(errors.New("the account cannot pay for calls")))},
			want: halt, wantMsg: "api: the account cannot pay for calls"},
		{name: "a halt named for its stage is not named twice", f: failure{class: ClassFatal, err: Halt(errors.New("api: credits depleted: add credits"))},
			want: halt, wantMsg: "api: credits depleted: add credits"},
		{name: "daily 429 parks at the first refusal", f: failure{class: ClassRateLimited, err: refused(26*time.Second, true), refusedInARow: 1}, limited: true,
			want: park, wantMsg: "daily quota exhausted for api; resume after " + nextPacificMidnight(now).Local().Format(time.RFC3339)},
		{name: "daily 429 parks without a limiter too", f: failure{class: ClassRateLimited, err: refused(0, true), refusedInARow: 1}, want: park, wantMsg: "daily quota exhausted"},
		{name: "retryDelay beyond max-wait parks", f: failure{class: ClassRateLimited, err: refused(DefaultMaxWait+time.Second, false), refusedInARow: 1}, limited: true,
			want: park, wantMsg: "the server asks to wait 2m1s, more than the 2m0s the stage waits); resume after " + now.Add(DefaultMaxWait+time.Second).Local().Format(time.RFC3339) + ", or raise the longest wait allowed"},
		{name: "retryDelay of exactly max-wait waits (limiter holds the calls)", f: failure{class: ClassRateLimited, err: refused(DefaultMaxWait, false), refusedInARow: 1, step: time.Second}, limited: true,
			want: retryAt, wantAt: 0},
		{name: "retryDelay of exactly max-wait waits it without a limiter", f: failure{class: ClassRateLimited, err: refused(DefaultMaxWait, false), refusedInARow: 1, step: time.Second},
			want: retryAt, wantAt: DefaultMaxWait},
		{name: "bare 429 backs off with a limiter that does not hold it", f: failure{class: ClassRateLimited, err: refused(0, false), refusedInARow: 3, step: 1500 * time.Millisecond}, limited: true,
			want: retryAt, wantAt: 1500 * time.Millisecond},
		{name: "bare 429 retries through a limiter that holds it", f: failure{class: ClassRateLimited, err: refused(0, false), refusedInARow: 3, step: 1500 * time.Millisecond}, holding: true,
			want: retryAt, wantAt: 0},
		{name: "without a limiter the longer of retryDelay and the step", f: failure{class: ClassRateLimited, err: refused(5*time.Second, false), refusedInARow: 1, step: 8 * time.Second},
			want: retryAt, wantAt: 8 * time.Second},
		{name: "one refusal short of the limit waits", f: failure{class: ClassRateLimited, err: refused(0, false), refusedInARow: DefaultMaxRateLimited - 1, step: time.Second}, limited: true,
			want: retryAt, wantAt: time.Second},
		{name: "refusals in a row park", f: failure{class: ClassRateLimited, err: refused(0, false), refusedInARow: DefaultMaxRateLimited, step: time.Second}, limited: true,
			want: park, wantMsg: "quota exhausted for api: 200 refusals in a row with no success"},
		{name: "refusals for 4m59s wait", f: failure{class: ClassRateLimited, err: refused(0, false), refusedInARow: 70, refusedSince: now.Add(-299 * time.Second), step: time.Second}, holding: true,
			want: retryAt, wantAt: 0},
		{name: "refusals for 5m park, whatever the delay asked", f: failure{class: ClassRateLimited, err: refused(30*time.Second, false), refusedInARow: 70, refusedSince: now.Add(-5 * time.Minute), step: time.Second}, holding: true,
			want: park, wantMsg: "quota exhausted for api: every call refused (429) for 5m0s since " + now.Add(-5*time.Minute).Local().Format(time.TimeOnly) + ", 70 in a row with no success (limit 5m0s; last: 429 RESOURCE_EXHAUSTED): no per-minute quota refuses that long; check the project's quota, usage and billing, then run again to resume, nothing is lost (to wait longer, raise the limit on refusals, or set none to never stop for them; per-day quotas reset at midnight Pacific, " + nextPacificMidnight(now).Local().Format(time.RFC3339) + ")"},
		{name: "refusals for an hour wait when MaxRefused is never", f: failure{class: ClassRateLimited, err: refused(0, false), refusedInARow: 900, refusedSince: now.Add(-time.Hour), step: time.Second}, holding: true, maxRefused: -1,
			want: retryAt, wantAt: 0},
		{name: "refusals for 5m park without a limiter", f: failure{class: ClassRateLimited, err: refused(0, false), refusedInARow: 10, refusedSince: now.Add(-6 * time.Minute), step: time.Second},
			want: park, wantMsg: "every call refused (429) for 6m0s"},
		{name: "too few refusals minutes apart wait", f: failure{class: ClassRateLimited, err: refused(0, false), refusedInARow: minRefusedToPark - 1, refusedSince: now.Add(-time.Hour), step: time.Second}, holding: true,
			want: retryAt, wantAt: 0},
		{name: "outage before first contact: 29s waits", f: failure{class: ClassUnavailable, err: down, outageSince: now.Add(-29 * time.Second), step: 2 * time.Second},
			want: retryAt, wantAt: 2 * time.Second},
		{name: "outage before first contact: 30s parks", f: failure{class: ClassUnavailable, err: down, outageSince: now.Add(-30 * time.Second), step: 2 * time.Second},
			want: park, wantMsg: "api cannot reach its endpoint: unreachable for 30s since " + now.Add(-30*time.Second).Local().Format(time.TimeOnly) + " (limit 30s, before any answer in this run"},
		{name: "outage after contact: 4m59s waits", f: failure{class: ClassUnavailable, err: down, contacted: true, outageSince: now.Add(-299 * time.Second), step: 2 * time.Second},
			want: retryAt, wantAt: 2 * time.Second},
		{name: "outage after contact: 5m parks", f: failure{class: ClassUnavailable, err: down, contacted: true, outageSince: now.Add(-5 * time.Minute)},
			want: park, wantMsg: "unreachable for 5m0s since " + now.Add(-5*time.Minute).Local().Format(time.TimeOnly) + " (limit 5m0s; last: dial tcp"},
		{name: "outage that just began waits", f: failure{class: ClassUnavailable, err: down, contacted: true, outageSince: now, step: time.Second},
			want: retryAt, wantAt: time.Second},
		{name: "transient within budget retries", f: failure{class: ClassTransient, err: errors.New("500"), attempts: DefaultMaxAttempts - 1, step: 4 * time.Second},
			want: retryAt, wantAt: 4 * time.Second},
		{name: "transient budget spent dead-letters", f: failure{class: ClassTransient, err: errors.New("500 internal"), attempts: DefaultMaxAttempts},
			want: deadLetter, wantMsg: "gave up after 5 attempts: 500 internal"},
		{name: "overloaded waits its own short step", f: failure{class: ClassOverloaded, err: overloaded, overloadedSince: now, step: 100 * time.Millisecond}, limited: true,
			want: retryAt, wantAt: 100 * time.Millisecond},
		{name: "overloaded under the stage's hold retries through it", f: failure{class: ClassOverloaded, err: overloaded, overloadedSince: now.Add(-time.Second), overloadHeld: true, step: 100 * time.Millisecond}, limited: true,
			want: retryAt, wantAt: 0},
		{name: "overloaded past the attempt budget still retries", f: failure{class: ClassOverloaded, err: overloaded, attempts: DefaultMaxAttempts, overloadedSince: now.Add(-time.Minute), step: time.Second},
			want: retryAt, wantAt: time.Second},
		{name: "overloaded for 4m59s waits", f: failure{class: ClassOverloaded, err: overloaded, overloadedSince: now.Add(-299 * time.Second), overloadHeld: true}, limited: true,
			want: retryAt, wantAt: 0},
		{name: "overloaded for 5m parks, items queued", f: failure{class: ClassOverloaded, err: overloaded, overloadedSince: now.Add(-5 * time.Minute), overloadHeld: true}, limited: true,
			want: park, wantMsg: "api: the server has answered only \"overloaded\" for 5m0s since " + now.Add(-5*time.Minute).Local().Format(time.TimeOnly) + " (limit 5m0s; last: 503 UNAVAILABLE"},
		{name: "a shed waits its step, never dead-lettered past the budget", f: failure{class: ClassShed, err: Shed(errors.New("503 flex"), TierFlex, 0), attempts: DefaultMaxAttempts, step: 2 * time.Second}, limited: true,
			want: retryAt, wantAt: 2 * time.Second},
		{name: "a shed asking for longer waits that", f: failure{class: ClassShed, err: Shed(refused(0, false), TierFlex, 7*time.Second), step: time.Second}, limited: true,
			want: retryAt, wantAt: 7 * time.Second},
		{name: "a shed waits no longer than the stage says", f: failure{class: ClassShed, err: &ShedError{Err: errors.New("503"), Tier: TierFlex, RetryAfter: 9 * time.Second, WaitAtMost: 3 * time.Second}, step: 5 * time.Second},
			want: retryAt, wantAt: 3 * time.Second},
		{name: "a shed item moved to another tier is called at once", f: failure{class: ClassShed, err: &ShedError{Err: errors.New("503"), Tier: TierFlex, Moved: true}, step: 5 * time.Second},
			want: retryAt, wantAt: 0},
		{name: "permanent dead-letters at once", f: failure{class: ClassPermanent, err: Permanentf("empty text"), attempts: 1},
			want: deadLetter, wantMsg: "empty text"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sc := cfg(tc.limited)
			if tc.maxRefused != 0 {
				sc.MaxRefused = tc.maxRefused
			}
			if tc.holding {
				sc.Limiter = holdingLimiter{}
			}
			a := decide(tc.f, sc, now)
			if a.kind != tc.want {
				t.Fatalf("decide = %v (%q), want %v", a.kind, a.text(), tc.want)
			}
			if a.kind == retryAt && a.at.Sub(now) != tc.wantAt {
				t.Errorf("retry after %s, want %s", a.at.Sub(now), tc.wantAt)
			}
			if a.kind != retryAt && !a.at.IsZero() {
				t.Errorf("%v with an instant %v", a.kind, a.at)
			}
			if text := a.text(); !strings.Contains(text, tc.wantMsg) || (a.kind == halt && text != tc.wantMsg) {
				t.Errorf("message = %q, want it to contain %q", text, tc.wantMsg)
			}
		})
	}
}

func TestDecide_MaxOutageBelowFirstContactLimit(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	sc := &StageConfig{Stage: namedStage("api"), MaxOutage: 10 * time.Second}
	sc.setDefaults()
	f := failure{class: ClassUnavailable, err: Unavailable(errors.New("refused")), outageSince: now.Add(-10 * time.Second)}
	if a := decide(f, sc, now); a.kind != park || !strings.Contains(a.text(), "limit 10s;") {
		t.Fatalf("decide = %v %q, want a park at the configured 10s", a.kind, a.text())
	}
}

func TestSpendsAttempt(t *testing.T) {
	for c, want := range map[Class]bool{
		ClassTransient: true, ClassPermanent: true,
		ClassRateLimited: false, ClassUnavailable: false, ClassOverloaded: false, ClassCanceled: false, ClassFatal: false, ClassShed: false,
	} {
		if got := spendsAttempt(c); got != want {
			t.Errorf("spendsAttempt(%s) = %v, want %v", c, got, want)
		}
	}
}

// TestEndpointHealth: any answer ends an outage, so minutes of 429s
// followed by one refused connection start a fresh outage clock; only a
// success ends a run of refusals, and its clock.
func TestEndpointHealth(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var h endpointHealth
	if _, _, since, contacted := h.failed(ClassUnavailable, t0); !since.Equal(t0) || contacted {
		t.Fatalf("first unreachable call: since %v contacted %v", since, contacted)
	}
	if _, _, since, _ := h.failed(ClassUnavailable, t0.Add(time.Second)); !since.Equal(t0) {
		t.Fatalf("outage clock moved to %v", since)
	}
	for s := 2; s < 600; s++ {
		h.failed(ClassRateLimited, t0.Add(time.Duration(s)*time.Second))
	}
	refusedInARow, refusedSince, since, contacted := h.failed(ClassUnavailable, t0.Add(10*time.Minute))
	if !since.Equal(t0.Add(10*time.Minute)) || !contacted || refusedInARow != 598 || !refusedSince.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("after 10 min of 429s: since %v contacted %v refused %d since %v", since, contacted, refusedInARow, refusedSince)
	}
	h.succeeded()
	if refusedInARow, refusedSince, since, _ := h.failed(ClassCanceled, t0); refusedInARow != 0 || !since.IsZero() || !refusedSince.IsZero() {
		t.Fatalf("after a success: refused %d since %v, outage since %v", refusedInARow, refusedSince, since)
	}
}

// TestEndpointHealth_warnRefused: the warning that refusals last comes
// once per run of them, after the given time and minRefusedToPark
// refusals; a success starts the count again.
func TestEndpointHealth_warnRefused(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var h endpointHealth
	refuse := func(at time.Duration) { h.failed(ClassRateLimited, t0.Add(at)) }
	refuse(0)
	refuse(3 * time.Minute)
	if h.warnRefused(t0.Add(3*time.Minute), time.Minute) {
		t.Fatal("warned after 2 refusals")
	}
	for i := range minRefusedToPark {
		refuse(3*time.Minute + time.Duration(i)*time.Second)
	}
	if h.warnRefused(t0.Add(30*time.Second), time.Minute) {
		t.Fatal("warned before the time")
	}
	if !h.warnRefused(t0.Add(3*time.Minute), time.Minute) {
		t.Fatal("no warning after 3 minutes of refusals")
	}
	if h.warnRefused(t0.Add(4*time.Minute), time.Minute) {
		t.Fatal("warned twice for one run of refusals")
	}
	h.succeeded()
	for i := range minRefusedToPark {
		refuse(5*time.Minute + time.Duration(i)*time.Second)
	}
	if !h.warnRefused(t0.Add(7*time.Minute), time.Minute) {
		t.Fatal("no warning for the next run of refusals")
	}
}

// sizedLimiter is a nopLimiter that knows the most calls it lets in
// flight (PoolSizer).
type sizedLimiter struct {
	nopLimiter
	most int
}

func (l sizedLimiter) MostInFlight() int { return l.most }

// A stage left without Workers gets as many as its limiter can ever let be
// in flight, so that no call the limit admits waits for a worker; Workers
// given win, and a limiter that cannot say gets DefaultWorkers. The 429s
// in a row that park the stage grow with a pool past 100: a pool's calls
// in flight can all meet one spent window.
func TestStageConfig_workersFromLimiter(t *testing.T) {
	tests := []struct {
		name           string
		sc             StageConfig
		workers        int
		maxRateLimited int
	}{
		{"the limiter's most in flight", StageConfig{Limiter: sizedLimiter{most: 512}}, 512, 612},
		{"workers given", StageConfig{Limiter: sizedLimiter{most: 512}, Workers: 16}, 16, DefaultMaxRateLimited},
		{"a pool of 64", StageConfig{Limiter: sizedLimiter{most: 64}}, 64, DefaultMaxRateLimited},
		{"refusals in a row given", StageConfig{Limiter: sizedLimiter{most: 512}, MaxRateLimited: 50}, 512, 50},
		{"a limiter that cannot say", StageConfig{Limiter: nopLimiter{}}, DefaultWorkers, DefaultMaxRateLimited},
		{"no limiter", StageConfig{}, DefaultWorkers, DefaultMaxRateLimited},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := tt.sc
			sc.Stage = namedStage("api")
			sc.setDefaults()
			if sc.Workers != tt.workers || sc.MaxRateLimited != tt.maxRateLimited {
				t.Errorf("Workers = %d, MaxRateLimited = %d; want %d and %d", sc.Workers, sc.MaxRateLimited, tt.workers, tt.maxRateLimited)
			}
		})
	}
}

// text is what a reads to the user: its reason's message, or its own.
func (a action) text() string {
	if a.reason != nil {
		return a.reason.Error()
	}
	return a.message
}
