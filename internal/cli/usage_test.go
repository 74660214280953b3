package cli

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// A usage error points to the help of the command typed, subcommands
// included ("sawtooth job show --help", never "sawtooth show --help").
func TestUsageError_NamesTheCommandTyped(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"job", "show", "--yaml"}, "unknown flag --yaml (see sawtooth job show --help)"},
		{[]string{"dlq", "list", "--db", "x.db", "--sage", "classify"}, "(see sawtooth dlq list --help)"},
		{[]string{"dlq", "requeue", "--db", "x.db"}, "missing --stage (stage whose dead letters to re-queue: sanitize|classify|aggregate) (see sawtooth dlq requeue --help)"},
		{[]string{"batch", "cancel", "--db", "x.db", "--zz"}, "(see sawtooth batch cancel --help)"},
		{[]string{"run", "--bogus"}, "unknown flag --bogus (see sawtooth run --help)"},
		{[]string{"--bogus"}, "(see sawtooth --help)"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			err := runApp(append([]string{"sawtooth"}, tt.args...), io.Discard, io.Discard)
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.HasSuffix(err.Error(), tt.want) {
				t.Fatalf("error %v, want a usage error ending %q", err, tt.want)
			}
		})
	}
}
