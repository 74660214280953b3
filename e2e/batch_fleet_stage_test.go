package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// keyProxy stands between a fleet's workers and the simulator and tells
// which worker sent each Batch API request, so a test can kill the one
// that reached a step: the simulator's Observe says which step, not whose
// request. Each worker calls with its own API key (the proxy puts the
// simulator's in its place), and the Batch API's requests reach the
// simulator one at a time, so the worker whose request holds the gate is
// the one at the step. Other calls (generateContent) pass freely.
//
// The gate opens once two workers wait at it (or open is called): a
// worker that reached the Batch API first would otherwise create every
// job before the other one started, and the other would only ever take
// over, never drive a job of its own.
type keyProxy struct {
	url string
	rp  *httputil.ReverseProxy

	mu      sync.Mutex
	workers map[string]*worker // by API key
	waiting map[string]bool    // keys that reached the gate
	current *worker            // whose request holds the gate
	first   chan struct{}      // closed when a first Batch API request arrives
	opened  chan struct{}      // closed when the gate opens
	once    sync.Once

	gate sync.Mutex
}

func startKeyProxy(t *testing.T, simURL string) *keyProxy {
	t.Helper()
	target, err := url.Parse(simURL)
	if err != nil {
		t.Fatal(err)
	}
	p := &keyProxy{rp: httputil.NewSingleHostReverseProxy(target), workers: map[string]*worker{}, waiting: map[string]bool{},
		first: make(chan struct{}), opened: make(chan struct{})}
	// A killed worker's request fails at the proxy: that is the test.
	p.rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	srv := httptest.NewServer(p)
	p.url = srv.URL
	t.Cleanup(func() {
		p.open()
		srv.Close()
	})
	return p
}

// start starts a worker that calls through the proxy with key.
func (p *keyProxy) start(t *testing.T, key string, args ...string) *worker {
	t.Helper()
	// Held while the process starts: its first request waits to be
	// told whose it is.
	p.mu.Lock()
	defer p.mu.Unlock()
	w := startWorker(t, envKey(p.url, key), args...)
	p.workers[key] = w
	t.Cleanup(func() {
		if !w.exited() {
			w.cmd.Process.Kill()
			<-w.done
		}
	})
	return w
}

func (p *keyProxy) open() { p.once.Do(func() { close(p.opened) }) }

// sender is the worker whose Batch API request is at the simulator.
func (p *keyProxy) sender() *worker {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.current
}

func (p *keyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("X-Goog-Api-Key")
	p.mu.Lock()
	wk := p.workers[key]
	p.mu.Unlock()
	if wk == nil {
		http.Error(w, "unknown API key", http.StatusUnauthorized)
		return
	}
	if batchAPI(r.URL.Path) {
		p.mu.Lock()
		if len(p.waiting) == 0 {
			close(p.first)
		}
		p.waiting[key] = true
		if len(p.waiting) >= 2 {
			p.open()
		}
		p.mu.Unlock()
		select {
		case <-p.opened:
		case <-r.Context().Done():
			return
		}
		p.gate.Lock()
		defer p.gate.Unlock()
		p.mu.Lock()
		p.current = wk
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			p.current = nil
			p.mu.Unlock()
		}()
	}
	r.Header.Set("X-Goog-Api-Key", geminisim.DefaultAPIKey)
	p.rp.ServeHTTP(w, r)
}

// batchAPI reports whether path is the Batch API's (jobs and their
// files), whose steps the simulator's Observe reports.
func batchAPI(path string) bool {
	return strings.HasSuffix(path, ":batchGenerateContent") || strings.Contains(path, "/batches") || strings.Contains(path, "/files")
}

// stepKill SIGKILLs the worker whose request first reaches its event at
// the simulator, before the simulator answers (after delay, when set:
// the answer goes through and the worker dies while it works on it).
type stepKill struct {
	event geminisim.BatchEvent
	delay time.Duration
	proxy *keyProxy
	clock *heldClock // set for a kill at EventPoll: released once it fired
	// sim, when set, is read as the kill fires: atKill is its Batch API
	// state then.
	sim *geminisim.Server

	mu     sync.Mutex
	victim *worker
	atKill geminisim.BatchStats
	fired  chan struct{}
}

