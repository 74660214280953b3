package pipeline

// Price is what one stage's calls cost, in USD per million tokens. The
// zero Price means the stage's calls cost nothing (sanitize, aggregate):
// no budget applies to them.
type Price struct {
	// InputPerM is USD per million input (prompt) tokens.
	InputPerM float64 `json:"input_per_m"`
	// OutputPerM is USD per million output tokens, thinking included.
	OutputPerM float64 `json:"output_per_m"`
	// CachedInputPerM is USD per million implicitly cached input tokens
	// (Usage.CachedTokens); 0 means InputPerM (no discount known).
	CachedInputPerM float64 `json:"cached_input_per_m,omitempty"`
	// FlexFactor and PriorityFactor scale the whole price of a call served
	// by the flex or priority tier (Usage.Tier); 0 means 1.
	FlexFactor     float64 `json:"flex_factor,omitempty"`
	PriorityFactor float64 `json:"priority_factor,omitempty"`
}

// IsZero reports whether the stage's calls are free.
func (p Price) IsZero() bool { return p.InputPerM == 0 && p.OutputPerM == 0 }

// Cost is u priced, in USD: its cached input at the cached rate, the whole
// at its tier's factor.
func (p Price) Cost(u Usage) float64 {
	cached := p.CachedInputPerM
	if cached == 0 {
		cached = p.InputPerM
	}
	usd := float64(u.PromptTokens-u.CachedTokens)*p.InputPerM/1e6 + float64(u.CandidateTokens)*p.OutputPerM/1e6
	if u.CachedTokens != 0 {
		usd += float64(u.CachedTokens) * cached / 1e6
	}
	if f := p.TierFactor(u.Tier); f != 1 {
		usd *= f
	}
	return usd
}

// TierFactor is what a call served by tier costs relative to standard.
func (p Price) TierFactor(tier string) float64 {
	f := 0.0
	switch tier {
	case TierFlex:
		f = p.FlexFactor
	case TierPriority:
		f = p.PriorityFactor
	}
	if f == 0 {
		return 1
	}
	return f
}

// TierAsker is an optional Stage interface naming the service tier its
// calls ask for (TierStandard, TierFlex, TierPriority, or "auto": flex
// first, standard after a deadline).
type TierAsker interface {
	AskedTier() string
}

// reserveTier is the tier a budget reserves stage's calls at: the
// dearest that may serve them. Only a priority ask can be billed above
// standard; flex and auto may fall back to standard, never above it.
func reserveTier(stage Stage) string {
	if a, ok := stage.(TierAsker); ok && a.AskedTier() == TierPriority {
		return TierPriority
	}
	return TierStandard
}

// nanos is u priced in billionths of a dollar: sums of them are exact.
func (p Price) nanos(u Usage) int64 { return toNanos(p.Cost(u)) }

// calls is what res's requests were billed, one by one: each at the tier
// that served it.
func (p Price) calls(res Result) []Usage {
	if len(res.PerCall) > 0 {
		return res.PerCall
	}
	return []Usage{res.Usage}
}
