package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sawtooth-dev/sawtooth/store"
)

// errNoLiveStatus: the DB is locked by a process that has published no
// usable live status (yet).
var errNoLiveStatus = errors.New("no live status")

// statusFrame prints the status of the DB at path once: while a run holds
// it, from the live status the run publishes (without waiting for the
// lock), else from the DB.
func statusFrame(w io.Writer, path string, asJSON bool) error {
	if live, err := readLiveStatus(path); err == nil && time.Since(live.Updated) < liveStatusMaxAge {
		return showLiveStatus(w, path, live, asJSON)
	}
	db, err := openReadOnly(path)
	if errors.Is(err, store.ErrInUse) {
		return printLiveStatus(w, path, asJSON)
	}
	if err != nil {
		return err
	}
	defer db.Close()
	return printStatus(w, db, asJSON)
}

// watchStatus prints the status every period until ctx is done or the
// user presses Ctrl-C. On a terminal each frame replaces the last; JSON
// frames are one compact object per line.
func watchStatus(ctx context.Context, w io.Writer, path string, asJSON bool, every time.Duration) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("status --watch: %w", err)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	tty := !asJSON && isTerminal(w)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		var frame bytes.Buffer
		err := statusFrame(&frame, path, asJSON)
		switch {
		case err != nil && asJSON:
			frame.Reset()
			b, _ := json.Marshal(map[string]string{"db": path, "error": err.Error(), "time": time.Now().Format(time.RFC3339)})
			frame.Write(append(b, '\n'))
		case err != nil:
			fmt.Fprintf(&frame, "%v\n", err)
		case asJSON:
			var c bytes.Buffer
			if json.Compact(&c, frame.Bytes()) == nil {
				frame.Reset()
				frame.Write(append(c.Bytes(), '\n'))
			}
		}
		var out bytes.Buffer
		switch {
		case tty:
			// Home, clear the screen, then the frame: one write, no flicker.
			fmt.Fprintf(&out, "\x1b[H\x1b[2J%s  (every %s; Ctrl-C to stop)\n\n", time.Now().Format(time.TimeOnly), every)
		case !asJSON:
			fmt.Fprintf(&out, "--- %s\n", time.Now().Format(time.TimeOnly))
		}
		out.Write(frame.Bytes())
		if _, err := w.Write(out.Bytes()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// liveStatusMaxAge: a status file older than this is from a run that no
// longer updates it.
const liveStatusMaxAge = 15 * time.Second

// readLiveStatus reads the live status published beside the DB at path.
func readLiveStatus(path string) (*liveStatus, error) {
	b, err := os.ReadFile(liveStatusPath(path))
	if err != nil {
		return nil, fmt.Errorf("database %s is in use by another sawtooth process, which has published no live status (a run publishes one within a second or two of starting; other commands hold the database only briefly): try again in a few seconds: %w", path, errNoLiveStatus)
	}
	var live liveStatus
	if err := json.Unmarshal(b, &live); err != nil {
		return nil, fmt.Errorf("read live status of %s: %w", path, err)
	}
	if !processAlive(live.PID) {
		return nil, fmt.Errorf("database %s is in use by another sawtooth process; its live status file %s is left over from pid %d, which has exited (last update %s): try again in a few seconds: %w",
			path, liveStatusPath(path), live.PID, live.Updated.Local().Format(time.DateTime), errNoLiveStatus)
	}
	return &live, nil
}

// printLiveStatus shows what a running process publishes beside the DB:
// per stage finished/total, done, dead, queued, rate and ETA, then the API
// stage's limit, calls by outcome, tokens and cost.
func printLiveStatus(w io.Writer, path string, asJSON bool) error {
	live, err := readLiveStatus(path)
	if err != nil {
		return err
	}
	return showLiveStatus(w, path, live, asJSON)
}

func showLiveStatus(w io.Writer, path string, live *liveStatus, asJSON bool) error {
	if asJSON {
		return writeJSON(w, live)
	}
	fmt.Fprintf(w, "%s: a run is in progress (pid %d, run %s, started %s, elapsed %s); live figures as of %s",
		path, live.PID, live.RunID, live.Started.Local().Format(time.TimeOnly), clockString(live.Elapsed), live.Updated.Local().Format(time.TimeOnly))
	if age := time.Since(live.Updated); age > liveStatusMaxAge {
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\t\n", s.Name, fmtCount(s.Finished()), fmtCount(s.Total), fmtCount(s.Done), fmtCount(s.Dead),
			fmtCount(s.Queued), s.Rate, eta)
	}
	tw.Flush()
	fmt.Fprintln(w)
	cost := 0.0
	for _, s := range live.Stages {
		cost += s.CostUSD
	}
	if a := live.api(); a != nil {
		fmt.Fprintf(w, "%s: concurrency limit %d, %d in flight; %s calls: %s ok, %s 429s (%.1f%%), %s 5xx/timeouts, %s permanent failures\n",
			a.Name, a.Limit, a.InFlight, fmtCount(a.Calls), fmtCount(a.OK), fmtCount(a.RateLimited), a.Share429(), fmtCount(a.Transient), fmtCount(a.Permanent))
		fmt.Fprintf(w, "tokens so far: %s in, %s out; estimated cost $%.4f\n", fmtCount(a.TokensIn), fmtCount(a.TokensOut), cost)
	}
	if live.MetricsURL != "" {
		fmt.Fprintf(w, "metrics: %s\n", live.MetricsURL)
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