func (k *stepKill) observe(e geminisim.BatchEvent) {
	if e != k.event {
		return
	}
	k.mu.Lock()
	w := k.proxy.sender()
	if k.victim != nil || w == nil {
		k.mu.Unlock()
		return
	}
	k.victim = w
	if k.sim != nil {
		k.atKill = k.sim.BatchStats()
	}
	close(k.fired)
	k.mu.Unlock()
	if k.delay > 0 {
		go func() { time.Sleep(k.delay); w.cmd.Process.Signal(syscall.SIGKILL); k.releaseClock() }()
		return
	}
	w.cmd.Process.Signal(syscall.SIGKILL)
	// The answer must not reach it: wait for the death.
	<-w.done
	k.releaseClock()
}

// releaseClock lets the simulator's clock run on once the kill is done.
func (k *stepKill) releaseClock() {
	if k.clock != nil {
		k.clock.release()
	}
}

// writeCleanItems writes n JSONL reviews with distinct texts and none
// that sanitize or the safety filter turns away, so every item has an
// answer and the dead letters stay empty.
func writeCleanItems(t *testing.T, dir string, n int) string {
	t.Helper()
	var b bytes.Buffer
	for i := range n {
		line, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("r%05d", i), "app": "photo-editor", "rating": 1 + i%5,
			"text": fmt.Sprintf("review %d: the export to the gallery is slow and the filters look great", i)})
		b.Write(line)
		b.WriteByte('\n')
	}
	path := filepath.Join(dir, "items.jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// summaryJob writes a job whose one LLM stage, summarize, answers with a
// schema of its own (not the classify preset's labels) through batch
// jobs in mode, of size items and with deadline, on the PostgreSQL
// database db.
func summaryJob(t *testing.T, dir, db, input, mode string, size int, deadline string) string {
	t.Helper()
	schema := `{"type": "object", "properties": {"summary": {"type": "string"},
  "sentiment": {"type": "string", "enum": ["positive", "negative", "mixed"]},
  "topics": {"type": "array", "items": {"type": "string"}}}, "required": ["summary", "sentiment"]}`
	if err := os.WriteFile(filepath.Join(dir, "summary.schema.json"), []byte(schema), 0o600); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`db: %s
input: {path: %s}
fleet: {lease: 4s}
stages:
  - sanitize: {}
  - llm:
      name: summarize
      prompt: 'Summarise this review in one sentence: {{.Text}}'
      output: {schema_file: summary.schema.json}
      mode: %s
      batch: {size: %d, deadline: %s, poll: 100ms}
`, strconv.Quote(db), strconv.Quote(input), mode, size, deadline)
	path := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFleet_BatchStageSIGKILLAtEachStep: two workers of the real binary
// drain one PostgreSQL pipeline whose LLM stage is not the classify preset
// (summarize, with a JSON schema of its own) through batch jobs, in mode
// batch and in mode auto, and the worker that reaches each step of a
// job's life first is SIGKILLed there: its job created at the API but not
// recorded, its job polled while it runs, its job's results fetched but
// not committed, and its commit under way. The other worker, and a
// worker started in the dead one's place, finish: every item is done
// once, the simulator answered each exactly once and through a batch job
// (none both in a job and online, no job created twice), no job is left
// open, and no item is a dead letter.
func TestFleet_BatchStageSIGKILLAtEachStep(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and kills real processes")
	}
	srv, _ := startPostgresServer(t)
	steps := []struct {
		name  string
		event geminisim.BatchEvent
		delay time.Duration
	}{
		{"between create and record", geminisim.EventCreated, 0},
		{"while polling", geminisim.EventPoll, 0},
		{"while reading results", geminisim.EventResults, 0},
		{"mid-commit", geminisim.EventResults, 20 * time.Millisecond},
	}
	for _, mode := range []string{"batch", "auto"} {
		for _, step := range steps {
			t.Run(mode+": "+step.name, func(t *testing.T) {
				t.Parallel()
				db, err := srv.NewDB("stagekill")
				if err != nil {
					t.Fatal(err)
				}
				k := &stepKill{event: step.event, delay: step.delay, fired: make(chan struct{})}
				fleetStageKill(t, db, fleetCase{mode: mode, deadline: "2m", viaBatch: 60}, k)
			})
		}
	}
}

