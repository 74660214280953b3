package stages

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// Service tiers an LLM stage can ask for (TierConfig.Tier).
const (
	// TierStandard is the default: full price, seconds. Requests carry
	// no serviceTier, as before tiers existed.
	TierStandard = "standard"
	// TierFlex is half price, best-effort, minutes: a refused call waits
	// and asks flex again, for as long as it takes. With a FlexDeadline
	// it is TierAuto with that deadline: flex first, standard for what
	// flex has not answered by then.
	TierFlex = "flex"
	// TierPriority is a premium for low latency; the API may serve a
	// call as standard instead (and bill it so).
	TierPriority = "priority"
	// TierAuto asks flex first; an item flex has not answered within
	// TierConfig.FlexDeadline of its first flex call goes to standard at
	// its next call (a flex call in flight then is let finish, not
	// abandoned: an item is paid once).
	TierAuto = "auto"
)

// TierNames lists the tiers a stage can ask for, for help and checks.
var TierNames = []string{TierStandard, TierFlex, TierPriority, TierAuto}

// DefaultFlexTimeout bounds one flex call: the tier's latency target is
// 1-15 minutes, well past a standard call's timeout.
const DefaultFlexTimeout = 15 * time.Minute

// FlexCeiling is the most calls in flight a flex (or auto) stage's
// limiter allows when none is configured: a flex call takes minutes, so
// the default ceiling (hundreds) would admit a few calls a second. At
// 5,000 in flight a 5-minute call admits under 17 a second, and the
// client holds each in about 60 KB of heap and stack, three goroutines
// (e2e's BenchmarkFlexInFlight).
const FlexCeiling = 5000

// DefaultFlexDeadline is auto mode's deadline when none is given.
const DefaultFlexDeadline = 30 * time.Minute

// TierConfig says which service tier an LLM stage's calls ask for. The
// zero value is standard.
type TierConfig struct {
	// Tier is one of TierNames; "" is TierStandard.
	Tier string
	// FlexDeadline, with TierAuto or TierFlex, is how long an item stays
	// on flex, measured from its first flex call in this process (a
	// resumed run starts each item's time again). 0 means
	// DefaultFlexDeadline with TierAuto, and no deadline with TierFlex
	// (flex only). It must be 0 with any other tier.
	FlexDeadline time.Duration
	// FlexTimeout bounds one flex call; 0 means DefaultFlexTimeout.
	FlexTimeout time.Duration
	// Now is the clock of FlexDeadline; nil means time.Now.
	Now func() time.Time
}

// CheckTier reports a tier name or deadline a stage cannot use, in words
// naming what to write instead.
func CheckTier(tier string, deadline time.Duration) error {
	if tier != "" && !slices.Contains(TierNames, tier) {
		return fmt.Errorf("tier %q: use one of %s", tier, strings.Join(TierNames, ", "))
	}
	if deadline < 0 {
		return fmt.Errorf("flex deadline %s: use a positive duration", deadline)
	}
	if deadline > 0 && tier != TierAuto && tier != TierFlex {
		return fmt.Errorf("a flex deadline of %s needs tier flex or auto (flex first, standard after the deadline), not %q", deadline, orDefault(tier, TierStandard))
	}
	return nil
}

// tierPolicy picks each call's tier and reads what served it. Safe for
// concurrent use.
type tierPolicy struct {
	tier     string
	deadline time.Duration
	timeout  time.Duration // a flex call's
	now      func() time.Time

	mu    sync.Mutex
	since map[string]time.Time // auto: item -> its first flex call
	// sweepAt is the size of since at which entries no call will need
	// are dropped (see remember).
	sweepAt int
}

// forgetAfter is how long past its deadline an auto item's first flex
// call is remembered when no answer came to forget it: an item that
// left the run unanswered (a dead letter, a run that stopped) would
// otherwise stay for the life of the process. One still retrying on
// standard after that long starts a new flex deadline, at worst.
const forgetAfter = time.Hour

func newTierPolicy(who string, cfg TierConfig) (*tierPolicy, error) {
	if err := CheckTier(cfg.Tier, cfg.FlexDeadline); err != nil {
		return nil, fmt.Errorf("%s: %w", who, err)
	}
	if cfg.FlexTimeout < 0 {
		return nil, fmt.Errorf("%s: flex timeout %s: use a positive duration", who, cfg.FlexTimeout)
	}
	p := &tierPolicy{tier: orDefault(cfg.Tier, TierStandard), deadline: cfg.FlexDeadline, timeout: cfg.FlexTimeout, now: cfg.Now,
		since: make(map[string]time.Time)}
	if p.tier == TierFlex && p.deadline > 0 {
		// Flex with a deadline is auto: one behaviour, one code path.
		p.tier = TierAuto
	}
	if p.deadline == 0 {
		p.deadline = DefaultFlexDeadline
	}
	if p.timeout == 0 {
		p.timeout = DefaultFlexTimeout
	}
	if p.now == nil {
		p.now = time.Now
	}
	return p, nil
}

// tierCall is one call's tier: what it asks for and how long it may take.
type tierCall struct {
	ask     genai.ServiceTier // "" for standard: the field is left out
	timeout time.Duration
	auto    bool // auto mode chose it
}

