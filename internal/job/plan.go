package job

import (
	"math"
	"time"
)

// History is what earlier runs of one stage measured, summed over runs.
type History struct {
	// Done is the items that left the stage with an output (skipped ones
	// included); Attempts those that were sent (a skip spends none).
	Done, Attempts int64
	// Calls, PromptTokens and OutputTokens are what the calls cost.
	Calls                      int64
	PromptTokens, OutputTokens int64
	// Seconds is the runs' wall time and Limit the concurrency limit
	// they ended at, for the pace per slot.
	Seconds float64
	Limit   int
}

// PlanInput is what Estimate works from: the input and what the
// database has learned.
type PlanInput struct {
	// Items is how many items the run would process (new ones), at
	// every stage; Work, when set, says per stage instead (by stage name).
	Items int
	Work  map[string]StageWork
	// AvgTextChars is the mean text length of the input, in characters.
	AvgTextChars float64
	// PromptChars is each LLM stage's template plus system instruction
	// length, in characters, by stage name.
	PromptChars map[string]int
	// Learned is each stage's learned concurrency limit (0: none).
	Learned map[string]int
	// History is each stage's past runs (absent: none).
	History map[string]History
	// Counted is each LLM stage's mean input tokens per call as the
	// API's countTokens measured them on a sample (absent: not asked).
	Counted map[string]float64
	// Price returns a model's USD per million input and output tokens.
	Price func(model string) (in, out float64)
}

// StageWork is what a run would do at one stage, as the database tells
// before any call: the items that reach the stage and, at an LLM stage,
// what becomes of them.
type StageWork struct {
	Stage string
	// Items reach the stage in the run.
	Items int
	// Calls are the items known to be sent: their condition lets them in
	// and no answer to their question is kept.
	Calls int
	// Open are the items whose call depends on answers the run has yet
	// to make (a condition or prompt reading an earlier stage that runs
	// for them too): each is sent, or not, as its condition decides.
	Open int
	// Cached are answered from the answer cache, Skipped left out by the
	// condition, Refused dead-lettered without a call (a prompt that
	// cannot be made for them).
	Cached, Skipped, Refused int
}

// StagePlan is one stage's estimate.
type StagePlan struct {
	Stage string
	// Model is the LLM stage's model ("" for the others).
	Model string
	// Items is the items that reach the stage; Calls those sent (after
	// when:), one call each.
	Items, Calls int
	// PromptTokens and OutputTokens are the expected tokens; CostUSD
	// their price.
	PromptTokens, OutputTokens int64
	CostUSD                    float64
	// Limit is the concurrency the time assumes; Duration the time.
	Limit    int
	Duration time.Duration
	// Basis says where the numbers come from: "learned" (past runs),
	// "countTokens" (input tokens counted by the API on a sample) or
	// "estimated" (text length; a when: assumed to let every item in).
	Basis string
}

// Default assumptions without history.
const (
	planLabelOutputTokens  = 30
	planSchemaOutputTokens = 120
	planCallSeconds        = 1.0 // one call's latency
	planStartLimit         = 8
)

// Estimate prices a run of j over in.Items items (or in.Work), stage by
// stage: no call is made. A stage's known calls (StageWork.Calls) are
// priced as they are; of its other items (in.Items, or StageWork.Open),
// with history the stage's share sent (its when:) is the past runs', and
// without it every item is sent. Tokens per call and the pace per
// concurrency slot are the past runs' too; without them tokens are a
// quarter of the characters, answers are short and a call takes a second.
func Estimate(j *Job, in PlanInput) []StagePlan {
	var out []StagePlan
	for _, s := range j.Stages {
		open, counted := in.Items, 0
		p := StagePlan{Stage: s.Name(), Items: in.Items, Basis: "estimated"}
		if in.Work != nil {
			w := in.Work[s.Name()]
			p.Items, open, counted = w.Items, w.Open, w.Calls
		}
		l := s.LLM
		if l == nil {
			out = append(out, p)
			continue
		}
		p.Model = orDefault(l.Model, DefaultModel)
		h, known := in.History[l.Name]
		known = known && h.Calls > 0 && h.Done > 0
		share := 1.0
		promptPer := math.Ceil((in.AvgTextChars + float64(in.PromptChars[l.Name])) / 4)
		outPer := float64(planSchemaOutputTokens)
		if len(l.Output.Label) > 0 {
			outPer = planLabelOutputTokens
		}
		perSlot := 1 / planCallSeconds
		if c := in.Counted[l.Name]; c > 0 && !known {
			promptPer, p.Basis = c, "countTokens"
		}
		if known {
			p.Basis = "learned"
			share = min(1, float64(h.Attempts)/float64(h.Done))
			promptPer = float64(h.PromptTokens) / float64(h.Calls)
			outPer = float64(h.OutputTokens) / float64(h.Calls)
			if h.Seconds > 0 && h.Limit > 0 {
				perSlot = float64(h.Calls) / h.Seconds / float64(h.Limit)
			}
		}
		p.Calls = counted + int(math.Round(float64(open)*share))
		p.PromptTokens = int64(promptPer * float64(p.Calls))
		p.OutputTokens = int64(outPer * float64(p.Calls))
		if in.Price != nil {
			pin, pout := in.Price(p.Model)
			p.CostUSD = (float64(p.PromptTokens)*pin + float64(p.OutputTokens)*pout) / 1e6
		}
		p.Limit = in.Learned[l.Name]
		if p.Limit == 0 {
			p.Limit = l.Limiter.Start
		}
		if p.Limit == 0 {
			p.Limit = planStartLimit
		}
		if l.Limiter.Ceiling > 0 {
			p.Limit = min(p.Limit, l.Limiter.Ceiling)
		}
		if p.Calls > 0 && perSlot > 0 {
			p.Duration = time.Duration(float64(p.Calls) / (perSlot * float64(p.Limit)) * float64(time.Second)).Round(time.Second)
		}
		out = append(out, p)
	}
	return out
}
