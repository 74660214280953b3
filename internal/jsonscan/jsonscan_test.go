package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"
)

// valid is Value over the whole of b, as json.Valid reads it.
func valid(b []byte) bool {
	end, ok := Value(b, 0, 0)
	return ok && SkipSpace(b, end) == len(b)
}

var cases = []string{
	`0`, `-0`, `01`, `-`, `1.`, `1.5`, `1e`, `1e+5`, `-0.0E-0`, `1E5x`, `.5`, `+1`, ` 1 `, `12345678901234567890`, `-a`, `1.e5`, `1e+`,
	`""`, `"a\"b"`, `"\x"`, `"\u12"`, `"\u12ag"`, `"\uABCD"`, "\"a\x01\"", `"unterminated`, "\"\xff\"", `"\/"`, `"\`, `"\u`,
	`true`, `tru`, `nul`, `null`, `false `, `nullx`, ``, ` `,
	`[]`, `[1,]`, `[1 2]`, `[ 1 , [ ] , { } ]`, `{}`, `{,}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1 "b":2}`, `{"a" : [true, null] }`,
	`{"a":1}}`, `[[[[]]]]`, `[`, `{"a":{"b":"c"}`, "\t{\"a\":1}\r\n", `{1:2}`, `{"a":1,"b"`, `[1,`,
}

// TestValue_AsJSONValid: Value accepts exactly what json.Valid does.
func TestValue_AsJSONValid(t *testing.T) {
	for _, s := range cases {
		if got, want := valid([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("Value(%q) = %v, json.Valid %v", s, got, want)
		}
	}
}

// TestValue_depth: a value nested past MaxDepth is refused (its caller
// falls back to encoding/json), one at it is read.
func TestValue_depth(t *testing.T) {
	for _, tc := range []struct {
		depth int
		want  bool
	}{{MaxDepth, true}, {MaxDepth + 1, false}} {
		s := strings.Repeat("[", tc.depth+1) + strings.Repeat("]", tc.depth+1)
		if got := valid([]byte(s)); got != tc.want {
			t.Errorf("%d levels: Value = %v, want %v", tc.depth+1, got, tc.want)
		}
	}
}

// FuzzValue holds Value to json.Valid on any bytes (within MaxDepth).
func FuzzValue(f *testing.F) {
	for _, s := range cases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if strings.Count(string(b), "[")+strings.Count(string(b), "{") > MaxDepth {
			return
		}
		if got, want := valid(b), json.Valid(b); got != want {
			t.Errorf("Value(%q) = %v, json.Valid %v", b, got, want)
		}
	})
}
