package report

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store"
)

// TestMain fails the package if a test leaves a goroutine behind. The
// genai SDK (imported through stages) starts one opencensus worker at
// init for the life of the process: that one is not a leak. It stops
// the PostgreSQL server a test started (see pgFixtureOf).
func TestMain(m *testing.M) {
	code := m.Run()
	pg.Stop()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Hostile strings a review, an app name, an id or a server message may
// hold: HTML that runs script, Markdown that loads an image, and a
// terminal escape that clears the screen.
const (
	hostileScript = `<script>alert("x")</script>`
	hostileImg    = `"><img src=x onerror=alert(1)>`
	hostileMdImg  = `![t](http://evil.example/track.png)`
	hostileEsc    = "\x1b[2J"
)

// fixtureReview is one review of the fixed dataset with its classify
// answer.
type fixtureReview struct {
	ID, App, Date, Text, Label string
	Rating                     float64
	Confidence                 float64
}

// fixtureApps are the apps of the fixed dataset; the third is hostile.
var fixtureApps = []string{"TaskFlow", "NoteNest", hostileScript + hostileMdImg}

// fixtureReviews is a small fixed dataset: three apps over three months
// (2026-09 to 2026-11) and three labels, with bug reports on TaskFlow
// growing each month, hostile text in some reviews, and confidences with
// ties so the quote order is tested.
func fixtureReviews() []fixtureReview {
	var out []fixtureReview
	months := []string{"2026-09", "2026-10", "2026-11"}
	labels := []string{"bug", "praise", "pricing"}
	n := 0
	for ai, app := range fixtureApps {
		for mi, month := range months {
			for li, label := range labels {
				count := 2 + (ai+mi+li)%3
				if app == "TaskFlow" && label == "bug" {
					count = 2 + 3*mi
				}
				for k := range count {
					n++
					text := fmt.Sprintf("%s review %d of %s in %s: the sync %s.", label, k+1, app, month, []string{"crashes", "is lovely", "costs too much"}[li])
					switch n % 9 {
					case 0:
						text = "Export fails " + hostileImg + " " + hostileMdImg + " then " + hostileEsc + " clears " + hostileScript
					case 4:
						text += " A long one: " + longText
					}
					conf := []float64{0.83, 0.97, 0.6, 0.97, 0.71}[n%5]
					if n%9 == 0 {
						conf = 0.99 // the hostile reviews are quoted
					}
					out = append(out, fixtureReview{
						ID:   fmt.Sprintf("r%03d", n),
						App:  app,
						Date: fmt.Sprintf("%s-%02d", month, 1+(k*7)%28),
						Text: text, Label: label,
						Rating:     float64(1 + (n*7)%5),
						Confidence: conf,
					})
				}
			}
		}
	}
	return out
}

const longText = "it started after the update and every time I open the app on my phone the list of tasks is empty until I restart, " +
	"which means I lose the edits I made offline, and support has not answered in two weeks, so I am looking at alternatives now."

// record is the review as ingest stores it.
func (r fixtureReview) record() pipeline.Record {
	return pipeline.Record{ID: r.ID, Text: r.Text, Fields: map[string]string{
		"app": r.App, "date": r.Date, "rating": FormatNumber(r.Rating),
	}}
}

// classifyOutput is the classify stage's answer for the review.
func (r fixtureReview) classifyOutput() json.RawMessage {
	b, _ := json.Marshal(map[string]any{"label": r.Label, "confidence": r.Confidence, "reason": "because " + r.Label})
	return b
}

// fixtureCube folds the fixed dataset into a cube by app and month.
func fixtureCube(t testing.TB) *Cube {
	t.Helper()
	c := NewCube([]string{"app", "month"})
	for _, r := range fixtureReviews() {
		rating := r.Rating
		c.Add(Review{ID: r.ID, Label: r.Label, Confidence: r.Confidence, Rating: &rating,
			Groups: map[string]string{"app": r.App, "month": r.Date[:7]}, Text: r.Text})
	}
	c.Sort()
	return c
}

// fixtureData is a whole report of the fixed dataset: counts, the tally,
// a run with samples in which two stages finish together, a dead letter
// with a hostile server message, the cube and the app × month pivot for
// November.
func fixtureData(t testing.TB) *Data {
	t.Helper()
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var tally pipeline.Tally
	for _, r := range fixtureReviews() {
		rating := r.Rating
		tally.Fold(r.ID, pipeline.Fact{Label: r.Label, Groups: map[string]string{"app": r.App, "month": r.Date[:7]}, Rating: &rating}, +1)
	}
	var samples []pipeline.Sample
	limit := 4
	for i := 1; i <= 20; i++ {
		at := start.Add(time.Duration(i) * time.Second)
		s := pipeline.Sample{At: at, Stage: "classify", Limit: limit, InFlight: limit, Successes: 5}
		if i%7 == 0 {
			s.RateLimited = 2
			limit = max(1, limit/2)
		} else {
			limit++
		}
		// sanitize and aggregate finish exactly with classify: their lines
		// coincide and must stay distinguishable.
		samples = append(samples, pipeline.Sample{At: at, Stage: "sanitize", Successes: 5}, s, pipeline.Sample{At: at, Stage: "aggregate", Successes: 5})
	}
	run := pipeline.RunSummary{ID: "run-" + hostileEsc + "1", Started: start, Ended: start.Add(21 * time.Second), Status: "complete",
		Message: "server said " + hostileScript + hostileEsc,
		Stages: map[string]*pipeline.StageStats{
			"sanitize":  {Done: 101, Calls: 101, Attempts: 101},
			"classify":  {Done: 100, Dead: 1, Calls: 110, Attempts: 110, RateLimited: 6, Transient: 3, LimitMin: 2, LimitMax: 9, LimitEnd: 5, Usage: pipeline.Usage{PromptTokens: 12000, CandidateTokens: 1500, TotalTokens: 13500}, CostUSD: 0.0021},
			"aggregate": {Done: 100, Calls: 100, Attempts: 100},
		}}
	d := &Data{
		DB: "fixture.db", Generated: start.Add(time.Minute), Zone: time.UTC,
		DeadSteps: []Step{{"sawtooth dlq list --db fixture.db", "lists them"}, {"sawtooth retry --db fixture.db --stage S", "re-runs a stage's dead letters"}},
		Stages:    []string{"sanitize", "classify", "aggregate"},
		Counts: store.Counts{Items: int(tally.Items) + 1, Done: int(tally.Items), Stages: []store.StageCounts{
			{Stage: "sanitize", Output: int(tally.Items) + 1}, {Stage: "classify", Dead: 1, Output: int(tally.Items)}, {Stage: "aggregate", Output: int(tally.Items)},
		}},
		Tally:   tally,
		Dead:    map[string][]DeadReason{"classify": {{Reason: "permanent: server said " + hostileImg + hostileMdImg + hostileEsc, Count: 1, IDs: []string{"bad" + hostileImg}}}},
		LastRun: &run, Samples: samples,
		// An older run killed before it saved its end: its tokens have no price.
		Runs: []pipeline.RunSummary{run, {ID: "run-0", Started: start.Add(-time.Hour), Ended: start.Add(-59 * time.Minute), Status: store.RunKilled,
			Stages: map[string]*pipeline.StageStats{"classify": {Done: 40, Calls: 40, Usage: pipeline.Usage{PromptTokens: 4800, CandidateTokens: 600, TotalTokens: 5400}}}}},
		KilledCosts: []KilledRunCost{{Run: "run-0", Stage: "classify", Model: "my-model", Usage: pipeline.Usage{PromptTokens: 4800, CandidateTokens: 600}, Unpriced: true}},
		Window:      Window{From: "2026-11", To: "2026-11"},
		Cube:        fixtureCube(t),
		Periods: []PeriodStamp{{Period: "2026-11", Month: "2026-11", Fingerprint: "0123456789abcdef01234567",
			LastReport: start.Add(-24 * time.Hour), Changed: true}},
	}
	p, err := d.Cube.Pivot(PivotOptions{By: []string{"app", "month"}, Window: d.Window})
	if err != nil {
		t.Fatal(err)
	}
	d.Pivot = p
	return d
}

func recordOf(id, text string, fields map[string]string) pipeline.Record {
	return pipeline.Record{ID: id, Text: text, Fields: fields}
}
