package report

import (
	"encoding/json"
	"testing"

	"github.com/sawtooth-dev/sawtooth/internal/jsonscan"
)

// TestAppendRawFields_AsJSONValid: the row pass reads an output's
// fields only from what json.Valid accepts as an object (jsonscan holds
// the grammar itself to json.Valid).
func TestAppendRawFields_AsJSONValid(t *testing.T) {
	for _, s := range []string{
		`0`, `-0`, `01`, `-`, `1.`, `1.5`, `1e`, `1e+5`, `-0.0E-0`, `1E5x`, `.5`, `+1`, ` 1 `, `12345678901234567890`,
		`""`, `"a\"b"`, `"\x"`, `"\u12"`, `"\u12ag"`, `"\uABCD"`, "\"a\x01\"", `"unterminated`, "\"\xff\"", `"\/"`,
		`true`, `tru`, `nul`, `null`, `false `, `nullx`,
		`[]`, `[1,]`, `[1 2]`, `[ 1 , [ ] , { } ]`, `{}`, `{,}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1 "b":2}`, `{"a" : [true, null] }`,
		`{"a":1}}`, `[[[[]]]]`, `[`, `{"a":{"b":"c"}`, "\t{\"a\":1}\r\n", `{1:2}`,
	} {
		fields, isObj := appendRawFields(nil, []byte(s))
		if wantObj := json.Valid([]byte(s)) && len(s) > 0 && jsonscan.SkipSpace([]byte(s), 0) < len(s) && s[jsonscan.SkipSpace([]byte(s), 0)] == '{'; isObj != wantObj {
			t.Errorf("appendRawFields(%q) = %v (%d fields), want %v", s, isObj, len(fields), wantObj)
		}
	}
}
