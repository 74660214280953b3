// This file is when the driver acts: each job's deadline (its own, or
// ModeAuto's run deadline), the pace of creates after a refusal, the next
// look-up of an intent that may exist at the API, and how long to sleep.

package batch

import (
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// settledAt is when an intent's job, if the API has not listed it, can
// no longer show up: settle after its create was last sent (a create the
// server finishes late, or lists late). Zero for an intent no create was
// sent for. A record from before the send time was kept may have been
// sent at any time since it was recorded: settle after that, to be safe.
// The driver (before creating again) and Cancel (before giving the items
// back) both wait for it: one rule, or a cancel re-queues what a late
// create is about to run.
func settledAt(j pipeline.BatchJob, settle time.Duration) time.Time {
	switch {
	case !j.CreateSent.IsZero():
		return j.CreateSent.Add(settle)
	case j.CreateTracked:
		return time.Time{}
	}
	return j.Created.Add(settle)
}

// backOffCreate delays the next create, doubling the wait.
func (d *Driver) backOffCreate(now time.Time, why string, num uint64) {
	d.createWait = min(max(2*d.createWait, d.cfg.CreateBackoff), d.cfg.CreateBackoffMax)
	d.createAt = now.Add(d.createWait)
	d.cfg.Log.Info("batch: create failed; waiting", "job", num, "why", why, "wait", d.createWait)
	d.progress()
}

// lookAgain schedules the next look-up of intent t at the API: at at, or
// at its deadline when that comes first (it is looked up before it is
// given up).
func (d *Driver) lookAgain(t *tracked, at, now time.Time) {
	if dl := d.deadline(t); now.Before(dl) && dl.Before(at) {
		at = dl
	}
	t.nextLook = at
}

// deadline is when job t is given up on: Config.Deadline after its
// create (after its intent while it has no API name), and in ModeAuto no
// later than the run's deadline.
func (d *Driver) deadline(t *tracked) time.Time {
	from := t.job.Submitted
	if t.job.Name == "" || from.IsZero() {
		from = t.job.Created
	}
	at := from.Add(d.cfg.Deadline)
	if !d.until.IsZero() && d.until.Before(at) {
		at = d.until
	}
	return at
}

// pastDeadline reports whether job t's deadline has come.
func (d *Driver) pastDeadline(t *tracked, now time.Time) bool {
	return !now.Before(d.deadline(t))
}

// pollByDeadline brings a created job's next poll forward to its
// deadline, so the job is cancelled then and not a poll interval (up to
// PollMax) later. Only a deadline still ahead: a poll that failed at the
// deadline waits its interval rather than being retried at once.
func (d *Driver) pollByDeadline(now time.Time) {
	for _, t := range d.jobs {
		if dl := d.deadline(t); t.job.Name != "" && now.Before(dl) && dl.Before(t.nextPoll) {
			t.nextPoll = dl
		}
	}
}

// nextWake is how long to sleep until a job is due for a poll, a create
// may be retried or an intent's deadline comes; false when nothing waits.
func (d *Driver) nextWake(now time.Time) (time.Duration, bool) {
	var next time.Time
	found := false
	for _, t := range d.jobs {
		at := t.nextPoll
		switch {
		case t.job.Name == "" && t.unsure:
			at = t.nextLook
		case t.job.Name == "":
			at = d.createAt
			if dl := d.deadline(t); now.Before(dl) && dl.Before(at) {
				at = dl
			}
		}
		if !found || at.Before(next) {
			next, found = at, true
		}
	}
	if _, shared := d.db.(Leaser); shared && (len(d.jobs) > 0 || d.others > 0) {
		// Wake to renew the leases, and to see whether the other
		// workers' jobs closed or came free.
		if !found || d.holdAt.Before(next) {
			next, found = d.holdAt, true
		}
	}
	return max(next.Sub(now), 0), found
}
