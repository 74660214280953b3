package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// liveStatus is what a running process publishes beside its DB, so that
// `status` can answer while bbolt's lock keeps other processes out.
type liveStatus struct {
	PID      int               `json:"pid"`
	RunID    string            `json:"run_id"`
	Updated  time.Time         `json:"updated"`
	Progress pipeline.Progress `json:"progress"`
}

func liveStatusPath(db string) string { return db + ".status.json" }

// progressPrinter prints a progress line every few seconds to stderr and
// publishes the live status file.
type progressPrinter struct {
	mu    sync.Mutex
	w     io.Writer
	path  string
	quiet bool
	b     *built
	last  time.Time
	runID string
}

func newProgressPrinter(w io.Writer, dbPath string, quiet bool, b *built) *progressPrinter {
	return &progressPrinter{w: w, path: dbPath, quiet: quiet, b: b}
}

func (p *progressPrinter) tick(pr pipeline.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.publish(pr)
	if p.quiet || time.Since(p.last) < 2*time.Second {
		return
	}
	p.last = time.Now()
	fmt.Fprintln(p.w, progressLine(pr, p.b))
}

func progressLine(pr pipeline.Progress, b *built) string {
	line := fmt.Sprintf("[%s]", pr.Elapsed.Round(time.Second))
	for _, s := range pr.Stages {
		line += fmt.Sprintf(" %s %d", s.Name, s.Done)
		if s.Dead > 0 {
			line += fmt.Sprintf("(+%d dead)", s.Dead)
		}
		if s.Limit > 0 {
			share := 0.0
			if s.Calls > 0 {
				share = 100 * float64(s.RateLimited) / float64(s.Calls)
			}
			line += fmt.Sprintf(" [limit %d, in flight %d, 429 %.1f%%, %d tok", s.Limit, s.InFlight, share, s.Usage.TotalTokens)
			if b != nil {
				line += fmt.Sprintf(", $%.4f", b.cost(s.Usage))
			}
			line += "]"
		}
	}
	return line
}

// publish writes the live status atomically (write then rename).
func (p *progressPrinter) publish(pr pipeline.Progress) {
	b, err := json.Marshal(liveStatus{PID: os.Getpid(), RunID: p.runID, Updated: time.Now(), Progress: pr})
	if err != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(p.path), ".status-*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), liveStatusPath(p.path)) != nil {
		os.Remove(tmp.Name())
	}
}

func (p *progressPrinter) close() {
	os.Remove(liveStatusPath(p.path))
}

func printProgressTable(w io.Writer, pr pipeline.Progress) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tdone\tdead\tcalls\t429s\ttransient\tlimit\tin flight\ttokens\t")
	for _, s := range pr.Stages {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", s.Name, s.Done, s.Dead, s.Calls, s.RateLimited, s.Transient, s.Limit, s.InFlight, s.Usage.TotalTokens)
	}
	tw.Flush()
}

// printSummary prints the run summary: per-stage accounting, the limit's
// range, dead letters by reason, and where to look next.
func printSummary(w io.Writer, db *store.DB, sum pipeline.RunSummary, asJSON bool) error {
	if asJSON {
		return writeJSON(w, sum)
	}
	wall := sum.Ended.Sub(sum.Started)
	fmt.Fprintf(w, "\nrun %s: %s in %s", sum.ID, sum.Status, wall.Round(100*time.Millisecond))
	if sum.Message != "" {
		fmt.Fprintf(w, " (%s)", sum.Message)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tdone\tdead\tattempts\tcalls\t429s\ttransient\ttokens in\ttokens out\tcost\t")
	for _, name := range stageNames {
		s := sum.Stages[name]
		if s == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t$%.4f\t\n", name, s.Done, s.Dead, s.Attempts, s.Calls, s.RateLimited, s.Transient,
			s.Usage.PromptTokens, s.Usage.CandidateTokens, s.CostUSD)
	}
	tw.Flush()
	if s := sum.Stages["classify"]; s != nil && s.Calls > 0 {
		fmt.Fprintf(w, "classify: 429 share %.2f%% of %d calls; concurrency limit ranged %d..%d, ended at %d\n",
			100*float64(s.RateLimited)/float64(s.Calls), s.Calls, s.LimitMin, s.LimitMax, s.LimitEnd)
	}
	for _, name := range stageNames {
		s := sum.Stages[name]
		if s == nil || len(s.DeadReasons) == 0 {
			continue
		}
		fmt.Fprintf(w, "dead letters at %s this run:\n", name)
		type kv struct {
			k string
			v int
		}
		var reasons []kv
		for k, v := range s.DeadReasons {
			reasons = append(reasons, kv{k, v})
		}
		sort.Slice(reasons, func(i, j int) bool {
			return reasons[i].v > reasons[j].v || reasons[i].v == reasons[j].v && reasons[i].k < reasons[j].k
		})
		for i, r := range reasons {
			if i == 8 {
				fmt.Fprintf(w, "  ... %d more reasons\n", len(reasons)-8)
				break
			}
			fmt.Fprintf(w, "  %5d  %s\n", r.v, r.k)
		}
	}
	p := db.Path()
	fmt.Fprintf(w, "\nnext: sawtooth status --db %s | sawtooth dlq list --db %s | sawtooth report --db %s\n", p, p, p)
	return nil
}
