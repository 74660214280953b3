package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// cacheSim answers quickly, with unbilled transient faults only (503s and
// 500s bill nothing), so every billed call is an answer.
func cacheSim() geminisim.Config {
	return geminisim.Config{
		RPM: 20000, Window: time.Second,
		Latency: geminisim.Latency{Base: 5 * time.Millisecond, Jitter: 10 * time.Millisecond},
		Faults:  geminisim.Faults{Err503: 0.02, Err500: 0.01},
		Seed:    11,
	}
}

// writeDuplicates writes n JSONL reviews of which dupShare repeat, word
// for word, the text of an earlier review (with their own id, app and
// date, as in a real feed). It returns the path and the distinct texts.
func writeDuplicates(t testing.TB, dir string, n int, dupShare float64, seed uint64) (string, map[string]bool) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed))
	themes := []string{"the app crashes when I open it", "the subscription is too expensive", "please add a dark mode",
		"the layout is confusing", "I love this app", "it is fine I guess"}
	distinct := map[string]bool{}
	var texts []string
	var b bytes.Buffer
	dups := int(math.Round(float64(n) * dupShare))
	for i := 0; i < n; i++ {
		var text string
		// The first item is never a duplicate; after it, duplicates are
		// spread at random until their share is used.
		if i > 0 && dups > 0 && rng.IntN(n-i) < dups {
			text = texts[rng.IntN(len(texts))]
			dups--
		} else {
			text = fmt.Sprintf("%s (note %d)", themes[rng.IntN(len(themes))], i)
			texts = append(texts, text)
			distinct[text] = true
		}
		line, _ := json.Marshal(map[string]any{
			"id": fmt.Sprintf("d%05d", i), "text": text,
			"app": []string{"wallpaper-hd", "photo-editor", "fitness-pal"}[i%3], "rating": 1 + rng.IntN(5),
			"date": fmt.Sprintf("2026-%02d-%02d", 1+rng.IntN(12), 1+rng.IntN(28)),
		})
		b.Write(line)
		b.WriteByte('\n')
	}
	path := filepath.Join(dir, "dups.jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, distinct
}

// billedCalls is the answers the simulators billed per distinct text
// (texts maps item ids to their texts; the simulator keys its accounting
// by the item id classify sends, or by the text's hash), in all, and the
// tokens billed.
func billedCalls(texts map[string]string, sims ...*geminisim.Server) (perText map[string]int64, total, tokens int64) {
	byKey := map[string]string{}
	for id, text := range texts {
		byKey[geminisim.ItemID(id)] = text
		byKey[geminisim.ItemHash(text)] = text
	}
	perText = map[string]int64{}
	for _, s := range sims {
		st := s.Stats()
		for k, it := range st.Items {
			perText[byKey[k]] += it.OK
			tokens += it.BilledTokens
		}
		for _, o := range []geminisim.Outcome{geminisim.OutcomeOK, geminisim.OutcomeMalformed, geminisim.OutcomeBlockPrompt,
			geminisim.OutcomeBlockCandidate, geminisim.OutcomeMaxTokens} {
			total += st.Outcomes[o]
		}
	}
	return perText, total, tokens
}

// abandonedCalls counts, per text of texts (by id), the admitted calls
// whose client went away before the answer (a timeout, a kill): the
// simulator counted them as answered, the run never saw them.
func abandonedCalls(texts map[string]string, sims ...*geminisim.Server) map[string]int64 {
	perText := map[string]int64{}
	for _, s := range sims {
		items := s.Stats().Items
		for id, text := range texts {
			if n := items[geminisim.ItemID(id)].Abandoned; n > 0 {
				perText[text] += n
			}
		}
	}
	return perText
}

