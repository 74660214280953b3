package cli

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/store/postgres"
)

// TestWordLiveWorkers: a migration refused for live workers says which
// command migrates once they are stopped, with the --db it was given
// (its password never), and stays fatal, not a usage error (exit 1).
func TestWordLiveWorkers(t *testing.T) {
	refused := fmt.Errorf("migrate schema sawtooth of db1/reviews from version 7 to 8: host-b:42 (a live session) still works on it: %w (stop it, then %s)", postgres.ErrLiveWorkers, postgres.OpenAgain)
	head := strings.TrimSuffix(refused.Error(), postgres.OpenAgain+")")
	const dsn = "postgres://sawtooth@db1:5432/reviews"
	for _, tc := range []struct {
		name    string
		err     error
		migrate bool
		want    string
	}{
		{"run", refused, false, head + "run `sawtooth migrate --db " + dsn + "` (or this command again) before any worker of this version starts)"},
		{"migrate", refused, true, head + "run `sawtooth migrate --db " + dsn + "` again)"},
		{"another error", errors.New("connection refused"), false, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := wordLiveWorkers(tc.err, dsn, tc.migrate)
			if err.Error() != tc.want {
				t.Fatalf("worded:\n%s\nwant:\n%s", err, tc.want)
			}
			var ue *UsageError
			if errors.As(err, &ue) || !errors.Is(err, tc.err) {
				t.Fatalf("%v: a usage error, or no longer wraps %v", err, tc.err)
			}
			if tc.err == refused && !strings.Contains(err.Error(), "host-b:42") {
				t.Fatalf("%v does not name the worker", err)
			}
		})
	}
}
