package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// --heartbeat is 1s to 10m, shorter than --lease when given; left out it
// is the default, whatever --lease (a short lease then decides alone).
func TestValidate_heartbeat(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // a part of the usage error; "" for none
	}{
		{"default", nil, ""},
		{"default beside a short lease", []string{"--lease", "4s"}, ""},
		{"given", []string{"--heartbeat", "3s"}, ""},
		{"too short", []string{"--heartbeat", "500ms"}, "--heartbeat 500ms: want 1s to 10m"},
		{"too long", []string{"--heartbeat", "11m", "--lease", "20m"}, "--heartbeat 11m0s: want 1s to 10m"},
		{"not below the lease", []string{"--heartbeat", "30s", "--lease", "30s"}, "--heartbeat 30s: want it shorter than --lease 30s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var o pipelineOptions
			if err := testCommand(&o).Run(append([]string{"sawtooth", "run", "--db", "x.db"}, tt.args...)); err != nil {
				t.Fatal(err)
			}
			if tt.args == nil && o.Heartbeat != pipeline.DefaultHeartbeat {
				t.Errorf("--heartbeat left out = %s, want %s", o.Heartbeat, pipeline.DefaultHeartbeat)
			}
			err := o.validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want a usage error containing %q", err, tt.want)
			}
		})
	}
}
