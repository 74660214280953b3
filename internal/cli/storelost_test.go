package cli

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/pipeline"
	"github.com/sawtooth-dev/sawtooth/store/postgres"
)

// TestStoreLostError_NamesTheDatabaseAndIsResumable: a worker that gave
// its database up stops resumable (exit 3 in main), and its message names
// the database without the password and says what to do.
func TestStoreLostError_NamesTheDatabaseAndIsResumable(t *testing.T) {
	tests := []struct {
		name, dsn, shown, secret string
	}{
		{"url with a password", "postgres://app:hunter22@db1:5432/reviews", "postgres://app@db1:5432/reviews", "hunter22"},
		{"key=value with a password", "host=db1 dbname=reviews password=hunter22", "host=db1 dbname=reviews", "hunter22"},
		{"unix socket url", "postgres:///reviews?host=%2Fvar%2Frun%2Fpostgresql", "postgres:///reviews?host=%2Fvar%2Frun%2Fpostgresql", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lost := &pipeline.StoreLostError{Op: "claim work of classify", For: 5 * time.Second, Err: errors.New("connection refused"), LeasesLost: 3}
			var err error = &storeLostError{db: postgres.Redact(tc.dsn), lost: lost}
			if !errors.Is(err, pipeline.ErrStopped) {
				t.Errorf("%v is not a resumable stop", err)
			}
			var got *pipeline.StoreLostError
			if !errors.As(err, &got) || got != lost {
				t.Errorf("the runner's error is not in the chain of %v", err)
			}
			msg := err.Error()
			for _, want := range []string{"lost the database " + tc.shown + ":", "connection refused", "Check that the PostgreSQL server is running", "run the same command again"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message lacks %q:\n%s", want, msg)
				}
			}
			if tc.secret != "" && strings.Contains(msg, tc.secret) {
				t.Errorf("message shows the password:\n%s", msg)
			}
		})
	}
}
