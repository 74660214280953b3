package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// pgMoney is the classify ledger `status --json` reports.
type pgMoney struct {
	SpentUSD float64 `json:"spent_usd"`
	SavedUSD float64 `json:"saved_usd"`
	Paid     int64   `json:"paid"`
	Cached   int64   `json:"cached"`
}

func classifyLedger(t *testing.T, db string) (pgMoney, statusJSON) {
	t.Helper()
	code, out, errs := sawtooth(t, nil, "status", "--db", db, "--json")
	if code != 0 {
		t.Fatalf("status exit %d: %s", code, errs)
	}
	var s struct {
		Money map[string]pgMoney `json:"money"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return s.Money["classify"], status(t, db)
}

var (
	pgBudgetStop = regexp.MustCompile(`budget \$1\.50 reached \(\$(\d+\.\d\d) spent, ([\d,]+) items left, about \$\d+\.\d\d more at this rate\): raise --budget to continue`)
	pgTotalStop  = regexp.MustCompile(`total budget \$0\.0100 reached \(\$\d+\.\d\d spent in this database`)
)

// TestFleet_CacheAndBudget: on a PostgreSQL --db, the answer cache and
// the budgets work as on a file. A run with --budget parks (exit 3) at
// its cap; two workers then drain the rest together: every distinct text
// is paid once in all (the fleet's answer flights make a text both
// workers meet at once wait for one of them), and the database's ledger
// agrees with what the simulator billed, to the cent. status and report show the money; a
// --budget-total below the lifetime spend stops a new run before any
// call.
func TestFleet_CacheAndBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and runs the binary against the simulator")
	}
	url := startPostgres(t)
	dir := t.TempDir()
	const items = 600
	input, distinct := writeDuplicates(t, dir, items, 0.30, 8)
	sim, simURL := startSim(t, cacheSim())
	env := simEnv(simURL)
	// $100 per million tokens both ways: about $0.02 a call, and the
	// simulator's billed tokens price exactly.
	const perM = 100.0
	args := []string{"run", "--db", url, "--quiet", "--timeout", "20s", "--start", "8",
		"--price-in", fmt.Sprint(perM), "--price-out", fmt.Sprint(perM)}

	r := run(t, env, append(args, "--input", input, "--budget", "1.5", "--json")...)
	if r.code != 3 {
		t.Fatalf("run with --budget 1.5: exit %d, want 3\n%s", r.code, r.err)
	}
	if m := pgBudgetStop.FindStringSubmatch(r.err); m == nil {
		t.Fatalf("stderr lacks the budget message %s:\n%s", pgBudgetStop, r.err)
	}
	// A run that stopped leaves no answer flight behind for the others
	// to wait on.
	if n := pgCount(t, url, `SELECT count(*) FROM sawtooth.answer_flight`); n != 0 {
		t.Errorf("the budgeted run left %d answer flights behind", n)
	}
	first := parseSummary(t, r.out).Stages["classify"]
	if first.CostUSD > 1.5 || first.CostUSD < 1.4 {
		t.Errorf("the budgeted run spent $%.4f: want within a few calls under $1.50, never above", first.CostUSD)
	}
	// The report shows the last run's cached answers and savings.
	code, out, errs := sawtooth(t, nil, "report", "--db", url, "--format", "text")
	if first.Cached == 0 || code != 0 || !strings.Contains(out, fmt.Sprintf("%d cached answers (no call)", first.Cached)) {
		t.Errorf("the budgeted run reused %d answers; report exit %d lacks them:\n%s%s", first.Cached, code, out, errs)
	}
	texts := itemTexts(t, input)
	before, _, _ := billedCalls(texts, sim)
	answered := map[string]bool{}
	for id := range answers(t, url) {
		answered[texts[id]] = true
	}

	w := []*worker{startWorker(t, env, args...), startWorker(t, env, args...)}
	for i, wk := range w {
		<-wk.done
		if wk.err != nil {
			t.Fatalf("worker %d: %v\n%s", i, wk.err, wk.stderr.String())
		}
	}
	after, total, tokens := billedCalls(texts, sim)
	for text, n := range after {
		switch {
		case answered[text] && n != before[text]:
			t.Errorf("text %q paid again after its answer was committed", text)
		case n != 1:
			t.Errorf("text %q answered %d times, want once across the fleet", text, n)
		}
	}
	if len(after) != len(distinct) {
		t.Errorf("%d texts answered, want the %d distinct ones", len(after), len(distinct))
	}
	checkTwins(t, input, url)
	finalPlaces(t, url, items)

	money, st := classifyLedger(t, url)
	dead := 0
	for _, s := range st.Counts.Stages {
		if s.Stage == "classify" {
			dead = s.Dead
		}
	}
	billed := float64(tokens) * perM / 1e6
	if math.Abs(billed-money.SpentUSD) >= 0.005 {
		t.Errorf("the simulator billed $%.4f, the database's ledger records $%.4f", billed, money.SpentUSD)
	}
	if money.Paid != total || money.Paid+money.Cached+int64(dead) != items || money.SavedUSD <= 0 {
		t.Errorf("ledger %+v: want %d paid (the billed calls), paid + cached + %d dead = %d, and a saving", money, total, dead, items)
	}

	var lines []string
	for i := range 20 {
		lines = append(lines, fmt.Sprintf(`{"id":"new%02d","text":"a new review, number %d","app":"photo-editor","rating":3,"date":"2026-12-01"}`, i, i))
	}
	more := filepath.Join(dir, "more.jsonl")
	if err := os.WriteFile(more, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = run(t, env, append(args, "--input", more, "--budget-total", "0.01")...)
	if r.code != 3 || !pgTotalStop.MatchString(r.err) {
		t.Errorf("run with --budget-total $0.01 after $%.2f spent: exit %d, want 3 and %s\n%s", money.SpentUSD, r.code, pgTotalStop, r.err)
	}
	if _, n, _ := billedCalls(texts, sim); n != total {
		t.Errorf("%d calls billed past --budget-total", n-total)
	}
	t.Logf("FIGURES | postgres cache+budget | %d items, %d distinct texts | parked at $%.4f of $1.50 | %d billed calls in all, two workers | ledger $%.4f spent, $%.4f saved, %d cached | simulator $%.4f |",
		items, len(distinct), first.CostUSD, total, money.SpentUSD, money.SavedUSD, money.Cached, billed)
}

// pgCount runs a counting query on the database at url.
func pgCount(t *testing.T, url, query string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}
