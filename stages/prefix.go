package stages

import (
	"strings"
	"text/template"
	"text/template/parse"
)

// ImplicitCacheMinTokens is the shortest prompt prefix model's implicit
// caching takes, in tokens: 4,096 for Pro models, 1,024 for the others
// (Flash, Flash-Lite). A shared prefix shorter than this is never billed
// at the cached rate.
func ImplicitCacheMinTokens(model string) int {
	if strings.Contains(strings.ToLower(model), "-pro") {
		return 4096
	}
	return 1024
}

// ImplicitCacheSavingUSD is what a cache hit on tokens prompt tokens of
// model saves against the input price, in USD; 0 for a model without a
// known cached rate.
func ImplicitCacheSavingUSD(model string, tokens int) float64 {
	in, _ := Price(model)
	return float64(tokens) * in * (1 - cachedShare(model)) / 1e6
}

// PromptLayout is how an LLM stage's prompt is laid out for implicit
// caching: what every call starts with, and what shared text comes only
// after the item.
type PromptLayout struct {
	// Shared is what every call's prompt starts with: the system
	// instruction, then the prompt template's text before its first
	// action ({{...}}).
	Shared string
	// After is the template's literal text that follows its first
	// action: shared by every item too, but behind item-specific text,
	// so never part of a cached prefix.
	After string
}

// PromptLayout is the stage's prompt layout (see PromptLayout).
func (l *LLM) PromptLayout() PromptLayout { return layoutOf(l.system, l.prompt) }

// PromptLayout is the stage's prompt layout (see PromptLayout).
func (c *Classify) PromptLayout() PromptLayout { return layoutOf(c.system, c.prompt) }

func layoutOf(system string, tmpl *template.Template) PromptLayout {
	lay := PromptLayout{Shared: system}
	if tmpl == nil || tmpl.Tree == nil || tmpl.Tree.Root == nil {
		return lay
	}
	var head, tail strings.Builder
	acted := false
	for _, n := range tmpl.Tree.Root.Nodes {
		t, text := n.(*parse.TextNode)
		switch {
		case !text:
			acted = true
		case acted:
			tail.Write(t.Text)
		default:
			head.Write(t.Text)
		}
	}
	lay.Shared += head.String()
	lay.After = tail.String()
	return lay
}
