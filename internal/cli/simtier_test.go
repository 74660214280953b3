package cli

import (
	"errors"
	"flag"
	"testing"
	"time"

	"github.com/sawtooth-dev/sawtooth/stages/geminisim"
)

// parseSim parses args as the simulator's flags over their defaults.
func parseSim(t *testing.T, args ...string) (*simOptions, error) {
	t.Helper()
	var o simOptions
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	for _, f := range simFlags(&o, simOptions{Window: time.Minute, Day: 24 * time.Hour}) {
		if err := f.Apply(fs); err != nil {
			t.Fatal(err)
		}
	}
	return &o, fs.Parse(args)
}

func TestSimOptions_Tiers(t *testing.T) {
	o, err := parseSim(t, "--sim-flex-latency", "2s", "--sim-flex-capacity", "50", "--sim-flex-shed", "0.33",
		"--sim-flex-shed-answer", "429-details", "--sim-priority-as-standard", "0.25", "--sim-cache-min-tokens", "2048")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := o.config()
	if err != nil {
		t.Fatal(err)
	}
	want := geminisim.TierConfig{FlexLatency: geminisim.Latency{Base: 2 * time.Second}, FlexCapacity: 50, FlexShed: 0.33,
		ShedAnswer: geminisim.Shed429Details, PriorityAsStandard: 0.25}
	if cfg.Tiers != want || cfg.Cache.MinTokens != 2048 || cfg.Cache.Off {
		t.Errorf("tiers %+v cache %+v", cfg.Tiers, cfg.Cache)
	}
	for _, bad := range [][]string{{"--sim-flex-shed-answer", "418"}, {"--sim-flex-shed", "2"}} {
		o, err := parseSim(t, bad...)
		if err != nil {
			t.Fatal(err)
		}
		var ue *UsageError
		if _, err := o.config(); !errors.As(err, &ue) {
			t.Errorf("%v: want a usage error, got %v", bad, err)
		}
	}
}
