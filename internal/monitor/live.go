package monitor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// LiveStatus is what a running process publishes beside its DB every
// second, so that `status` can answer while bbolt's lock keeps other
// processes out, and what the bars, the progress records and the metrics
// show. A value is never modified once published.
type LiveStatus struct {
	PID        int         `json:"pid"`
	RunID      string      `json:"run_id"`
	Started    time.Time   `json:"started"`
	Updated    time.Time   `json:"updated"`
	Elapsed    float64     `json:"elapsed_seconds"`
	MetricsURL string      `json:"metrics_url,omitempty"`
	Stages     []LiveStage `json:"stages"`
}

// LiveStage is one stage's figures for the run so far.
type LiveStage struct {
	Name string `json:"name"`
	// Total is how many items this run expects the stage to finish: those
	// queued at it or at an earlier stage when the run started, less the
	// dead letters of earlier stages since.
	Total int64 `json:"total"`
	Done  int64 `json:"done"`
	Dead  int64 `json:"dead"`
	// Before is how many items had left the stage (output or dead letter)
	// before this run started.
	Before int64 `json:"before_run"`
	// Queued is the items waiting at the stage or being processed there.
	Queued int64 `json:"queued"`
	// Rate is items finished (done or dead) per second over the last
	// rateSpan; ETASeconds the time left at that rate, -1 when unknown.
	Rate       float64 `json:"rate_per_second"`
	ETASeconds float64 `json:"eta_seconds"`
	// FinishedAt is the second of the run at which the stage finished its
	// Total (then Rate is its average rate until then); 0 while it has not.
	FinishedAt float64 `json:"finished_at_seconds,omitempty"`
	// Calls by outcome; Calls counts every call, 429s included. Outcomes
	// has every class (pipeline.Classes), "ok" for successes. Transient
	// counts 5xx and timeouts, Unavailable the calls that never reached
	// the endpoint.
	Outcomes    map[pipeline.Class]int64 `json:"outcomes"`
	Calls       int64                    `json:"calls"`
	OK          int64                    `json:"ok"`
	RateLimited int64                    `json:"rate_limited"`
	Transient   int64                    `json:"transient"`
	Unavailable int64                    `json:"unavailable"`
	Permanent   int64                    `json:"permanent"`
	Limit       int                      `json:"limit,omitempty"`
	InFlight    int                      `json:"in_flight"`
	TokensIn    int64                    `json:"tokens_in"`
	TokensOut   int64                    `json:"tokens_out"`
	Tokens      int64                    `json:"tokens"`
	CostUSD     float64                  `json:"cost_usd"`
	// Cached is the answers reused without a call; SavedUSD what they
	// would have cost.
	Cached   int64   `json:"cached,omitempty"`
	SavedUSD float64 `json:"saved_usd,omitempty"`
	// TokensCached is the input tokens billed at the implicit-cache rate.
	TokensCached int64 `json:"tokens_cached,omitempty"`
	// Tiers is the calls by service tier, as in the summary, when any
	// was not standard.
	Tiers map[string]*pipeline.TierStats `json:"tiers,omitempty"`
}

// Finished is how many items left the stage (done or dead letter).
func (s LiveStage) Finished() int64 { return s.Done + s.Dead }

// Share429 is the share of calls refused with 429, in percent.
func (s LiveStage) Share429() float64 {
	if s.Calls == 0 {
		return 0
	}
	return 100 * float64(s.RateLimited) / float64(s.Calls)
}

// api is the stage with a concurrency limit, or nil.
func (v *LiveStatus) api() *LiveStage {
	for i := range v.Stages {
		if v.Stages[i].Limit > 0 {
			return &v.Stages[i]
		}
	}
	return nil
}

// LiveStatusPath is where a run on the DB at db publishes its live status.
func LiveStatusPath(db string) string { return db + ".status.json" }

// ErrNoLiveStatus means the DB is locked by a process that has published no
// usable live status (yet).
var ErrNoLiveStatus = errors.New("no live status")

// LiveStatusMaxAge is the age beyond which a status file older than this is from a run that no
// longer updates it.
const LiveStatusMaxAge = 15 * time.Second

