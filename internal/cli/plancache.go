package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/sawtooth-dev/sawtooth/internal/job"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
)

// laidOut is an LLM stage whose prompt layout the plan can read.
type laidOut interface {
	Model() string
	PromptLayout() stages.PromptLayout
}

// printCachePlan says, per LLM stage, whether the prompt's shared prefix
// (system instruction, then the template's text before the item) reaches
// the model's implicit-caching minimum, and what a hit would save: per
// call, and over the stage's planned calls. Tokens are estimated at 4
// characters each, as the plan's.
func printCachePlan(out io.Writer, scs []pipeline.StageConfig, plans []job.StagePlan) {
	calls := map[string]int{}
	for _, p := range plans {
		calls[p.Stage] = p.Calls
	}
	for _, sc := range scs {
		st, ok := sc.Stage.(laidOut)
		if !ok {
			continue
		}
		name, model, lay := sc.Stage.Name(), st.Model(), st.PromptLayout()
		fmt.Fprintln(out, cachePlanLine(name, model, lay, calls[name]))
	}
}

// cachePlanLine is printCachePlan's sentence for one stage.
func cachePlanLine(stage, model string, lay stages.PromptLayout, calls int) string {
	tokens, minimum := estimateTokens(lay.Shared), stages.ImplicitCacheMinTokens(model)
	var b strings.Builder
	fmt.Fprintf(&b, "implicit cache, %s (%s): the shared prompt prefix (system instruction, then the prompt before the item) is about %s tokens", stage, model, fmtInt(tokens))
	if tokens < minimum {
		fmt.Fprintf(&b, ", under the model's %s-token minimum: no call will be billed at the cached rate", fmtInt(minimum))
		if after := estimateTokens(lay.After); tokens+after >= minimum {
			fmt.Fprintf(&b, "; the prompt template puts about %s tokens of shared text after the item: move them before it to reach the minimum", fmtInt(after))
		} else {
			b.WriteString(" (label definitions or examples in the system instruction would reach it)")
		}
		return b.String()
	}
	perCall := stages.ImplicitCacheSavingUSD(model, tokens)
	fmt.Fprintf(&b, ", over the model's %s-token minimum: a cache hit bills them at the cached rate, saving about $%.6f a call", fmtInt(minimum), perCall)
	if calls > 1 {
		// The first call of a prefix fills the cache; the others can hit.
		fmt.Fprintf(&b, ", up to $%.4f over the %s calls planned", perCall*float64(calls-1), fmtInt(calls))
	}
	if after := estimateTokens(lay.After); after > 0 {
		fmt.Fprintf(&b, "; about %s tokens of shared text come after the item and are not cached", fmtInt(after))
	}
	return b.String()
}

// estimateTokens is the plan's estimate of the tokens of s: 4 characters
// a token.
func estimateTokens(s string) int { return (len([]rune(s)) + 3) / 4 }

// fmtInt formats n with thousands separators.
func fmtInt(n int) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
