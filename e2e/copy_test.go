package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/stages"
	"github.com/sawtooth-dev/sawtooth/store"
	"github.com/sawtooth-dev/sawtooth/store/storecopy/pgstage"
	"github.com/sawtooth-dev/sawtooth/store/storetest"
)

// TestCopy_SIGKILLIntoPostgres kills a real `sawtooth copy` from a bbolt
// file into PostgreSQL once it has copied ten thousand of its items:
// status and report then find no pipeline there and say to run the copy
// again, and run finds no item (none takes the part copied for the
// pipeline); the copy run again (over the empty pipeline run made) puts
// every item in its place, the source's counts and aggregate with it.
func TestCopy_SIGKILLIntoPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a real process")
	}
	const items, queued = 30_000, 100
	url := startPostgres(t)
	from := copySource(t, items, queued)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "copy", "--from", from, "--to", url)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stderr)
	for lines.Scan() && lines.Text() != "copied 10000 items" {
	}
	cmd.Process.Signal(syscall.SIGKILL)
	for lines.Scan() {
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("the copy finished before its kill: give it more items")
	}
	for _, args := range [][]string{
		{"status", "--db", url, "--json"},
		{"report", "--db", url},
	} {
		code, out, errs := sawtooth(t, nil, args...)
		if code != 2 || !strings.Contains(errs, "run the copy again") {
			t.Errorf("%s after a killed copy: exit %d, %q %q; want a refusal that says to run the copy again", args[0], code, out, errs)
		}
	}
	if n := pgCount(t, url, "SELECT count(*) FROM pg_namespace WHERE nspname = 'sawtooth'"); n != 0 {
		t.Errorf("the killed copy left a sawtooth schema, which every command opens")
	}
	if n := pgCount(t, url, "SELECT count(*) FROM sawtooth_copying.item"); n < 10_000 || n >= items+queued {
		t.Fatalf("the killed copy staged %d items, want it killed midway", n)
	}

	// run with no input starts an empty pipeline, as on any new
	// database: not one of the items the killed copy staged.
	if code, out, errs := sawtooth(t, []string{"GEMINI_API_KEY=unused"}, "run", "--db", url, "--quiet"); code != 0 {
		t.Errorf("run after a killed copy: exit %d, %q %q", code, out, errs)
	}
	if s := status(t, url); s.Counts.Items != 0 {
		t.Errorf("after a killed copy, run found %d items; want none", s.Counts.Items)
	}

	code, out, errs := sawtooth(t, nil, "copy", "--from", from, "--to", url)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("copied %d items", items+queued)) {
		t.Fatalf("copy again: exit %d, %q %q", code, out, errs)
	}
	want, got := status(t, from), status(t, url)
	if w, g := mustJSON(t, want.Counts), mustJSON(t, got.Counts); w != g {
		t.Errorf("counts after the copy again:\n got %s\nwant %s", g, w)
	}
	if got.Counts.Items != items+queued {
		t.Errorf("%d items copied, want %d", got.Counts.Items, items+queued)
	}
	if w, g := aggregate(t, from), aggregate(t, url); w != g {
		t.Errorf("aggregate after the copy again:\n got %s\nwant %s", g, w)
	}
	if n := pgCount(t, url, "SELECT count(*) FROM pg_namespace WHERE nspname = 'sawtooth_copying'"); n != 0 {
		t.Errorf("the finished copy left its staging schema behind")
	}
	if code, out, errs := sawtooth(t, nil, "verify", "--db", url); code != 0 {
		t.Errorf("verify of the copy: exit %d: %s %s", code, out, errs)
	}
	if code, _, errs := sawtooth(t, nil, "copy", "--from", from, "--to", url); code != 2 || !strings.Contains(errs, fmt.Sprintf("already holds %d items", items+queued)) {
		t.Errorf("a third copy: exit %d, %q; want a usage error: the pipeline holds items", code, errs)
	}
}

// copySource writes a bbolt pipeline of items items through every stage
// (every 97th dead at classify) and queued more just ingested, and
// returns its path.
func copySource(t *testing.T, items, queued int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "source.db")
	db, err := store.Open(path, store.Options{Stages: storetest.Stages, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ingest := func(from, n int) {
		var recs []pipeline.Record
		for i := from; i < from+n; i++ {
			rec := storetest.Record(fmt.Sprintf("r%06d", i), fmt.Sprintf("%s number %d in the app", []string{"bug", "price", "praise"}[i%3], i), []string{"a", "b", "c"}[i%4%3], fmt.Sprint(1+i%5))
			rec.Fields["date"] = fmt.Sprintf("2026-%02d-01", 1+i%12)
			recs = append(recs, rec)
		}
		if _, err := db.Ingest(recs); err != nil {
			t.Fatal(err)
		}
	}
	ingest(0, items)
	var dead []string
	for i := 0; i < items; i += 97 {
		dead = append(dead, fmt.Sprintf("r%06d", i))
	}
	storetest.Advance(t, db, "sanitize")
	storetest.Advance(t, db, "classify", dead...)
	// The aggregate stage itself, so that verify's recount agrees.
	qs, err := db.Queued("aggregate", 0, items)
	if err != nil {
		t.Fatal(err)
	}
	agg := &stages.Aggregate{}
	var ts []pipeline.Transition
	for _, q := range qs {
		q.Item.Prev = q.Item.Outputs["classify"]
		res, err := agg.Process(context.Background(), q.Item)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, pipeline.Transition{Stage: "aggregate", ID: q.Item.ID, Seq: q.Seq, Outcome: pipeline.Succeeded, Result: res})
	}
	if err := db.Commit(ts); err != nil {
		t.Fatal(err)
	}
	ingest(items, queued)
	return path
}

// mustJSON is v as JSON, for comparing whole values in messages.
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCopy_StatusWhileACopyIsUnderWay: status on a database a copy is
// still writing says to wait for it, not to run the copy again (which
// would be refused while it runs); once the copy is stopped, it says to
// run the copy again.
func TestCopy_StatusWhileACopyIsUnderWay(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a real process")
	}
	url := startPostgres(t)
	copying, err := pgstage.Stage(context.Background(), url, storetest.Stages)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs := sawtooth(t, nil, "status", "--db", url)
	if code != 2 || !strings.Contains(errs, "under way") || !strings.Contains(errs, "wait for it to finish") || strings.Contains(errs, "run the copy again") {
		t.Errorf("status while a copy is under way: exit %d, %q %q; want a refusal that says to wait for the copy", code, out, errs)
	}
	// A copy killed halfway: its staged schema is left, its lock gone.
	if err := copying.Close(); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `CREATE SCHEMA sawtooth_copying`); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := sawtooth(t, nil, "status", "--db", url); code != 2 || !strings.Contains(errs, "run the copy again") || strings.Contains(errs, "wait for it") {
		t.Errorf("status after a killed copy: exit %d, %q %q; want a refusal that says to run the copy again", code, out, errs)
	}
}
