// This file prices the runs that were killed before they saved their
// end: their records hold the tokens their committed results paid for
// (the store adds them up) but no cost, so a report would show $0.

package report

import (
	"encoding/json"
	"fmt"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
)

// KilledRunCost is how the cost of one stage of a killed run was found.
type KilledRunCost struct {
	Run   string `json:"run"`
	Stage string `json:"stage"`
	// Model is the model the stage's recorded configuration names; "" for
	// a stage that names none.
	Model string         `json:"model,omitempty"`
	Usage pipeline.Usage `json:"usage"`
	// CostUSD is Usage at Model's list price or the stage's own (the batch rate for a batch
	// stage); 0 when Unpriced.
	CostUSD float64 `json:"cost_usd"`
	// Unpriced says no price is known: the model is not in the price
	// table, or the stage names no model.
	Unpriced bool `json:"unpriced,omitempty"`
	// OwnPrice says CostUSD is at the price the stored job gives the
	// stage (its price:, or a run from flags' recorded prices), not the
	// list price.
	OwnPrice bool `json:"own_price,omitempty"`
}

// stageModel is the model and mode a stage's recorded configuration
// names: a flag run records {"model": ...}; a job stage {"LLM": {"Model":
// ..., "Mode": ...}} (JSON keys match ignoring case).
func stageModel(config json.RawMessage) (model string, batch bool, ok bool) {
	var c struct {
		Model *string
		Mode  string
		LLM   *struct{ Model, Mode string }
	}
	if len(config) == 0 || json.Unmarshal(config, &c) != nil {
		return "", false, false
	}
	switch {
	case c.LLM != nil:
		return cmpOr(c.LLM.Model, stages.DefaultModel), c.LLM.Mode == "batch", true
	case c.Model != nil:
		return cmpOr(*c.Model, stages.DefaultModel), c.Mode == "batch", true
	}
	return "", false, false
}

// priceKilledRuns sets the cost of every stage with tokens in the killed
// runs among runs, at the price the stored job gives the stage (own: its
// price:, nil without a stored job) or else the list price of the model
// its recorded configuration (defs) or the stored job names, and returns
// what it did, stage by stage.
// A stage with no known price keeps no cost and is marked Unpriced.
func priceKilledRuns(runs []pipeline.RunSummary, defs []pipeline.StageDef, own map[string]stages.PriceConfig) []KilledRunCost {
	config := map[string]json.RawMessage{}
	for _, d := range defs {
		config[d.Name] = d.Config
	}
	var out []KilledRunCost
	for i := range runs {
		r := &runs[i]
		if r.Status != pipeline.RunKilled {
			continue
		}
		for _, name := range sortedKeys(r.Stages) {
			s := r.Stages[name]
			if s == nil || s.Usage == (pipeline.Usage{}) {
				continue
			}
			k := KilledRunCost{Run: r.ID, Stage: name, Usage: s.Usage, Unpriced: true}
			model, batch, ok := stageModel(config[name])
			o, owned := own[name]
			if !ok && owned {
				model, ok = o.Model, true // the stored job names the stage's model
			}
			if ok {
				k.Model = model
				pc := stages.PriceConfig{Model: model, Batch: batch}
				if owned && (o.InputPerM != nil || o.OutputPerM != nil) {
					pc.InputPerM, pc.OutputPerM, k.OwnPrice = o.InputPerM, o.OutputPerM, true
				}
				if p, err := stages.StagePrice(pc, false); err == nil && !p.IsZero() {
					k.CostUSD, k.Unpriced = p.Cost(s.Usage), false
				}
			}
			s.CostUSD = k.CostUSD
			out = append(out, k)
		}
	}
	return out
}

// unpricedStages is the set of run's stages whose tokens have no price.
func (d *Data) unpricedStages(run string) map[string]bool {
	var out map[string]bool
	for _, k := range d.KilledCosts {
		if k.Run == run && k.Unpriced {
			if out == nil {
				out = map[string]bool{}
			}
			out[k.Stage] = true
		}
	}
	return out
}

// costText is a cost for display, "unpriced" when tokens were billed
// at no known price.
func costText(usdCost float64, unpriced bool) string {
	if unpriced {
		return "unpriced"
	}
	return usd(usdCost)
}

// runCostText is a run's total cost for display: "+ unpriced" says some
// of its stages' tokens have no price.
func (d *Data) runCostText(r pipeline.RunSummary) string {
	total := usd(r.Totals().CostUSD)
	if len(d.unpricedStages(r.ID)) == 0 {
		return total
	}
	if r.Totals().CostUSD == 0 {
		return "unpriced"
	}
	return total + " + unpriced"
}

// KilledCostNotes say, for each stage of the killed run with tokens (of
// every killed run when run is ""), how its cost was estimated or that it
// is unpriced.
func (d *Data) KilledCostNotes(run string) []string {
	var notes []string
	for _, k := range d.KilledCosts {
		if run != "" && k.Run != run {
			continue
		}
		tokens := fmt.Sprintf("%s tokens in / %s out", num(k.Usage.PromptTokens), num(k.Usage.CandidateTokens))
		var how string
		switch {
		case !k.Unpriced && k.OwnPrice:
			how = fmt.Sprintf("est. %s at the price the stored job gives the stage", usd(k.CostUSD))
		case !k.Unpriced:
			how = fmt.Sprintf("est. %s at the list price of %s (as of %s)", usd(k.CostUSD), k.Model, stages.PricesAsOf)
		case k.Model != "":
			how = fmt.Sprintf("unpriced: no list price is known for %s", k.Model)
		default:
			how = "unpriced: the stage records no model"
		}
		notes = append(notes, fmt.Sprintf("run %s was killed before it saved its cost: %s paid %s, %s", k.Run, k.Stage, tokens, how))
	}
	return notes
}