// fleetCase is a fleet run of 60 items in jobs of 20: the batched stage's
// mode and deadline, the fates of the first jobs created, and how many
// items the jobs should answer (the others online).
type fleetCase struct {
	mode, deadline string
	fates          []geminisim.Fate
	viaBatch       int
}

// fleetStageKill runs a fleet of two workers on db, kills the worker at
// k's step, starts another, checks the outcome and returns the simulator.
func fleetStageKill(t *testing.T, db string, fc fleetCase, k *stepKill) *geminisim.Server {
	const items, size = 60, 20
	dir := t.TempDir()
	input := writeCleanItems(t, dir, items)
	cfg := geminisim.Config{Seed: 7, Batch: geminisim.BatchConfig{
		// A job shows in the list a second after its create: before a
		// dead worker's lease (4s, renewed every third of it) lets
		// another take its job over and look for it.
		Pending: time.Second, Running: 200 * time.Millisecond, Shuffle: true, CreateDelay: time.Second, Observe: k.observe,
		Fates: fc.fates,
	}}
	if k.event == geminisim.EventPoll {
		// However late a loaded worker's first poll, it finds its job
		// PENDING: the simulator's clock stands still until the kill.
		k.clock = newHeldClock()
		cfg.Now = k.clock.Now
	}
	sim, simURL := startSim(t, cfg)
	p := startKeyProxy(t, simURL)
	k.proxy = p
	jobFile := summaryJob(t, dir, db, input, fc.mode, size, fc.deadline)

	first := p.start(t, "worker-1", "run", "-f", jobFile, "--quiet")
	select {
	case <-p.first:
	case <-first.done:
		t.Fatalf("the first worker ended before any batch job: %v\n%s", first.err, first.stderr.String())
	}
	// The job is stored and its items ingested: the second worker runs
	// it from the database alone.
	second := p.start(t, "worker-2", "run", "--db", db, "--quiet")
	go func() {
		select {
		case <-second.done:
			p.open()
		case <-p.opened:
		}
	}()
	victim := waitKill(t, k, first, second)
	<-victim.done
	if ee, ok := victim.err.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the worker at %s was not killed there: %v\n%s", k.event, victim.err, victim.stderr.String())
	}
	survivor := first
	if victim == first {
		survivor = second
	}
	restarted := p.start(t, "worker-3", "run", "--db", db, "--quiet")
	reattached := 0
	for _, w := range []*worker{survivor, restarted} {
		<-w.done
		if w.err != nil {
			t.Fatalf("a worker after the kill: %v\n%s", w.err, w.stderr.String())
		}
		t.Logf("%s", w.stderr.String())
		if m := regexp.MustCompile(` (\d+) re-attached`).FindStringSubmatch(w.stderr.String()); m != nil {
			n, _ := strconv.Atoi(m[1])
			reattached += n
		}
	}
	if k.event == geminisim.EventCreated && reattached == 0 {
		t.Errorf("no worker re-attached the job created before the kill:\n%s\n%s", survivor.stderr.String(), restarted.stderr.String())
	}
	checkFleetStage(t, sim, db, items, fc.viaBatch)
	return sim
}

