package pgtest

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestRestart_KeepsAcknowledgedCommits: every commit acknowledged right
// up to a shutdown, fast or immediate (a crash), is there once the
// server is restarted on the same data directory and socket, through the
// same URL; while it is down, connections fail. (With synchronous_commit
// off, an immediate shutdown loses the last few acknowledged rows here.)
func TestRestart_KeepsAcknowledgedCommits(t *testing.T) {
	for _, mode := range []ShutdownMode{Fast, Immediate} {
		t.Run(mode.String(), func(t *testing.T) {
			s, err := Start()
			if errors.Is(err, ErrUnavailable) && !Required() {
				t.Skip(err)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Stop()
			url, err := s.NewDB("restart")
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, "CREATE TABLE acked (n int PRIMARY KEY, pad text)"); err != nil {
				t.Fatal(err)
			}
			// One commit per row, as a worker commits, the last one
			// acknowledged just before the shutdown.
			const rows = 3000
			for n := 1; n <= rows; n++ {
				if _, err := conn.Exec(ctx, "INSERT INTO acked VALUES ($1, repeat('x', 500))", n); err != nil {
					t.Fatalf("insert %d: %v", n, err)
				}
			}
			if err := s.Shutdown(mode); err != nil {
				t.Fatal(err)
			}
			conn.Close(ctx)
			if c, err := pgx.Connect(ctx, url); err == nil {
				c.Close(ctx)
				t.Fatalf("connected to %s while the server was shut down", url)
			}
			if _, err := s.NewDB("while down"); err == nil {
				t.Errorf("NewDB succeeded while the server was shut down")
			}
			if err := s.Shutdown(mode); err != nil {
				t.Errorf("a second shutdown: %v", err)
			}
			if err := s.Restart(); err != nil {
				t.Fatal(err)
			}
			if err := s.Restart(); err != nil {
				t.Errorf("restarting a running server: %v", err)
			}
			conn, err = pgx.Connect(ctx, url)
			if err != nil {
				t.Fatalf("connect after the restart: %v", err)
			}
			defer conn.Close(ctx)
			var got int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM acked").Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != rows {
				t.Errorf("after a %s shutdown and a restart, %d of %d acknowledged rows are there", mode, got, rows)
			}
		})
	}
}
