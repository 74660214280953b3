package stages

import "strings"

// listPrices are USD per million tokens (input, output) for standard
// online calls, as published for paid tiers; used only to estimate cost.
var listPrices = []struct {
	prefix  string
	in, out float64
}{
	{"gemini-2.5-flash-lite", 0.10, 0.40},
	{"gemini-2.5-flash", 0.30, 2.50},
	{"gemini-2.5-pro", 1.25, 10.00},
	{"gemini-2.0-flash-lite", 0.075, 0.30},
	{"gemini-2.0-flash", 0.10, 0.40},
}

// Price returns the list price of model in USD per million input and
// output tokens, or zeros when the model is unknown (pass --price-in and
// --price-out then).
func Price(model string) (in, out float64) {
	model = strings.TrimPrefix(model, "models/")
	for _, p := range listPrices {
		if strings.HasPrefix(model, p.prefix) {
			return p.in, p.out
		}
	}
	return 0, 0
}

// BatchDiscount is the Batch API's price as a fraction of the online
// price: batch tokens cost half.
const BatchDiscount = 0.5

// BatchPrice returns what Price does, for tokens sent through the Batch
// API (BatchDiscount of the online price).
func BatchPrice(model string) (in, out float64) {
	in, out = Price(model)
	return in * BatchDiscount, out * BatchDiscount
}
