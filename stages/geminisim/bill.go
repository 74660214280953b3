// This file holds what the simulator bills a served call: Google's list
// prices as the simulator's own table, kept apart from the client's
// (stages/price.go) so that a test comparing the two bills compares two
// independent sums.

package geminisim

import (
	"math"
	"strings"
)

// PricesAsOf is the day modelPrices were read from the pricing page
// (https://ai.google.dev/gemini-api/docs/pricing, paid tier, text, prompts
// up to 200k tokens).
const PricesAsOf = "2026-12-01"

// Tier price factors, relative to standard, as of PricesAsOf: flex is
// billed at half price; priority at 75-100% more, taken as +80%.
const (
	FlexFactor     = 0.5
	PriorityFactor = 1.8
)

// modelPrices are USD per million tokens: input, implicitly cached input,
// output. The first prefix that matches wins. Cached input is a tenth of
// input on 2.5 models and a quarter on 2.0 models.
var modelPrices = []struct {
	prefix          string
	in, cached, out float64
}{
	{"gemini-2.5-flash-lite", 0.10, 0.01, 0.40},
	{"gemini-2.5-flash", 0.30, 0.03, 2.50},
	{"gemini-2.5-pro", 1.25, 0.125, 10.00},
	{"gemini-2.0-flash-lite", 0.075, 0.01875, 0.30},
	{"gemini-2.0-flash", 0.10, 0.025, 0.40},
}

// BillNanoUSD is what the simulator bills one served call of model on tier
// t with prompt input tokens (cached of them implicitly cached) and out
// output tokens, in billionths of a dollar rounded to the nearest. An
// unknown model is free.
func BillNanoUSD(model string, t Tier, prompt, cached, out int) int64 {
	model = strings.TrimPrefix(model, "models/")
	for _, p := range modelPrices {
		if !strings.HasPrefix(model, p.prefix) {
			continue
		}
		f := 1.0
		switch t {
		case TierFlex:
			f = FlexFactor
		case TierPriority:
			f = PriorityFactor
		}
		usd := (float64(prompt-cached)*p.in + float64(cached)*p.cached + float64(out)*p.out) * f / 1e6
		return int64(math.Round(usd * 1e9))
	}
	return 0
}
