package cli

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
)

// countingServer accepts TCP connections and drops each at once, as a
// host where something other than PostgreSQL listens, counting them.
func countingServer(t *testing.T) (addr string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = new(atomic.Int64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String(), accepted
}

// A command that reads a PostgreSQL pipeline it cannot reach (status,
// report, dlq, retry...) fails after connecting as often as one open
// does: it used to connect once for the stored stage list and again to
// open, doubling the wait before the same error.
func TestOpen_UnreachablePostgresConnectsOnce(t *testing.T) {
	addr, accepted := countingServer(t)
	dsn := fmt.Sprintf("postgres://app@%s/reviews?sslmode=disable&connect_timeout=2", addr)

	if _, err := readStoredStages(dsn, 0); err == nil {
		t.Fatal("reading the stage list of a server that drops every connection succeeded")
	}
	perOpen := accepted.Swap(0)
	if perOpen == 0 {
		t.Fatal("the stage list was read without connecting")
	}

	for _, tc := range pipelineReaders(dsn, false) {
		t.Run(tc.name, func(t *testing.T) {
			accepted.Store(0)
			if err := tc.run(); err == nil {
				t.Fatal("succeeded against a server that drops every connection")
			}
			if n := accepted.Load(); n != perOpen {
				t.Errorf("connected %d times; one read connects %d", n, perOpen)
			}
		})
	}
}

// A URL with a password in it is refused as a usage error (exit 2, the
// message says where the password goes) before anything connects with
// it, whichever command reads the pipeline.
func TestOpen_PasswordURLRefusedBeforeConnecting(t *testing.T) {
	addr, accepted := countingServer(t)
	dsn := fmt.Sprintf("postgres://app:hunter2@%s/reviews?sslmode=disable", addr)
	for _, tc := range pipelineReaders(dsn, true) {
		t.Run(tc.name, func(t *testing.T) {
			accepted.Store(0)
			err := tc.run()
			var usage *UsageError
			if !errors.As(err, &usage) || !strings.Contains(err.Error(), "PGPASSWORD") || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("err = %v; want a usage error that says where the password goes and does not show it", err)
			}
			if n := accepted.Load(); n != 0 {
				t.Errorf("connected %d times with the password URL", n)
			}
		})
	}
}

// pipelineReader is one way a command reads the pipeline at a --db.
type pipelineReader struct {
	name string
	run  func() error
}

// pipelineReaders are the ways commands open the pipeline at dsn, with a
// job run's open when job is set.
func pipelineReaders(dsn string, job bool) []pipelineReader {
	rs := []pipelineReader{
		{"read only", func() error { _, err := openReadOnly(dsn); return err }},
		{"writable", func() error { _, err := openWritable(dsn); return err }},
		{"stage check", func() error { return checkStageOf(dsn, "stage", "classify") }},
	}
	if job {
		rs = append(rs, pipelineReader{"job", func() error { _, err := openJobDatabase(dsn, namedStages()); return err }})
	}
	return rs
}
