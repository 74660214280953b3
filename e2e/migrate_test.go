package e2e

import (
	"context"
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
	if _, err := conn.Exec(ctx, `DROP TABLE `+schema+`.cube_cell, `+schema+`.cube_quote;
		UPDATE `+schema+`.meta SET value = '7' WHERE key = 'schema'`); err != nil {
		t.Fatal(err)
	}

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
	if code, stdout, stderr := sawtooth(t, nil, "migrate", "--db", u); code != 0 || !strings.Contains(stdout, "version 8") {
		t.Fatalf("migrate once the old worker stopped: exit %d: %s%s", code, stdout, stderr)
	}
}
