package stages

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/genai"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// TestPreset_EveryHookSet: the LLM stage calls its preset's hooks
// unchecked, so a preset missing one (a hook added to the type and not to
// every preset) would panic on the first item that reaches it.
func TestPreset_EveryHookSet(t *testing.T) {
	for name, p := range map[string]*preset{"job": jobPreset, "classify": classifyPreset} {
		t.Run(name, func(t *testing.T) {
			v := reflect.ValueOf(*p)
			for i := range v.NumField() {
				if v.Field(i).IsZero() {
					t.Errorf("%s preset has no %s", name, v.Type().Field(i).Name)
				}
			}
		})
	}
}

// TestNewLLM_JobPreset: a job-file stage gets the job preset, NewClassify
// the classify preset, and nothing else tells them apart.
func TestNewLLM_JobPreset(t *testing.T) {
	c := newTestClassify(t, "http://127.0.0.1:1")
	job := newTestLLM(t, LLMConfig{Name: "classify", Labels: DefaultLabels,
		Endpoint: Endpoint{Backend: BackendGemini, APIKey: testKey, BaseURL: "http://127.0.0.1:1"}})
	if c.preset != classifyPreset || job.preset != jobPreset {
		t.Errorf("presets: classify %p (want %p), job-file %p (want %p)", c.preset, classifyPreset, job.preset, jobPreset)
	}
}

// TestPreset_CutOffHint: a cut-off answer the batch mode reads (it has no
// repair call) says to raise the stage's answer budget in plain words,
// inside the preset's own sentence, and carries the cause the front end
// words it by (it names no flag or job key: the letter outlives the
// command that wrote it).
func TestPreset_CutOffHint(t *testing.T) {
	ep := Endpoint{Backend: BackendGemini, APIKey: testKey, BaseURL: "http://127.0.0.1:1"}
	cut := &genai.GenerateContentResponse{Candidates: []*genai.Candidate{{FinishReason: genai.FinishReasonMaxTokens}}}
	for _, tc := range []struct {
		name string
		l    *LLM
		want string
	}{
		{"classify", newTestClassify(t, ep.BaseURL).LLM,
			"classify: the answer was cut off at 256 output tokens (finishReason=MAX_TOKENS): if this persists, raise the stage's max output tokens or lower the thinking budget"},
		{"job", newTestLLM(t, LLMConfig{Name: "triage", Labels: []string{"bug"}, Endpoint: ep}),
			"triage: the answer was cut off at 256 output tokens (finishReason=MAX_TOKENS): raise the stage's max output tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.l.DecodeBatch(testItem("r1", "x"), cut, nil)
			if err == nil || !strings.HasSuffix(err.Error(), tc.want) {
				t.Errorf("error = %v, want it to end %q", err, tc.want)
			}
			if got := pipeline.CauseOf(err); got != CauseOutputBudget {
				t.Errorf("cause = %q, want %q", got, CauseOutputBudget)
			}
		})
	}
}
