package job

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestLoad_Tier(t *testing.T) {
	stage := func(extra string) string {
		return "db: r.db\ninput: {path: in.jsonl}\nstages:\n  - llm:\n      name: c\n      output: {label: [a]}\n" + extra
	}
	for _, tc := range []struct {
		name, extra string
		wantKey     string // "" means no error
		wantMsg     string
		wantLine    int
	}{
		{"none", "", "", "", 0},
		{"flex", "      tier: flex\n", "", "", 0},
		{"auto with a deadline", "      tier: auto\n      flex_deadline: 45m\n", "", "", 0},
		{"a typo gets a hint", "      tier: felx\n", "stages[0].llm.tier", `"felx" is not a tier (did you mean "flex"?)`, 7},
		{"flex with a deadline", "      tier: flex\n      flex_deadline: 45m\n", "", "", 0},
		{"a deadline needs flex or auto", "      tier: standard\n      flex_deadline: 45m\n", "stages[0].llm.flex_deadline", "needs `tier: flex` or `tier: auto`", 8},
		{"a deadline is a duration", "      tier: auto\n      flex_deadline: soon\n", "stages[0].llm.flex_deadline", "not a positive duration", 8},
		{"flex is online", "      mode: batch\n      tier: flex\n", "stages[0].llm.tier", "for online calls", 8},
		{"priority is online", "      mode: batch\n      tier: priority\n", "stages[0].llm.tier", "for online calls", 8},
		{"auto mode's online calls take a tier", "      mode: auto\n      tier: flex\n", "", "", 0},
		{"standard with batch", "      mode: batch\n      tier: standard\n", "", "", 0},
		{"a misspelt key is named", "      teir: flex\n", "stages[0].llm.teir", `did you mean "tier"`, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, err := Load(writeJob(t, stage(tc.extra)))
			if tc.wantKey == "" {
				if err != nil {
					t.Fatal(err)
				}
				if l := j.LLMStages()[0]; tc.name == "auto with a deadline" && (l.Tier != "auto" || l.Deadline() != 45*time.Minute) {
					t.Errorf("stage %+v", l)
				}
				return
			}
			var es Errors
			if !errors.As(err, &es) || len(es) != 1 || es[0].Key != tc.wantKey || es[0].Line != tc.wantLine || !strings.Contains(es[0].Msg, tc.wantMsg) {
				t.Fatalf("err = %v, want one problem at line %d %s: %q", err, tc.wantLine, tc.wantKey, tc.wantMsg)
			}
		})
	}
}

// CheckTierMode is the rule both a job file and a run's flags are held to.
func TestCheckTierMode(t *testing.T) {
	for _, tc := range []struct {
		tier, mode string
		bad        bool
	}{
		{"", ModeBatch, false}, {"standard", ModeBatch, false}, {"flex", ModeBatch, true}, {"priority", ModeBatch, true},
		{"auto", ModeBatch, true}, {"flex", ModeAuto, false}, {"flex", ModeOnline, false}, {"flex", "", false},
	} {
		t.Run(tc.tier+"/"+tc.mode, func(t *testing.T) {
			if err := CheckTierMode(tc.tier, tc.mode); (err != nil) != tc.bad {
				t.Errorf("CheckTierMode(%q, %q) = %v, want an error: %v", tc.tier, tc.mode, err, tc.bad)
			}
		})
	}
}
