package geminisim

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Defaults for the zero fields of Config.
const (
	DefaultAPIKey = "sim-key"
	DefaultWindow = time.Minute
	DefaultDay    = 24 * time.Hour
)

// DefaultModels are the models a zero Config knows. Do not modify it.
var DefaultModels = []string{"gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-2.5-pro", "gemini-2.0-flash"}

// maxBody bounds a request body (the real API's inline limit is 20 MB).
const maxBody = 20 << 20

// Config configures a Server. The zero value is a usable simulator: key
// "sim-key", the DefaultModels, no quota, no latency, no faults.
type Config struct {
	// APIKey is the only key accepted (X-Goog-Api-Key header or ?key=).
	// Default DefaultAPIKey.
	APIKey string
	// Models are the model ids served (without "models/"). Default
	// DefaultModels.
	Models []string
	// RPM and TPM bound the requests and the estimated input tokens
	// admitted per Window, RPD the requests per Day. Each quota applies per
	// model, as the real API's do. 0 means unlimited.
	RPM, TPM, RPD int
	// QuotaModel is how RPM and TPM are counted: SlidingLog (default),
	// FixedWindow or TokenBucket. RPD is always a sliding log over Day.
	QuotaModel QuotaModel
	// BurstRequests and BurstTokens are a TokenBucket's capacities (the
	// most requests and tokens admitted at once after a pause); 0 means
	// one Window's RPM or TPM. The schedule scales them with the rates.
	BurstRequests, BurstTokens int
	// CountRefused charges refused calls against RPM and TPM too, as some
	// quota systems do: a client that keeps knocking keeps the door shut.
	CountRefused bool
	// Window is the RPM/TPM window; default DefaultWindow (1m). Tests
	// shorten it; the 429 quotaId still says PerMinute (its quotaValue is
	// restated per real minute, see Server.asNamed).
	Window time.Duration
	// Day is the RPD window; default DefaultDay (24h). It slides like
	// Window rather than resetting at midnight Pacific.
	Day time.Duration
	// Schedule makes the quota live: from each step's At after the server
	// started, RPM and TPM are Percent% of the values above. Nil keeps
	// 100%. See ParseSchedule.
	Schedule []Step
	// RetryInfo is what a 429 says about when to retry: RetryExact
	// (default), RetryCoarse or RetryAbsent.
	RetryInfo RetryInfoMode
	// QuotaFailure is which QuotaFailure detail a 429 carries:
	// QuotaFailureFull (default), QuotaFailureNoValue or
	// QuotaFailureAbsent.
	QuotaFailure QuotaFailureMode
	// Latency delays every request that passed the quota check.
	Latency Latency
	// MaxConcurrent, if > 0, refuses a generateContent request that
	// arrives while MaxConcurrent are already in flight (before the quota
	// check: such calls consume no quota), the way ConcurrencyRefusal
	// says.
	MaxConcurrent int
	// ConcurrencyRefusal is the answer past MaxConcurrent: RefuseOverloaded
	// (default, 503 "The model is overloaded") or RefuseBare429 (429
	// "Resource has been exhausted (e.g. check quota)." with no details).
	ConcurrencyRefusal ConcurrencyRefusal
	// Overload answers 503 "The model is overloaded" to every call during
	// bursts (before the quota check: such calls consume no quota).
	Overload Overload
	// Credits, if > 0, is how many calls the account's prepayment
	// credits pay for: once that many were admitted, every
	// generateContent call is answered 429 RESOURCE_EXHAUSTED "Your
	// prepayment credits are depleted…" with no details, as the API
	// answers when an account's credits run out (before the quota check:
	// such calls consume no quota). 0: the credits never run out.
	Credits int64
	// Faults are the injected failure rates.
	Faults Faults
	// Seed makes faults, jitter and response ids repeatable: the same seed
	// and the same sequence of calls per item give the same answers,
	// whatever the interleaving of items.
	Seed int64
	// Now is the clock used for quotas, the schedule and the timeline.
	// Default time.Now. Latency always uses real timers.
	Now func() time.Time
	// Batch configures the Batch API surface (batch.go).
	Batch BatchConfig
	// Tiers configures the service tiers (tier.go).
	Tiers TierConfig
	// Cache configures implicit caching (cache.go).
	Cache CacheConfig
}

