package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// rerunPlan is what re-running from a stage would re-pay, estimated from
// the DB's counts and the usage of its past runs.
type rerunPlan struct {
	// From is the first stage re-run; Stages it and those after it.
	From   string
	Stages []string
	// Items is how many items go back to From's queue.
	Items int
	// Calls is the API calls expected (one per item re-run at classify;
	// 0 when classify is not re-run).
	Calls int
	// TokensIn and Cost are estimated from the classify usage per item of
	// past runs; Known says there was a past run to estimate from.
	TokensIn int64
	Cost     float64
	Known    bool
	// Duration is the time at the pace of the fastest past run, or 0 when
	// no run classified anything.
	Duration time.Duration
	// Limit is the learned classify concurrency (0: none learned).
	Limit int
}

// planRerun estimates a re-run from stage: which items move (every item
// that reached it: queued there or later, dead there or later, or done,
// as store.DB.Rerun moves them) and what classify would charge for them.
func planRerun(db pipeline.Database, from string, cost func(pipeline.Usage) float64) (rerunPlan, error) {
	p := rerunPlan{From: from, Limit: db.LearnedLimit("classify")}
	counts, err := db.Counts()
	if err != nil {
		return p, err
	}
	si, ci := -1, -1
	for i, s := range counts.Stages {
		if s.Stage == from {
			si = i
		}
		if s.Stage == "classify" {
			ci = i
		}
	}
	if si < 0 {
		return p, checkStage("from-stage", from)
	}
	p.Items = counts.Done
	for i, s := range counts.Stages {
		if i >= si {
			p.Stages = append(p.Stages, s.Stage)
			p.Items += s.Queued + s.Dead
		}
	}
	if ci < si {
		return p, nil // classify is not re-run: no calls
	}
	p.Calls = p.Items
	runs, err := db.Runs(1000)
	if err != nil {
		return p, err
	}
	var items int64
	var usage pipeline.Usage
	bestRate := 0.0
	for _, r := range runs {
		cs := r.Stages["classify"]
		if cs == nil || cs.Done == 0 {
			continue
		}
		items += cs.Done
		usage = usage.Add(cs.Usage)
		if wall := r.Ended.Sub(r.Started).Seconds(); wall > 0 {
			bestRate = max(bestRate, float64(cs.Done)/wall)
		}
	}
	if items > 0 {
		p.Known = true
		per := func(n int64) int64 { return n * int64(p.Items) / items }
		u := pipeline.Usage{PromptTokens: per(usage.PromptTokens), CandidateTokens: per(usage.CandidateTokens), TotalTokens: per(usage.TotalTokens)}
		p.TokensIn = u.PromptTokens
		if cost != nil {
			p.Cost = cost(u)
		}
	}
	if bestRate > 0 {
		p.Duration = time.Duration(float64(p.Items) / bestRate * float64(time.Second))
	}
	return p, nil
}

// print writes the plan as one paragraph a person can decide on.
func (p rerunPlan) print(w io.Writer) {
	fmt.Fprintf(w, "would re-run %s for %s: ", joinAnd(p.Stages), plural(p.Items, "item"))
	if p.Calls == 0 {
		fmt.Fprintln(w, "no API calls (classify is not re-run), nothing to pay")
		return
	}
	fmt.Fprintf(w, "about %s", plural(p.Calls, "call"))
	if p.Known {
		fmt.Fprintf(w, ", %s input tokens, $%.2f", compact(p.TokensIn), p.Cost)
	} else {
		fmt.Fprint(w, " (no past run to estimate tokens and cost from)")
	}
	switch {
	case p.Duration >= time.Second:
		fmt.Fprintf(w, ", about %s at the fastest past run's pace", roundDuration(p.Duration))
	case p.Duration > 0:
		fmt.Fprint(w, ", under a second at the fastest past run's pace")
	}
	if p.Limit > 0 {
		fmt.Fprintf(w, " (learned concurrency limit %d)", p.Limit)
	}
	fmt.Fprintln(w)
}

// joinAnd joins names as "a", "a and b", "a, b and c".
func joinAnd(names []string) string {
	switch len(names) {
	case 0:
		return "nothing"
	case 1:
		return names[0]
	}
	out := names[0]
	for _, n := range names[1 : len(names)-1] {
		out += ", " + n
	}
	return out + " and " + names[len(names)-1]
}

// plural is "1 item", "2 items".
func plural(n int, noun string) string {
	return fmt.Sprintf("%d %s", n, nounFor(n, noun))
}

// nounFor is noun, with an s unless n is 1.
func nounFor(n int, noun string) string {
	if n == 1 {
		return noun
	}
	return noun + "s"
}

// compact formats a token count: 52310 -> "52.3k".
func compact(n int64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// roundDuration rounds d for a person: seconds under a minute, minutes
// above.
func roundDuration(d time.Duration) time.Duration {
	if d < time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(time.Minute)
}