// ReadLiveStatus reads the live status published beside the DB at path.
func ReadLiveStatus(path string) (*LiveStatus, error) {
	b, err := os.ReadFile(LiveStatusPath(path))
	if err != nil {
		return nil, fmt.Errorf("database %s is in use by another sawtooth process, which has published no live status (a run publishes one within a second or two of starting; other commands hold the database only briefly): try again in a few seconds: %w", path, ErrNoLiveStatus)
	}
	var live LiveStatus
	if err := json.Unmarshal(b, &live); err != nil {
		return nil, fmt.Errorf("read live status of %s: %w", path, err)
	}
	if !processAlive(live.PID) {
		return nil, fmt.Errorf("database %s is in use by another sawtooth process; its live status file %s is left over from pid %d, which has exited (last update %s): try again in a few seconds: %w",
			path, LiveStatusPath(path), live.PID, live.Updated.Local().Format(time.DateTime), ErrNoLiveStatus)
	}
	return &live, nil
}

// PrintLiveStatus shows what a running process publishes beside the DB:
// per stage finished/total, done, dead, queued, rate and ETA, then the API
// stage's limit, calls by outcome, tokens and cost.
func PrintLiveStatus(w io.Writer, path string, asJSON bool) error {
	live, err := ReadLiveStatus(path)
	if err != nil {
		return err
	}
	return ShowLiveStatus(w, path, live, asJSON)
}

// ShowLiveStatus prints live, the figures a run published for the DB at
// path, as a table or as JSON.
func ShowLiveStatus(w io.Writer, path string, live *LiveStatus, asJSON bool) error {
	if asJSON {
		return WriteJSONSafe(w, live)
	}
	fmt.Fprintf(w, "%s: a run is in progress (pid %d, run %s, started %s, elapsed %s); live figures as of %s",
		TerminalSafe(path), live.PID, TerminalSafe(live.RunID), live.Started.Local().Format(time.TimeOnly), clockString(live.Elapsed), live.Updated.Local().Format(time.TimeOnly))
	if age := time.Since(live.Updated); age > LiveStatusMaxAge {
		fmt.Fprintf(w, " (%s ago: the run has not updated them since; is it stuck?)", age.Round(time.Second))
	}
	fmt.Fprint(w, ":\n\n")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tfinished\tof\tdone\tdead\tqueued\titems/s\tETA\t")
	for _, s := range live.Stages {
		eta := etaString(s.ETASeconds)
		if s.FinishedAt > 0 {
			eta = "done at " + clockString(s.FinishedAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t\n", TerminalSafe(s.Name), fmtCount(s.Before+s.Finished()), fmtCount(s.Before+s.Total), fmtCount(s.Done), fmtCount(s.Dead),
			fmtCount(s.Queued), s.Rate, eta)
	}
	tw.Flush()
	fmt.Fprintln(w)
	cost := 0.0
	for _, s := range live.Stages {
		cost += s.CostUSD
	}
	if a := live.api(); a != nil {
		fmt.Fprintf(w, "%s: concurrency limit %d, %d in flight; %s calls: %s ok, %s 429s (%.1f%%), %s 5xx/timeouts, %s unreachable, %s permanent failures\n",
			TerminalSafe(a.Name), a.Limit, a.InFlight, fmtCount(a.Calls), fmtCount(a.OK), fmtCount(a.RateLimited), a.Share429(), fmtCount(a.Transient), fmtCount(a.Unavailable), fmtCount(a.Permanent))
		fmt.Fprintf(w, "tokens so far: %s in, %s out; estimated cost $%.4f\n", fmtCount(a.TokensIn), fmtCount(a.TokensOut), cost)
	}
	for _, s := range live.Stages {
		printTiers(w, TerminalSafe(s.Name), s.Tiers, 0, 0)
	}
	if live.MetricsURL != "" {
		fmt.Fprintf(w, "metrics: %s\n", TerminalSafe(live.MetricsURL))
	}
	return nil
}

// processAlive says whether a process with this pid exists.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	// A process killed a moment ago can linger as a zombie until its
	// parent reaps it; it holds no lock and publishes nothing.
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if i := bytes.LastIndexByte(b, ')'); i > 0 && i+2 < len(b) && b[i+2] == 'Z' {
			return false
		}
	}
	return true
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// ProcessAlive reports whether a process with this pid exists and has not
// exited (a zombie has).
func ProcessAlive(pid int) bool { return processAlive(pid) }
