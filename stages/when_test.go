package stages

import (
	"reflect"
	"testing"
)

// TestWhenFieldCompares lists the comparisons made with an input field
// itself, on either side, with the other side's literal kind; a field
// inside a conversion is not listed.
func TestWhenFieldCompares(t *testing.T) {
	for _, tc := range []struct {
		source string
		want   []WhenFieldCompare
	}{
		{`fields.rating == "1"`, []WhenFieldCompare{{Key: "rating", Op: "==", Literal: "string", Text: "1"}}},
		{`2 >= fields["rating"] && fields.paid != true`, []WhenFieldCompare{{Key: "rating", Op: ">=", Literal: "number"}, {Key: "paid", Op: "!=", Literal: "bool"}}},
		{`fields.a < fields.b`, []WhenFieldCompare{{Key: "a", Op: "<"}, {Key: "b", Op: "<"}}},
		{`int(fields.rating) <= 2 || string(fields.x) == "y" || classify.label == "bug"`, nil},
	} {
		t.Run(tc.source, func(t *testing.T) {
			got, err := WhenFieldCompares(tc.source)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("WhenFieldCompares = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
