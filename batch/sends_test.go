package batch

import (
	"context"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// cutOff gives the fixture a classify stage whose every answer is cut
// off at its output budget: billed, and back to the queue each time.
func cutOff(t *testing.T, f *fixture) {
	t.Helper()
	cls, err := stages.NewClassify(context.Background(), stages.ClassifyConfig{APIKey: geminisim.DefaultAPIKey,
		BaseURL: f.api.ClientConfig().HTTPOptions.BaseURL, MaxOutputTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	f.cls = cls
}

// TestDriver_SendsBound: an item whose batch answer is cut off every time
// is sent in at most MaxSends jobs, however many runs (or workers) take
// their rounds at it, and then waits in the stage's dead letters, saying
// why, instead of being paid for again.
func TestDriver_SendsBound(t *testing.T) {
	for _, tc := range []struct {
		name              string
		runs, rounds, max int
	}{
		{"one run of more rounds", 1, 5, 3},
		{"runs after runs", 4, 2, 3},
		{"the default", 3, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 4
			f := newFixture(t, n, geminisim.BatchConfig{})
			cutOff(t, f)
			for range tc.runs {
				if _, err := f.driver(f.db, Config{Mode: ModeBatch, MaxRounds: tc.rounds, MaxSends: tc.max}).Run(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			max := tc.max
			if max == 0 {
				max = DefaultMaxSends
			}
			if rows := f.sim.BatchStats().Rows; rows != n*max {
				t.Errorf("%d batch requests answered, want %d: each item sent %d times", rows, n*max, max)
			}
			done, dead, queued := f.state(t)
			if done != 0 || dead != n || queued != 0 {
				t.Fatalf("%d done, %d dead, %d queued; want every item dead", done, dead, queued)
			}
			loc, err := f.db.Locate("r000")
			if err != nil || loc.Dead == nil || !strings.Contains(loc.Dead.Message, "sent in 3 batch jobs at classify") ||
				!strings.Contains(loc.Dead.Message, "cut off") || loc.Dead.Attempts != max {
				t.Errorf("dead letter %+v %v: want it to say it was sent %d times and why the last did not answer", loc.Dead, err, max)
			}
		})
	}
}

// TestDriver_SendsBoundBeforeCreate: an item already sent as often as
// allowed (a lower bound set since) is dead-lettered when a new job is
// made, without a request; what a requeue brings back is sent again.
func TestDriver_SendsBoundBeforeCreate(t *testing.T) {
	const n = 3
	f := newFixture(t, n, geminisim.BatchConfig{})
	cutOff(t, f)
	if _, err := f.driver(f.db, Config{Mode: ModeBatch, MaxRounds: 2, MaxSends: 5}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := f.sim.BatchStats().Rows
	if _, err := f.driver(f.db, Config{Mode: ModeBatch, MaxRounds: 2, MaxSends: 2}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rows := f.sim.BatchStats().Rows; rows != before {
		t.Errorf("%d more batch requests, want none: every item was sent twice already", rows-before)
	}
	if _, dead, _ := f.state(t); dead != n {
		t.Fatalf("%d dead, want %d", dead, n)
	}
	if _, err := f.db.Requeue("classify", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := f.driver(f.db, Config{Mode: ModeBatch, MaxRounds: 1, MaxSends: 2}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rows := f.sim.BatchStats().Rows; rows != before+n {
		t.Errorf("%d batch requests after the requeue, want %d: a requeued item starts afresh", rows-before, n)
	}
}

// TestDriver_SendsBoundAuto: in ModeAuto an item already sent as often
// as allowed is left out of a new job's requests, not dead-lettered: the
// job gives it back and the online runner answers it.
func TestDriver_SendsBoundAuto(t *testing.T) {
	const n = 3
	f := newFixture(t, n, geminisim.BatchConfig{})
	cutOff(t, f)
	if _, err := f.driver(f.db, Config{Mode: ModeBatch, MaxRounds: 2, MaxSends: 5}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := f.sim.BatchStats().Rows
	if _, err := f.driver(f.db, Config{Mode: ModeAuto, MaxSends: 2}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rows := f.sim.BatchStats().Rows; rows != before {
		t.Errorf("%d more batch requests, want none: every item was sent twice already", rows-before)
	}
	if _, dead, queued := f.state(t); dead != 0 || queued != n {
		t.Errorf("%d dead, %d queued; want all %d queued for the online runner", dead, queued, n)
	}
}