// waitKill waits until k killed one of the workers and returns it; the
// test fails if every worker ended first.
func waitKill(t *testing.T, k *stepKill, ws ...*worker) *worker {
	t.Helper()
	for {
		select {
		case <-k.fired:
			k.mu.Lock()
			defer k.mu.Unlock()
			return k.victim
		case <-time.After(50 * time.Millisecond):
		}
		ended := 0
		for _, w := range ws {
			if w.exited() {
				ended++
			}
		}
		if ended == len(ws) {
			select {
			case <-k.fired: // at the very end
			default:
				var b strings.Builder
				for _, w := range ws {
					fmt.Fprintf(&b, "%v\n%s\n", w.err, w.stderr.String())
				}
				t.Fatalf("no worker reached %s:\n%s", k.event, b.String())
			}
		}
	}
}

// checkFleetStage checks the end of a fleet run of summaryJob's pipeline
// of items: each item done once with its summary, answered exactly once
// by the simulator, viaBatch of them through a batch job (the others
// online), every job created once and closed, no dead letter.
func checkFleetStage(t *testing.T, sim *geminisim.Server, db string, items, viaBatch int) {
	t.Helper()
	if s := finalPlaces(t, db, items); s.Counts.Done != items {
		t.Errorf("%d items done, want all %d", s.Counts.Done, items)
	}
	if dead := deadLetters(t, db); len(dead) > 0 {
		t.Errorf("%d dead letters, want none; first: %+v", len(dead), dead[0])
	}
	outs := exportStage(t, db, "summarize")
	for id, row := range outs {
		if b, _ := json.Marshal(row); !bytes.Contains(b, []byte(`"sentiment"`)) {
			t.Errorf("item %s: summarize's output has no sentiment: %s", id, b)
			break
		}
	}
	if len(outs) != items {
		t.Errorf("summarize has %d outputs, want %d", len(outs), items)
	}
	answered := okCalls(sim)
	once := 0
	for _, n := range answered {
		if n == 1 {
			once++
		}
	}
	if twice, extra := paidTwice(sim); twice > 0 {
		t.Errorf("%d items answered more than once (%d extra answers)", twice, extra)
	}
	if once != items || len(answered) != items {
		t.Errorf("the simulator answered %d items once (%d items in all), want each of %d once", once, len(answered), items)
	}
	bs := sim.BatchStats()
	if bs.Rows != viaBatch {
		t.Errorf("batch jobs answered %d requests, want %d", bs.Rows, viaBatch)
	}
	for name, n := range bs.ByDisplayName {
		if n != 1 {
			t.Errorf("job %s created %d times", name, n)
		}
	}
	code, out, errs := sawtooth(t, nil, "batch", "list", "--db", db, "--json")
	var jobs []pipeline.BatchJob
	if code != 0 || json.Unmarshal([]byte(out), &jobs) != nil {
		t.Fatalf("batch list: exit %d\n%s%s", code, out, errs)
	}
	named := 0
	for _, j := range jobs {
		if j.Open() {
			t.Errorf("job %d (%s) left open: %+v", j.Num, j.DisplayName, j)
		}
		if j.Name != "" {
			named++
		}
	}
	if named != bs.Created {
		t.Errorf("batch list names %d jobs, the simulator created %d", named, bs.Created)
	}
}