// next is the tier of item id's next call, standard's timeout given. A
// nil policy is standard.
func (p *tierPolicy) next(id string, standard time.Duration) tierCall {
	if p == nil {
		return tierCall{timeout: standard}
	}
	switch p.tier {
	case TierFlex:
		return tierCall{ask: genai.ServiceTierFlex, timeout: p.timeout}
	case TierPriority:
		return tierCall{ask: genai.ServiceTierPriority, timeout: standard}
	case TierAuto:
	default:
		return tierCall{timeout: standard}
	}
	now := p.now()
	p.mu.Lock()
	first, ok := p.since[id]
	if !ok {
		first = now
		p.remember(id, now)
	}
	p.mu.Unlock()
	left := p.deadline - now.Sub(first)
	if left <= 0 {
		return tierCall{timeout: standard, auto: true}
	}
	// A flex call in flight at the deadline is not given up: an
	// abandoned call may be billed all the same, and then the item would
	// be paid twice. The deadline decides the tier of the calls after a
	// shed or a timeout.
	return tierCall{ask: genai.ServiceTierFlex, timeout: p.timeout, auto: true}
}

// remember records id's first flex call at now, and when since has grown
// to sweepAt drops the entries older than the deadline and forgetAfter,
// so that the map stays as large as the items in play, amortized. p.mu
// is held.
func (p *tierPolicy) remember(id string, now time.Time) {
	p.since[id] = now
	if len(p.since) < p.sweepAt {
		return
	}
	for k, first := range p.since {
		if now.Sub(first) > p.deadline+forgetAfter {
			delete(p.since, k)
		}
	}
	p.sweepAt = max(1024, 2*len(p.since))
}

// served stamps a billed usage with the tier that served it, and forgets
// item id's flex time once the tier answered (a usable answer or not,
// err being the reading of it) or the item failed for good.
func (p *tierPolicy) served(id string, resp *genai.GenerateContentResponse, tc tierCall, u pipeline.Usage, err error) pipeline.Usage {
	if u != (pipeline.Usage{}) {
		// Standard stays unnamed: outputs read as before tiers.
		if u.Tier = servedTier(resp, tc); u.Tier == pipeline.TierStandard {
			u.Tier = ""
		}
	}
	if p != nil && p.tier == TierAuto && (err == nil || u != (pipeline.Usage{}) || pipeline.ClassOf(context.Background(), err) == pipeline.ClassPermanent) {
		p.mu.Lock()
		delete(p.since, id)
		p.mu.Unlock()
	}
	return u
}

// refused turns a classified error of a flex call into the tier's "not
// now" when it is one: a 429 (not a daily quota, not billing), a 503, or
// no answer in time while the run goes on. Other errors pass unchanged.
func (p *tierPolicy) refused(ctx context.Context, id string, tc tierCall, err error) error {
	if p == nil || tc.ask != genai.ServiceTierFlex || err == nil || ctx.Err() != nil {
		return err
	}
	var (
		rl *pipeline.RateLimitedError
		ol *pipeline.OverloadedError
		he *pipeline.HaltError
	)
	var (
		ae         genai.APIError
		retryAfter time.Duration
	)
	isAPI := errors.As(err, &ae)
	switch {
	case errors.As(err, &he):
		return err
	case errors.As(err, &rl):
		if _, _, _, quotas := detailsOf(ae.Details); rl.Daily || (isAPI && len(quotas) > 0) {
			// A 429 naming a quota is the project's quota, which flex
			// calls count against too: the limiter must learn it, and a
			// refusal that never clears must stop the run.
			return err
		}
		retryAfter = rl.RetryAfter
	case errors.As(err, &ol), errors.Is(err, context.DeadlineExceeded):
	case isAPI && (ae.Code == http.StatusGatewayTimeout || ae.Code == http.StatusRequestTimeout || strings.EqualFold(strings.TrimSpace(ae.Status), "DEADLINE_EXCEEDED")):
		// The server's own deadline (genai sends X-Server-Timeout with a
		// flex call): no answer in time, as the client's timeout is.
	default:
		return err
	}
	se := &pipeline.ShedError{Err: err, Tier: pipeline.TierFlex, RetryAfter: retryAfter}
	if tc.auto {
		// What is left of the item's flex time bounds its wait; past
		// it the next call is on standard, at once.
		left := p.left(id)
		se.WaitAtMost = max(left, time.Nanosecond)
		se.Moved = left <= 0
	}
	return se
}

// left is item id's time left on flex (auto mode).
func (p *tierPolicy) left(id string) time.Duration {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	first, ok := p.since[id]
	if !ok {
		return p.deadline
	}
	return p.deadline - now.Sub(first)
}

// servedTier is the tier that served resp, asked as tc: the API's
// x-gemini-service-tier header, else the tier asked (a proxy may drop
// the header).
func servedTier(resp *genai.GenerateContentResponse, tc tierCall) string {
	if resp != nil && resp.SDKHTTPResponse != nil {
		switch v := strings.ToLower(strings.TrimSpace(resp.SDKHTTPResponse.Headers.Get(TierHeader))); v {
		case TierStandard, TierFlex, TierPriority:
			return v
		}
	}
	switch tc.ask {
	case genai.ServiceTierFlex:
		return pipeline.TierFlex
	case genai.ServiceTierPriority:
		return pipeline.TierPriority
	}
	return pipeline.TierStandard
}

// TierHeader is the response header in which the API says which tier
// served a call.
const TierHeader = "x-gemini-service-tier"
