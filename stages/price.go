package stages

import (
	"fmt"
	"math"
	"strings"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// PricesAsOf is the day listPrices were last read from PriceSource.
const PricesAsOf = "2026-12-01"

// PriceSource is where listPrices come from: Google's published paid-tier
// prices for standard (online) calls, text input, prompts up to 200k
// tokens. Prices change: give a stage its own price (PriceConfig) when
// they have.
const PriceSource = "https://ai.google.dev/gemini-api/docs/pricing"

// BatchPriceFactor is what a Batch API call costs relative to the same
// call online: Google bills batch requests at 50%.
const BatchPriceFactor = 0.5

// Service tier prices relative to standard, as of PricesAsOf (the flex
// and priority pages of PriceSource): flex is billed at half price.
// Priority is "75-100% more" with no single figure published: +80% is
// our assumption, dated like the list; a bill that differs says which.
const (
	FlexPriceFactor     = 0.5
	PriorityPriceFactor = 1.8
)

// listPrices are USD per million tokens (input, output, thinking
// included) for standard online calls, as of PricesAsOf, and the share
// of the input price implicitly cached input tokens are billed at (a
// tenth on 2.5 models, a quarter on 2.0). The first prefix that matches a
// model wins, so longer names come first.
var listPrices = []struct {
	prefix  string
	in, out float64
	cached  float64
}{
	{"gemini-2.5-flash-lite", 0.10, 0.40, 0.1},
	{"gemini-2.5-flash", 0.30, 2.50, 0.1},
	{"gemini-2.5-pro", 1.25, 10.00, 0.1},
	{"gemini-2.0-flash-lite", 0.075, 0.30, 0.25},
	{"gemini-2.0-flash", 0.10, 0.40, 0.25},
}

// cachedShare is the share of the input price that model's implicitly
// cached input is billed at: 1 (no discount known) for a model not listed.
func cachedShare(model string) float64 {
	model = strings.TrimPrefix(model, "models/")
	for _, p := range listPrices {
		if strings.HasPrefix(model, p.prefix) {
			return p.cached
		}
	}
	return 1
}

// Price returns the list price of model in USD per million input and
// output tokens for online calls, or zeros when the model is unknown
// (give the stage its price then: PriceConfig).
func Price(model string) (in, out float64) {
	model = strings.TrimPrefix(model, "models/")
	for _, p := range listPrices {
		if strings.HasPrefix(model, p.prefix) {
			return p.in, p.out
		}
	}
	return 0, 0
}

// PriceConfig is how one stage's calls are priced.
type PriceConfig struct {
	// Model is the model called.
	Model string
	// InputPerM and OutputPerM, when set, override the list price (USD
	// per million tokens, online); nil means the list price.
	InputPerM, OutputPerM *float64
	// Batch prices the calls at the Batch API's rate (BatchPriceFactor
	// of the online price, overrides included).
	Batch bool
}

// NoPriceError is a model the price table does not know, for a stage
// whose calls must be priced (a budget is kept) and that was given no
// price of its own.
type NoPriceError struct{ Model string }

func (e *NoPriceError) Error() string { return e.Text("give the stage its price") }

// Text is the error's message with remedy as how to give the price.
func (e *NoPriceError) Text(remedy string) string {
	return fmt.Sprintf("no price known for model %s (the table is of %s, from %s): %s in USD per million input and output tokens", e.Model, PricesAsOf, PriceSource, remedy)
}

// StagePrice is the price the runner charges a stage's calls at: the
// model's list price, each side overridden when given, at the batch rate
// for batch calls. An unknown model with no override is an error when
// needPrice is set (a budget cannot be kept without a price); otherwise
// its calls are priced at zero. A negative or non-finite override is an
// error.
func StagePrice(cfg PriceConfig, needPrice bool) (pipeline.Price, error) {
	in, out := Price(cfg.Model)
	for _, o := range []struct {
		v    *float64
		side *float64
	}{{cfg.InputPerM, &in}, {cfg.OutputPerM, &out}} {
		if o.v == nil {
			continue
		}
		if *o.v < 0 || math.IsNaN(*o.v) || math.IsInf(*o.v, 0) {
			return pipeline.Price{}, fmt.Errorf("price of %s is %g per million tokens: pass a price of 0 or more", cfg.Model, *o.v)
		}
		*o.side = *o.v
	}
	if needPrice && in == 0 && out == 0 {
		return pipeline.Price{}, &NoPriceError{Model: cfg.Model}
	}
	// An overridden input price keeps the model's cached share.
	p := pipeline.Price{InputPerM: in, OutputPerM: out, CachedInputPerM: in * cachedShare(cfg.Model),
		FlexFactor: FlexPriceFactor, PriorityFactor: PriorityPriceFactor}
	if cfg.Batch {
		p.InputPerM *= BatchPriceFactor
		p.OutputPerM *= BatchPriceFactor
		p.CachedInputPerM *= BatchPriceFactor
	}
	return p, nil
}

// BatchPrice returns what Price does, for tokens sent through the Batch
// API (BatchPriceFactor of the online price).
func BatchPrice(model string) (in, out float64) {
	in, out = Price(model)
	return in * BatchPriceFactor, out * BatchPriceFactor
}
