package stages

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/genai"
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
// repair call) tells the user what to raise in the words of what built
// the stage (Names: a flag, a job file's key), in plain words when it
// gave none, and the preset's own sentence around them.
func TestPreset_CutOffHint(t *testing.T) {
	ep := Endpoint{Backend: BackendGemini, APIKey: testKey, BaseURL: "http://127.0.0.1:1"}
	cut := &genai.GenerateContentResponse{Candidates: []*genai.Candidate{{FinishReason: genai.FinishReasonMaxTokens}}}
	for _, tc := range []struct {
		name string
		l    *LLM
		want string
	}{
		{"classify from flags", newTestClassify(t, ep.BaseURL, func(c *ClassifyConfig) { c.Names = Names{MaxOutputTokens: "--max-output-tokens"} }).LLM,
			"classify: the answer was cut off at 256 output tokens (finishReason=MAX_TOKENS): if this persists, raise --max-output-tokens or lower the thinking budget"},
		{"classify, no names", newTestClassify(t, ep.BaseURL).LLM,
			"classify: the answer was cut off at 256 output tokens (finishReason=MAX_TOKENS): if this persists, raise the stage's max output tokens or lower the thinking budget"},
		{"job", newTestLLM(t, LLMConfig{Name: "triage", Labels: []string{"bug"}, Endpoint: ep, Names: Names{MaxOutputTokens: "max_output_tokens in the job file"}}),
			"triage: the answer was cut off at 256 output tokens (finishReason=MAX_TOKENS): raise max_output_tokens in the job file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.l.DecodeBatch(testItem("r1", "x"), cut, nil)
			if err == nil || !strings.HasSuffix(err.Error(), tc.want) {
				t.Errorf("error = %v, want it to end %q", err, tc.want)
			}
		})
	}
}
