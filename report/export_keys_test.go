package report

import (
	"maps"
	"slices"
	"testing"
)

// TestOutputKeys: the columns pass finds the keys decodeOutput finds,
// whatever the values hold, and fails where it fails.
func TestOutputKeys(t *testing.T) {
	tests := []struct{ name, raw string }{
		{"flat", `{"label":"bug","confidence":0.83}`},
		{"empty", `{}`},
		{"spaces", " { \"a\" : 1 ,\n\"b\" :\t[1, 2] } "},
		{"nested with braces in strings", `{"a":{"x":"}{","y":[{"z":"\""}]},"b":"]","c":null,"d":true}`},
		{"escaped keys", `{"a\"b":1,"\u00e9":2,"line\nbreak":3}`},
		{"invalid UTF-8 key", "{\"a\xffb\":1}"},
		{"duplicate keys", `{"a":1,"a":2}`},
		{"not an object", `[1,2]`},
		{"a string", `"text"`},
		{"broken", `{"a":`},
		{"two values", `{"a":1} {"b":2}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, wantErr := decodeOutput("r1", "classify", []byte(tt.raw))
			keys := map[string]bool{}
			err := outputKeys("r1", "classify", []byte(tt.raw), keys)
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("err %v, decodeOutput's %v", err, wantErr)
			}
			if got, w := slices.Sorted(maps.Keys(keys)), slices.Sorted(maps.Keys(want)); !slices.Equal(got, w) {
				t.Errorf("keys %q, decodeOutput's %q", got, w)
			}
		})
	}
}