// askers lists, per text of texts (by id), the items that made a call for
// it.
func askers(texts map[string]string, sims ...*geminisim.Server) map[string][]string {
	perText := map[string][]string{}
	for _, s := range sims {
		items := s.Stats().Items
		for id, text := range texts {
			if items[geminisim.ItemID(id)].Calls > 0 {
				perText[text] = append(perText[text], id)
			}
		}
	}
	return perText
}

// answers exports each item's classify answer (label, confidence, reason)
// by id.
func answers(t testing.TB, db string) map[string]string {
	t.Helper()
	r := run(t, nil, "export", "--db", db, "--stage", "classify")
	if r.code != 0 {
		t.Fatalf("export exit %d: %s", r.code, r.err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.out), "\n") {
		if line == "" {
			continue
		}
		var row struct {
			ID         string  `json:"id"`
			Label      string  `json:"label"`
			Confidence float64 `json:"confidence"`
			Reason     string  `json:"reason"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("export line %q: %v", line, err)
		}
		m[row.ID] = fmt.Sprintf("%s|%v|%s", row.Label, row.Confidence, row.Reason)
	}
	return m
}

// checkTwins asserts that every duplicate's answer equals its twins'.
func checkTwins(t testing.TB, input, db string) {
	t.Helper()
	got := answers(t, db)
	byText := map[string]string{}
	for id, text := range itemTexts(t, input) {
		a, ok := got[id]
		if !ok {
			t.Errorf("item %s has no classify answer", id)
			continue
		}
		if twin, seen := byText[text]; seen && twin != a {
			t.Errorf("item %s answered %q, its twin %q (same text %q)", id, a, twin, text)
		}
		byText[text] = a
	}
}

// runSummary is the part of `run --json` the cache tests read.
type runSummary struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Stages  map[string]struct {
		Done     int64   `json:"done"`
		Calls    int64   `json:"calls"`
		Cached   int64   `json:"cached"`
		CostUSD  float64 `json:"cost_usd"`
		SavedUSD float64 `json:"saved_usd"`
	} `json:"stages"`
}

func parseSummary(t testing.TB, out string) runSummary {
	t.Helper()
	var s runSummary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("run --json: %v\n%s", err, out)
	}
	return s
}

// TestCache_DuplicatesPaidOnce: 3,000 reviews, 30% of them word-for-word
// duplicates: the simulator bills exactly one call per distinct text, and
// every duplicate's answer equals its twin's.
func TestCache_DuplicatesPaidOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary against the simulator")
	}
	t.Parallel()
	dir := t.TempDir()
	input, distinct := writeDuplicates(t, dir, 3000, 0.30, 5)
	sim, url := startSim(t, cacheSim())
	db := filepath.Join(dir, "cache.db")
	// The quota (20,000 a second) never refuses, so without a ceiling the
	// law climbs to hundreds of calls in flight; on a loaded machine the
	// simulator (in this -race process) then answers some after the 20 s
	// timeout, and each such call is retried: a second call of the same
	// item, which is the retry policy's cost, not the cache's (counted
	// apart below). The ceiling keeps this test about the cache.
	r := run(t, simEnv(url), "run", "--db", db, "--input", input, "--quiet", "--json", "--timeout", "20s", "--start", "32", "--ceiling", "128")
	if r.code != 0 {
		t.Fatalf("run exit %d: %s", r.code, r.err)
	}
	texts := itemTexts(t, input)
	perText, total, _ := billedCalls(texts, sim)
	abandoned := abandonedCalls(texts, sim)
	for text, n := range perText {
		if n-abandoned[text] != 1 {
			t.Errorf("text %q answered %d times (%d of them to a client gone), want once", text, n, abandoned[text])
		}
	}
	var gone int64
	for _, n := range abandoned {
		gone += n
	}
	if len(perText) != len(distinct) || total-gone != int64(len(distinct)) {
		t.Errorf("%d billed calls (%d of them to a client gone) for %d distinct texts", total, gone, len(distinct))
	}
	// The cache's own claim, whatever the retries: of the items sharing a
	// text, only one ever asked.
	for text, ids := range askers(texts, sim) {
		if len(ids) != 1 {
			t.Errorf("text %q asked by %d items %v, want one", text, len(ids), ids)
		}
	}
	sum := parseSummary(t, r.out)
	c := sum.Stages["classify"]
	if c.Cached != 3000-int64(len(distinct)) || c.SavedUSD <= 0 {
		t.Errorf("summary: %d cached answers, $%.4f saved; want %d cached and a saving", c.Cached, c.SavedUSD, 3000-len(distinct))
	}
	checkTwins(t, input, db)
	finalPlaces(t, db, 3000)
	t.Logf("FIGURES | cache | %d items, %d distinct texts | %d billed calls, %d to a client gone | %d cached answers | $%.4f spent, $%.4f saved |",
		3000, len(distinct), total, gone, c.Cached, c.CostUSD, c.SavedUSD)
}

// TestCache_SIGKILLResume: a run killed mid-flight and resumed still pays
// once per distinct text, except for answers the kill caught in flight
// (answered, not yet committed): nothing committed is ever paid again,
// and duplicates still equal their twins.
func TestCache_SIGKILLResume(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a real process")
	}
	t.Parallel()
	dir := t.TempDir()
	input, distinct := writeDuplicates(t, dir, 3000, 0.30, 6)
	cfg := cacheSim()
	cfg.Latency = geminisim.Latency{Base: 20 * time.Millisecond, Jitter: 20 * time.Millisecond}
	sim, url := startSim(t, cfg)
	db := filepath.Join(dir, "killed.db")
	const ceiling = 16
	args := []string{"run", "--db", db, "--input", input, "--quiet", "--timeout", "20s", "--start", "16", "--ceiling", fmt.Sprint(ceiling)}

	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), simEnv(url)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(time.Minute)
	for sim.Stats().Outcomes[geminisim.OutcomeOK] < int64(len(distinct))/3 {
		if time.Now().After(deadline) {
			t.Fatal("the run made too few calls to kill it mid-flight")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
	idle(t, sim)
	texts := itemTexts(t, input)
	before, _, _ := billedCalls(texts, sim)
	committed := map[string]bool{}
	for id := range answers(t, db) {
		committed[texts[id]] = true
	}

	if r := run(t, simEnv(url), args...); r.code != 0 {
		t.Fatalf("resume exit %d: %s", r.code, r.err)
	}
	after, total, _ := billedCalls(texts, sim)
	caught := 0
	for text, n := range after {
		switch {
		case committed[text] && n != before[text]:
			t.Errorf("text %q paid again after its answer was committed", text)
		case n == 2 && before[text] == 1:
			caught++ // answered before the kill, not committed: paid again
		case n > 1:
			t.Errorf("text %q answered %d times", text, n)
		}
	}
	// What a kill throws away is bounded by the runner's backlog: the
	// calls in flight, and the answers that came in while the oldest
	// waited for its commit, for at most pipeline.DefaultMaxBacklogAge
	// before calls stop starting: a ceiling's worth per fastest round
	// trip. On an idle machine commits land in milliseconds and a kill
	// catches about the calls in flight; beside CPU hogs a commit can
	// take the whole 100 ms (33 caught once, where 2x the ceiling was
	// asserted).
	if bound := ceiling + ceiling*int(pipeline.DefaultMaxBacklogAge/cfg.Latency.Base); caught > bound {
		t.Errorf("%d texts paid twice; a kill can catch at most the %d calls in flight and %v of answers, %d", caught, ceiling, pipeline.DefaultMaxBacklogAge, bound)
	}
	if total != int64(len(distinct)+caught) {
		t.Errorf("%d billed calls for %d distinct texts and %d caught by the kill", total, len(distinct), caught)
	}
	checkTwins(t, input, db)
	finalPlaces(t, db, 3000)
	t.Logf("FIGURES | cache+kill | %d distinct texts | %d billed calls | %d caught in flight by the kill |", len(distinct), total, caught)
}

var budgetStop = regexp.MustCompile(`budget \$5\.00 reached \(\$(\d+\.\d\d) spent, ([\d,]+) items left, about \$(\d+\.\d\d) more at this rate\): raise --budget to continue`)

// TestBudget_ParksAndResumes: --budget stops the run with exit 3 within
// one call's cost of the budget and never above; the simulator's billed
// tokens priced agree with the recorded spend to the cent; a higher
// budget finishes the run, and the lifetime spend still agrees.
func TestBudget_ParksAndResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary against the simulator")
	}
	t.Parallel()
	dir := t.TempDir()
	input, _ := writeDuplicates(t, dir, 1000, 0, 7)
	sim, url := startSim(t, cacheSim())
	db := filepath.Join(dir, "budget.db")
	// One price both ways, so the simulator's billed tokens (input and
	// output together) price exactly: $100 per million tokens, about
	// $0.02 a call.
	const perM = 100.0
	args := []string{"run", "--db", db, "--input", input, "--quiet", "--json", "--timeout", "20s", "--start", "16",
		"--price-in", fmt.Sprint(perM), "--price-out", fmt.Sprint(perM)}
	r := run(t, simEnv(url), append(args, "--budget", "5")...)
	if r.code != 3 {
		t.Fatalf("run with --budget 5: exit %d, want 3\n%s", r.code, r.err)
	}
	m := budgetStop.FindStringSubmatch(r.err)
	if m == nil {
		t.Fatalf("stderr lacks the budget message %s:\n%s", budgetStop, r.err)
	}
	sum := parseSummary(t, r.out)
	spent := sum.Stages["classify"].CostUSD
	texts := itemTexts(t, input)
	_, _, tokens := billedCalls(texts, sim)
	billed := float64(tokens) * perM / 1e6
	if spent > 5 || 5-spent > 0.05 {
		t.Errorf("spent $%.4f: want within one call's cost (about $0.02) under $5.00, never above", spent)
	}
	if math.Abs(billed-spent) >= 0.005 {
		t.Errorf("the simulator billed $%.4f, the run recorded $%.4f", billed, spent)
	}
	if m[1] != fmt.Sprintf("%.2f", spent) {
		t.Errorf("message says $%s spent, the summary $%.4f", m[1], spent)
	}

	r = run(t, simEnv(url), append(args, "--budget", "100")...)
	if r.code != 0 {
		t.Fatalf("resume with --budget 100: exit %d\n%s", r.code, r.err)
	}
	finalPlaces(t, db, 1000)
	_, total, tokens := billedCalls(texts, sim)
	if total != 1000 {
		t.Errorf("%d billed calls for 1,000 distinct texts: an item was paid twice", total)
	}
	lifetime := statusMoney(t, db)
	if billed := float64(tokens) * perM / 1e6; math.Abs(billed-lifetime) >= 0.005 {
		t.Errorf("the simulator billed $%.4f in all, the database records $%.4f", billed, lifetime)
	}
	t.Logf("FIGURES | budget | stopped at $%.4f of $5.00 (exit 3), %s items left | simulator billed $%.4f | lifetime $%.4f after the resume | %s", spent, m[2], billed, lifetime, m[0])
}

// statusMoney is the lifetime spend `status --json` reports.
func statusMoney(t testing.TB, db string) float64 {
	t.Helper()
	r := run(t, nil, "status", "--db", db, "--json")
	if r.code != 0 {
		t.Fatalf("status exit %d: %s", r.code, r.err)
	}
	var s struct {
		Money map[string]struct {
			SpentUSD float64 `json:"spent_usd"`
		} `json:"money"`
	}
	if err := json.Unmarshal([]byte(r.out), &s); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.out)
	}
	return s.Money["classify"].SpentUSD
}
