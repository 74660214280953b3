package job

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/sawtooth-dev/sawtooth/stages"
)

func TestRecordedAggregate(t *testing.T) {
	jobStage, _ := json.Marshal(Stage{Aggregate: &Aggregate{GroupBy: []string{"shop"}, Rating: "stars", Date: "day", Count: "tone.label"}})
	flagsStage, _ := json.Marshal(stages.Aggregate{GroupBy: []string{"app"}, RatingField: "rating"})
	llmStage, _ := json.Marshal(Stage{LLM: &LLM{Name: "classify"}})
	tests := []struct {
		name   string
		config []byte
		want   stages.Aggregate
		wantOK bool
	}{
		{"a job's aggregate", jobStage, stages.Aggregate{GroupBy: []string{"shop"}, RatingField: "stars", DateField: "day", Count: "tone.label"}, true},
		{"a flags run's aggregate", flagsStage, stages.Aggregate{}, false},
		{"another stage", llmStage, stages.Aggregate{}, false},
		{"not JSON", []byte("{"), stages.Aggregate{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := RecordedAggregate(tt.config)
			if ok != tt.wantOK || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("RecordedAggregate = %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