// TestFleet_BatchStageFailedJob: the first batch job created fails at the
// API while two workers drain the summarize stage. In mode batch its
// items go into a new job, whichever worker sends it, and both workers
// end with every item answered: the one that waited for the failed job
// no longer stops with them "still queued" while the other sends them.
// In mode auto they go online. Each item is answered once either way.
//
// Jobs are counted by the items they were sent: the failed job's again
// in mode batch. How many jobs hold them varies: when both workers
// reserve at the same moment from a queue of less than two jobs' items,
// each takes what the other has not locked (FOR UPDATE SKIP LOCKED), and
// one job's items go into two smaller ones at the same price. That can
// happen at the third job (the gate lets both workers' creates through
// at once, and each reserves right after) and, in mode batch, at the
// re-sent one (both start a round when the last job closes).
func TestFleet_BatchStageFailedJob(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and runs real processes")
	}
	srv, _ := startPostgresServer(t)
	const items, size = 60, 20
	for _, tc := range []struct {
		mode         string
		sent, splits int // items sent in jobs; reserves that may split
		viaBatch     int
	}{{"batch", items + size, 2, items}, {"auto", items, 1, items - size}} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			db, err := srv.NewDB("failedjob")
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			input := writeCleanItems(t, dir, items)
			sim, simURL := startSim(t, geminisim.Config{Seed: 7, Batch: geminisim.BatchConfig{
				Pending: time.Second, Running: 200 * time.Millisecond, Fates: []geminisim.Fate{geminisim.FateFail},
			}})
			p := startKeyProxy(t, simURL)
			first := p.start(t, "worker-1", "run", "-f", summaryJob(t, dir, db, input, tc.mode, size, "2m"), "--quiet")
			select {
			case <-p.first:
			case <-first.done:
				t.Fatalf("the first worker ended before any batch job: %v\n%s", first.err, first.stderr.String())
			}
			second := p.start(t, "worker-2", "run", "--db", db, "--quiet")
			go func() {
				select {
				case <-second.done:
					p.open()
				case <-p.opened:
				}
			}()
			for _, w := range []*worker{first, second} {
				<-w.done
				if w.err != nil {
					t.Errorf("a worker: %v\n%s", w.err, w.stderr.String())
				}
			}
			checkJobItems(t, db, size, tc.sent, tc.splits)
			checkFleetStage(t, sim, db, items, tc.viaBatch)
		})
	}
}

// checkJobItems checks the batch jobs of the database at db: each holds
// at most size items, they hold sent in all, and there are as many as
// sent fills, plus at most splits.
func checkJobItems(t *testing.T, db string, size, sent, splits int) {
	t.Helper()
	code, out, errs := sawtooth(t, nil, "batch", "list", "--db", db, "--json")
	var jobs []pipeline.BatchJob
	if code != 0 || json.Unmarshal([]byte(out), &jobs) != nil {
		t.Fatalf("batch list: exit %d\n%s%s", code, out, errs)
	}
	var held int
	var sizes []int
	for _, j := range jobs {
		held += len(j.Items)
		sizes = append(sizes, len(j.Items))
		if len(j.Items) > size {
			t.Errorf("job %d holds %d items, more than the size %d", j.Num, len(j.Items), size)
		}
	}
	if full := (sent + size - 1) / size; held != sent || len(jobs) < full || len(jobs) > full+splits {
		t.Errorf("%d jobs hold %d items (%v), want %d items in %d to %d jobs", len(jobs), held, sizes, sent, full, full+splits)
	}
}

// TestFleet_BatchStageAutoDeadline: in mode auto, none of the jobs ever
// leaves PENDING, and the worker that first polls one is SIGKILLed. Past
// the batch deadline the other worker and a worker started in the dead
// one's place cancel every job, the dead worker's too once its lease
// ended, and answer all the items online: each once, none through a job.
func TestFleet_BatchStageAutoDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and kills real processes")
	}
	// Every job stuck, however many the run creates: two workers that
	// reserve at once may split the last 20 items into two jobs (see
	// TestFleet_BatchStageFailedJob), and a fourth job that succeeded
	// would answer items through the batch.
	stuck := slices.Repeat([]geminisim.Fate{geminisim.FateStuck}, 60)
	k := &stepKill{event: geminisim.EventPoll, fired: make(chan struct{})}
	// The deadline leaves a loaded machine time to start both workers
	// and create the jobs before it passes.
	sim := fleetStageKill(t, startPostgres(t), fleetCase{mode: "auto", deadline: "12s", fates: stuck}, k)
	if st := sim.BatchStats(); st.Cancels != st.Created || st.Created == 0 {
		t.Errorf("%d of %d jobs cancelled, want every one: a job left at the API could still run and be billed", st.Cancels, st.Created)
	}
}
