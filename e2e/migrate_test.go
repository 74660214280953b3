package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
)

// TestMigrate_RefusedWhileAnOldWorkerLives: `sawtooth migrate` on a
// pipeline of schema 7 that a worker of that version still beats a
// session in exits 1 naming the worker and what to do, changing nothing;
// once the worker has ended its session the same command migrates.
func TestMigrate_RefusedWhileAnOldWorkerLives(t *testing.T) {
	u := startPostgres(t)
	if code, _, stderr := sawtooth(t, nil, "migrate", "--db", u); code != 0 {
		t.Fatalf("migrate a new pipeline: exit %d: %s", code, stderr)
	}
	defs := make([]pipeline.StageDef, len(cliStages))
	for i, s := range cliStages {
		defs[i].Name = s
	}
	ctx := context.Background()
	old, err := postgres.Open(ctx, u, postgres.Options{Stages: defs, Owner: "old-host:7"})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := old.BeginSession(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	schema := postgres.DefaultSchema
	downgradeTo7(t, conn)

	code, _, stderr := sawtooth(t, nil, "migrate", "--db", u)
	for _, want := range []string{"old-host:7 (a live session) still works on it", "stop those workers", "then run `sawtooth migrate --db "} {
		if code != 1 || !strings.Contains(stderr, want) {
			t.Fatalf("migrate while old-host:7 lives: exit %d, %q; want exit 1 saying %q", code, stderr, want)
		}
	}
	var version string
	if err := conn.QueryRow(ctx, `SELECT convert_from(value, 'UTF8') FROM `+schema+`.meta WHERE key = 'schema'`).Scan(&version); err != nil || version != "7" {
		t.Fatalf("after the refusal the schema is at %q (%v), want 7", version, err)
	}

	if err := old.EndSession(ctx); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := sawtooth(t, nil, "migrate", "--db", u); code != 0 || !strings.Contains(stdout, fmt.Sprintf("version %d", postgres.SchemaVersion)) {
		t.Fatalf("migrate once the old worker stopped: exit %d: %s%s", code, stdout, stderr)
	}
}

// downgradeTo7 makes the pipeline in conn's database one a sawtooth of
// schema 7 stored: no batch send counts, no report cube.
func downgradeTo7(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	schema := postgres.DefaultSchema
	// The quotes in the rows of outputs (schema step 16) go too: steps
	// 9, 12 and 16 build them again.
	if _, err := conn.Exec(context.Background(), `DROP TABLE `+schema+`.cube_cell, `+schema+`.cube_key;
		DROP INDEX `+schema+`.output_quote;
		ALTER TABLE `+schema+`.output DROP COLUMN key_id, DROP COLUMN conf;
		ALTER TABLE `+schema+`.todo DROP COLUMN batch_sends;
		UPDATE `+schema+`.meta SET value = '7' WHERE key = 'schema'`); err != nil {
		t.Fatal(err)
	}
}

// TestMigrate_RunUpgradesAndKeepsTheRecordedSettings: the first run of a
// new sawtooth on a pipeline an older one stored (schema 7) upgrades it,
// as `migrate` would, and keeps the settings recorded in it for the
// flags it is not given, as on a pipeline of its own version. It used to
// take the older schema for no pipeline at all, so the night's run went
// on with the defaults (another model, another prompt) for its new items.
func TestMigrate_RunUpgradesAndKeepsTheRecordedSettings(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	t.Parallel()
	u := startPostgres(t)
	sim := startSimProcess(t, "--seed", "41", "--latency", "1ms", "--jitter", "1ms")
	dir := t.TempDir()
	first := writeItems(t, dir, 20, 41)
	if code, _, stderr := sawtooth(t, simEnv(sim.url), "run", "--db", u, "--input", first, "--quiet", "--max-output-tokens", "300"); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, tail(stderr, 2000))
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	downgradeTo7(t, conn)

	night := filepath.Join(dir, "night.jsonl")
	if err := os.WriteFile(night, []byte(`{"id":"n1","text":"the app crashes on start","app":"a","rating":1,"date":"2026-03-01"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := sawtooth(t, simEnv(sim.url), "run", "--db", u, "--input", night, "--quiet")
	if code != 0 {
		t.Fatalf("a run on the schema-7 pipeline: exit %d: %s", code, tail(stderr, 2000))
	}
	if !strings.Contains(stderr, "keeping the settings") || !strings.Contains(stderr, "max-output-tokens") {
		t.Errorf("a run on the schema-7 pipeline did not keep its recorded --max-output-tokens:\n%s", tail(stderr, 2000))
	}
	var version string
	if err := conn.QueryRow(ctx, `SELECT convert_from(value, 'UTF8') FROM `+postgres.DefaultSchema+`.meta WHERE key = 'schema'`).Scan(&version); err != nil || version != fmt.Sprint(postgres.SchemaVersion) {
		t.Fatalf("after the run the schema is at %q (%v), want %d", version, err, postgres.SchemaVersion)
	}
}

// TestMigrate_JobRunUpgrades: a job file's run on a pipeline of schema 7
// upgrades it and goes on; its dry run changes nothing and names the
// command that upgrades.
func TestMigrate_JobRunUpgrades(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	t.Parallel()
	u := startPostgres(t)
	sim := startSimProcess(t, "--seed", "42", "--latency", "1ms", "--jitter", "1ms")
	dir := t.TempDir()
	input := writeItems(t, dir, 10, 42)
	jobFile := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(jobFile, []byte("db: "+u+"\ninput: {path: "+input+"}\nstages:\n  - sanitize: {}\n  - llm:\n      name: classify\n      output: {label: [bug, pricing, feature_request, ux, praise, other]}\n  - aggregate: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := sawtooth(t, simEnv(sim.url), "run", "-f", jobFile, "--quiet"); code != 0 {
		t.Fatalf("first run: exit %d: %s", code, tail(stderr, 2000))
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	downgradeTo7(t, conn)
	version := func() string {
		var v string
		if err := conn.QueryRow(ctx, `SELECT convert_from(value, 'UTF8') FROM `+postgres.DefaultSchema+`.meta WHERE key = 'schema'`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}

	code, _, stderr := sawtooth(t, simEnv(sim.url), "run", "-f", jobFile, "--dry-run")
	if code == 0 || !strings.Contains(stderr, "sawtooth migrate --db") || version() != "7" {
		t.Fatalf("a dry run on the schema-7 pipeline: exit %d, schema %s: %s; want a refusal naming migrate, schema 7 kept", code, version(), tail(stderr, 2000))
	}
	if code, _, stderr := sawtooth(t, simEnv(sim.url), "run", "-f", jobFile, "--quiet"); code != 0 {
		t.Fatalf("a run on the schema-7 pipeline: exit %d: %s", code, tail(stderr, 2000))
	}
	if v := version(); v != fmt.Sprint(postgres.SchemaVersion) {
		t.Fatalf("after the run the schema is at %s, want %d", v, postgres.SchemaVersion)
	}
}