// withDefaults fills in the zero fields.
func (cfg Config) withDefaults() Config {
	if cfg.APIKey == "" {
		cfg.APIKey = DefaultAPIKey
	}
	if len(cfg.Models) == 0 {
		cfg.Models = DefaultModels
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Day <= 0 {
		cfg.Day = DefaultDay
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Cache.MinTokens <= 0 {
		cfg.Cache.MinTokens = DefaultCacheMinTokens
	}
	if cfg.Cache.TTL <= 0 {
		cfg.Cache.TTL = DefaultCacheTTL
	}
	cfg.Models = slices.Clone(cfg.Models)
	cfg.Schedule = slices.Clone(cfg.Schedule)
	slices.SortStableFunc(cfg.Schedule, func(a, b Step) int { return cmp.Compare(a.At, b.At) })
	return cfg
}

// Validate reports a field that names no known mode, so that a typo on a
// command line is an error rather than the default.
func (cfg Config) Validate() error {
	if cfg.QuotaModel != "" && !slices.Contains(QuotaModels, cfg.QuotaModel) {
		return fmt.Errorf("quota model %q: want one of %v", cfg.QuotaModel, QuotaModels)
	}
	if cfg.RetryInfo != "" && !slices.Contains(RetryInfoModes, cfg.RetryInfo) {
		return fmt.Errorf("retry info %q: want one of %v", cfg.RetryInfo, RetryInfoModes)
	}
	if cfg.QuotaFailure != "" && !slices.Contains(QuotaFailureModes, cfg.QuotaFailure) {
		return fmt.Errorf("quota failure %q: want one of %v", cfg.QuotaFailure, QuotaFailureModes)
	}
	if cfg.ConcurrencyRefusal != "" && !slices.Contains(ConcurrencyRefusals, cfg.ConcurrencyRefusal) {
		return fmt.Errorf("concurrency refusal %q: want one of %v", cfg.ConcurrencyRefusal, ConcurrencyRefusals)
	}
	if err := cfg.Tiers.validate(); err != nil {
		return err
	}
	if cfg.Credits < 0 {
		return fmt.Errorf("credits %d: want 0 (never run out) or more", cfg.Credits)
	}
	if o := cfg.Overload; o.For < 0 || o.Every < 0 || (o.For > 0 && o.Every <= o.For) {
		return fmt.Errorf("overload bursts of %s every %s: want 0 < for < every", o.For, o.Every)
	}
	return nil
}

// RetryInfoMode is what a 429 says about when to retry.
type RetryInfoMode string

const (
	// RetryExact sends the exact time until the request would be admitted
	// (Quota.Wait), to the nanosecond.
	RetryExact RetryInfoMode = "exact"
	// RetryCoarse sends whole seconds, often later than needed: the exact
	// time rounded up, plus a draw of up to half a Window, kept under one
	// Window. Real Gemini sends 26-59 s for a per-minute quota. A shortened
	// Window keeps whole seconds (1 or 2 s for a 2 s Window), what a client
	// reads as rounded.
	RetryCoarse RetryInfoMode = "coarse"
	// RetryAbsent sends no RetryInfo, as proxies and Vertex do.
	RetryAbsent RetryInfoMode = "absent"
)

// RetryInfoModes lists the RetryInfo modes.
var RetryInfoModes = []RetryInfoMode{RetryExact, RetryCoarse, RetryAbsent}

// QuotaFailureMode is which QuotaFailure detail a 429 carries.
type QuotaFailureMode string

const (
	// QuotaFailureFull lists each exceeded quota with its quotaMetric,
	// quotaId, quotaDimensions and quotaValue (the effective limit).
	QuotaFailureFull QuotaFailureMode = "full"
	// QuotaFailureNoValue is Full without quotaValue.
	QuotaFailureNoValue QuotaFailureMode = "no-value"
	// QuotaFailureAbsent sends no QuotaFailure and Vertex's message
	// "Resource exhausted, please try again later.": no quotaId at all.
	QuotaFailureAbsent QuotaFailureMode = "absent"
)

// QuotaFailureModes lists the QuotaFailure modes.
var QuotaFailureModes = []QuotaFailureMode{QuotaFailureFull, QuotaFailureNoValue, QuotaFailureAbsent}

// ConcurrencyRefusal is how the server refuses a call past MaxConcurrent.
type ConcurrencyRefusal string

const (
	// RefuseOverloaded answers 503 UNAVAILABLE "The model is overloaded".
	RefuseOverloaded ConcurrencyRefusal = "503"
	// RefuseBare429 answers 429 RESOURCE_EXHAUSTED "Resource has been
	// exhausted (e.g. check quota)." with no details: no quotaId, no
	// RetryInfo.
	RefuseBare429 ConcurrencyRefusal = "429"
)

// ConcurrencyRefusals lists the answers past MaxConcurrent.
var ConcurrencyRefusals = []ConcurrencyRefusal{RefuseOverloaded, RefuseBare429}

// Overload is a series of 503 bursts: from the server's start, every call
// arriving in [k×Every, k×Every+For) for k ≥ 1 is answered 503 "The model
// is overloaded". Zero values: no bursts.
type Overload struct {
	Every, For time.Duration
}

// Active reports whether elapsed time e since the start is in a burst,
// and when that burst ends.
func (o Overload) Active(e time.Duration) (in bool, end time.Duration) {
	if o.Every <= 0 || o.For <= 0 || e < o.Every {
		return false, 0
	}
	k := e / o.Every
	if e-k*o.Every < o.For {
		return true, k*o.Every + o.For
	}
	return false, 0
}

// Latency is the service time of an admitted request:
//
//	(Base + PerToken×promptTokens) × tail + jitter + PerInFlight×(others in flight)
//
// capped at Max when Max > 0. jitter is a uniform draw in [0, Jitter];
// tail is 1, or with Tail = α > 0 a Pareto draw U^(-1/α) ≥ 1 (α = 1.2:
// median ×1.8, one call in a hundred ×46: the heavy tail of thinking
// models). Draws are deterministic per (Seed, item, call number). All
// zero: no delay.
type Latency struct {
	Base     time.Duration
	PerToken time.Duration // per estimated prompt token
	Jitter   time.Duration
	// Tail is the Pareto shape of the tail (0: no tail). Smaller is heavier.
	Tail float64
	// Max caps the latency (0: no cap).
	Max time.Duration
	// PerInFlight is added per other request in flight at admission:
	// latency that grows with load.
	PerInFlight time.Duration
}

// Mean is the expected latency of a request of promptTokens tokens with
// inFlight other requests in flight (the cap applied to the mean, not
// to each draw, so slightly above the true mean when Max is set).
func (l Latency) Mean(promptTokens, inFlight int) time.Duration {
	base := float64(l.Base + l.PerToken*time.Duration(promptTokens))
	if l.Tail > 1 {
		base *= l.Tail / (l.Tail - 1)
	}
	d := time.Duration(base) + l.Jitter/2 + l.PerInFlight*time.Duration(inFlight)
	if l.Max > 0 {
		d = min(d, l.Max)
	}
	return d
}

// Faults are probabilities in [0, 1] that an admitted call fails in a given
// way. One uniform draw per call, deterministic per (Seed, item hash,
// number of calls of that item admitted before), picks at most one fault,
// tried in field order; if the rates sum above 1 the later ones get what is
// left.
type Faults struct {
	Err500         float64 // 500 INTERNAL
	Err503         float64 // 503 UNAVAILABLE, "The model is overloaded..."
	Hang           float64 // no answer until the client gives up or Close
	Malformed      float64 // 200 whose JSON body is cut in half
	BlockPrompt    float64 // 200, promptFeedback.blockReason SAFETY, no candidates
	BlockCandidate float64 // 200, candidate finishReason SAFETY without text
	MaxTokens      float64 // 200, candidate text is cut-off JSON, finishReason MAX_TOKENS
}
