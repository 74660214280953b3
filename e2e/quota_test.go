package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// TestQuota_AIMDUnderRetryInfo drives a few hundred items through the
// whole pipeline against a server that enforces a request quota and answers
// 429 with RetryInfo, and checks every item is done exactly once with the
// label the server gives its text.
func TestQuota_AIMDUnderRetryInfo(t *testing.T) {
	const items = 400
	dir := t.TempDir()
	input := writeItems(t, dir, items, 5)
	sim, url := startSim(t, geminisim.Config{
		RPM: 50, Window: 500 * time.Millisecond,
		Latency: geminisim.Latency{Base: 20 * time.Millisecond, Jitter: 20 * time.Millisecond},
		Seed:    3,
	})
	db := filepath.Join(dir, "q.db")
	code, out, errs := sawtooth(t, simEnv(url), "run", "--db", db, "--input", input, "--quiet", "--start", "32")
	if code != 0 {
		t.Fatalf("run exit %d: %s", code, errs)
	}
	st := finalPlaces(t, db, items)

	// Labels right for their ids: the simulator labels the sanitized text.
	texts := readTexts(t, input)
	got := labels(t, db)
	if len(got) != st.Counts.Done {
		t.Errorf("%d labels for %d done items", len(got), st.Counts.Done)
	}
	for id, label := range got {
		clean, err := stages.Clean(texts[id], stages.SanitizeOptions{})
		if err != nil {
			t.Fatalf("item %s: %v", id, err)
		}
		if want := geminisim.Label(clean.Text, stages.DefaultLabels); label != want {
			t.Errorf("item %s: label %q, want %q", id, label, want)
		}
	}
	stats := sim.Stats()
	for h, it := range stats.Items {
		if it.OK > 1 {
			t.Errorf("item %s answered %d times", h[:8], it.OK)
		}
	}
	limited := stats.Outcomes[geminisim.OutcomeRateLimited]
	t.Logf("calls %d, 429s %d (%.1f%%), peak in flight %d", stats.Calls, limited,
		100*float64(limited)/float64(stats.Calls), stats.PeakInFlight)
	if limited == 0 {
		t.Errorf("the quota never pushed back: the test exercised nothing (start 32 against 50 per 500ms)")
	}
	m := regexp.MustCompile(`ranged (\d+)\.\.(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no limit range in the summary:\n%s", out)
	}
	if lo, _ := strconv.Atoi(m[1]); lo >= 32 {
		t.Errorf("the limit never decreased from 32 (range %s..%s)", m[1], m[2])
	}

	// The learned limit is persisted and is where the next run starts.
	var s struct {
		Limit int `json:"learned_limit"`
	}
	_, sj, _ := sawtooth(t, nil, "status", "--db", db, "--json")
	if err := json.Unmarshal([]byte(sj), &s); err != nil || s.Limit < 1 {
		t.Errorf("learned limit not persisted: %v %s", err, sj)
	}
}

// TestQuota_FixedWindowNoRetryInfo drives items through the real binary
// against a fixed-window quota whose 429s carry no RetryInfo (a proxy's, or
// Vertex's): the counter resets at each boundary, so a full window refuses
// every call until then. Every item must end done or dead-lettered for its
// own content, and the client must keep to the window: a pool that ignores
// it is refused several times as often.
//
// The calls-per-item target itself (at most 1.02) is asserted in virtual
// time, where it does not depend on this machine's load
// (limiter.TestLaw_matrixShapes, shape fixed-noretry). In real time, paced
// starts that a loaded machine delays cross into the next window, which
// refuses them: measured at 1,800 items, 1.006-1.014 on a quiet machine,
// 1.021-1.030 beside a CPU hog. The bound here is what no load explains.
func TestQuota_FixedWindowNoRetryInfo(t *testing.T) {
	if testing.Short() {
		t.Skip("drives the real binary for a few seconds")
	}
	// 150 calls a 1 s window, as the matrix's fixed-noretry shape (200)
	// but a little tighter, for about twelve windows.
	const items = 1800
	perItem, limited, toClassify := fixedWindowRun(t, items)
	if perItem > 1.06 {
		t.Errorf("%.3f calls per item (%d refused calls for %d items), want at most 1.06", perItem, limited, toClassify)
	}
}

// fixedWindowRun drains items through the real binary against a fixed
// window with no RetryInfo, checks that none is lost, and returns the
// calls per item, the refused calls and the items classified.
func fixedWindowRun(t *testing.T, items int) (perItem float64, limited int64, toClassify int) {
	t.Helper()
	dir := t.TempDir()
	input := writeItems(t, dir, items, 11)
	sim, url := startSim(t, geminisim.Config{
		RPM: 150, Window: time.Second,
		QuotaModel: geminisim.FixedWindow, RetryInfo: geminisim.RetryAbsent,
		Latency: geminisim.Latency{Base: 20 * time.Millisecond, Jitter: 20 * time.Millisecond},
		Seed:    5,
	})
	db := filepath.Join(dir, "fixed.db")
	code, _, errs := sawtooth(t, simEnv(url), "run", "--db", db, "--input", input, "--quiet")
	if code != 0 {
		t.Fatalf("run exit %d: %s", code, errs)
	}
	st := finalPlaces(t, db, items)
	wantSanitize, wantClassify := expectedDead(items)
	var dead []int
	for _, s := range st.Counts.Stages {
		dead = append(dead, s.Dead)
	}
	if lost := items - st.Counts.Done - wantSanitize - wantClassify; lost != 0 || dead[0] != wantSanitize || dead[1] != wantClassify {
		t.Errorf("%d items lost: done %d, dead per stage %v; want dead %d at sanitize and %d at classify",
			lost, st.Counts.Done, dead, wantSanitize, wantClassify)
	}
	stats := sim.Stats()
	toClassify = items - wantSanitize
	perItem = float64(stats.Calls) / float64(toClassify)
	limited = stats.Outcomes[geminisim.OutcomeRateLimited]
	t.Logf("calls %d for %d items (%.3f per item), 429s %d, peak in flight %d",
		stats.Calls, toClassify, perItem, limited, stats.PeakInFlight)
	if limited == 0 {
		t.Errorf("the quota never pushed back: the test exercised nothing")
	}
	return perItem, limited, toClassify
}

func readTexts(t testing.TB, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r struct{ ID, Text string }
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		m[r.ID] = r.Text
	}
	return m
}

// TestQuota_CreditsDepletedStops: the account's prepayment credits run out
// part-way (the API's 429 "Your prepayment credits are depleted…", no
// details). The run stops at once with exit 3 and says what happened and
// what to do, instead of retrying at the limiter's floor all night; a run
// once credits are added finishes, no item answered twice.
func TestQuota_CreditsDepletedStops(t *testing.T) {
	const items, credits = 200, 40
	dir := t.TempDir()
	input := writeItems(t, dir, items, 11)
	sim, url := startSim(t, geminisim.Config{Credits: credits, Seed: 11})
	db := filepath.Join(dir, "c.db")
	code, _, errs := sawtooth(t, simEnv(url), "run", "--db", db, "--input", input, "--quiet", "--fixed", "8")
	if code != 3 {
		t.Fatalf("run exit %d, want 3: %s", code, errs)
	}
	for _, want := range []string{"the account cannot pay for calls", "Your prepayment credits are depleted", "add credits or enable billing", "sawtooth run --db"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr does not say %q:\n%s", want, errs)
		}
	}
	st := sim.Stats()
	// The 8 calls in flight when the first refusal came back may be
	// refused too, and a worker may start one more before the halt reaches
	// it; an unstopped run is refused hundreds of times.
	if refused := st.Outcomes[geminisim.OutcomeNoCredits]; refused < 1 || refused > 2*8 {
		t.Errorf("%d calls refused for credits: want the run to stop at the first (8 calls in flight at once)", refused)
	}
	s := status(t, db)
	for _, stage := range s.Counts.Stages {
		// The safety-blocked items are the only dead letters.
		if blocked := st.Outcomes[geminisim.OutcomeBlockPrompt]; stage.Stage == "classify" && int64(stage.Dead) != blocked {
			t.Errorf("%d items dead-lettered at classify, %d blocked: some for the account's billing", stage.Dead, blocked)
		}
	}

	paid, url2 := startSim(t, geminisim.Config{Seed: 11})
	if code, _, errs := sawtooth(t, simEnv(url2), "run", "--db", db, "--quiet"); code != 0 {
		t.Fatalf("resume exit %d: %s", code, errs)
	}
	finalPlaces(t, db, items)
	for h, it := range paid.Stats().Items {
		if it.OK > 0 && st.Items[h].OK > 0 {
			t.Errorf("item %s answered before the stop and again after it", h[:8])
		}
	}
}

// TestQuota_RefusedForeverStops: a quota that never clears and names
// nothing (a per-day quota behind a proxy: 429s with no QuotaFailure and
// no RetryInfo) is warned about, then stops the run with exit 3 as quota
// exhausted after --max-refused, saying how to resume, instead of one
// call every few seconds all night.
func TestQuota_RefusedForeverStops(t *testing.T) {
	const items, perDay = 100, 20
	dir := t.TempDir()
	input := writeItems(t, dir, items, 12)
	sim, url := startSim(t, geminisim.Config{RPD: perDay, QuotaFailure: geminisim.QuotaFailureAbsent, RetryInfo: geminisim.RetryAbsent, Seed: 12})
	db := filepath.Join(dir, "r.db")
	code, _, errs := sawtooth(t, simEnv(url), "run", "--db", db, "--input", input, "--start", "4", "--max-refused", "6s")
	if code != 3 {
		t.Fatalf("run exit %d, want 3: %s", code, errs)
	}
	warn := strings.Index(errs, `msg="every call refused"`)
	stop := strings.Index(errs, "quota exhausted for classify: every call refused (429) for ")
	if warn < 0 || stop < warn || !strings.Contains(errs, "then run again to resume") || !strings.Contains(errs, "sawtooth run --db") {
		t.Fatalf("want a warning, then the stop saying how to resume:\n%s", errs)
	}
	st := sim.Stats()
	t.Logf("%d calls, %d refused", st.Calls, st.Outcomes[geminisim.OutcomeRateLimited])
	s := status(t, db)
	if s.Counts.Done > perDay || s.Counts.Items != items {
		t.Errorf("status %+v", s.Counts)
	}
	for _, stage := range s.Counts.Stages {
		if stage.Stage == "classify" && stage.Queued == 0 {
			t.Errorf("no item left queued at classify: %+v", s.Counts)
		}
	}
}
