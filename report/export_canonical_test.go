package report

import (
	"encoding/json"
	"testing"
)

// viaDecoder is what the export wrote for raw before appendCanonical:
// decoded with numbers kept, numbers through numberText, marshalled.
func viaDecoder(raw []byte) ([]byte, error) {
	v, err := decodeValue(raw)
	if err != nil {
		return nil, err
	}
	return json.Marshal(cleanNumbers(v))
}

func TestAppendCanonical(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want string // "" when the decoder must decide
	}{
		{`{"prompt_tokens":137,"candidate_tokens":28,"total_tokens":165}`, `{"candidate_tokens":28,"prompt_tokens":137,"total_tokens":165}`},
		{`{ "b" : [ 2 , {"z":1,"a":null} ], "a" : true }`, `{"a":true,"b":[2,{"a":null,"z":1}]}`},
		{`{"b":1.50,"a":1e2,"c":-0}`, `{"a":100,"b":1.5,"c":0}`},
		{`{"b":"x","a":"é✨"}`, `{"a":"é✨","b":"x"}`},
		{`[]`, `[]`},
		{`{}`, `{}`},
		{`[{"b":1,"a":2},[]]`, `[{"a":2,"b":1},[]]`},
		{`{"b":"<tag>","a":1}`, ""},  // encoding/json escapes < as \u003c
		{`{"b":"\u00e9","a":1}`, ""}, // an escape it writes otherwise
		{`{"a\n":1,"a":2}`, ""},      // a key with an escape
		{`{"a":1,"a":2}`, ""},        // repeated: the decoder keeps the last
		{`{"":1,"a":2}`, ""},         // empty key
		{`{"b":1,"a":2`, ""},         // not JSON
		{`{"b":1,"a":2} x`, ""},      // trailing bytes
		{`{"b":01,"a":2}`, ""},       // not a JSON number
		{`{"b":1e400,"a":2}`, `{"a":2,"b":1e400}`},
	} {
		got, ok := appendCanonical([]byte("prefix"), []byte(tc.raw))
		if tc.want == "" {
			if ok || string(got) != "prefix" {
				t.Errorf("%s: got %q, %v; want it left to the decoder with b unchanged", tc.raw, got, ok)
			}
			continue
		}
		if !ok || string(got) != "prefix"+tc.want {
			t.Errorf("%s: got %q, %v; want %s", tc.raw, got, ok, tc.want)
		}
		if dec, err := viaDecoder([]byte(tc.raw)); err != nil || string(dec) != tc.want {
			t.Errorf("%s: the decoder gives %s, %v; the table is wrong", tc.raw, dec, err)
		}
	}
}

// FuzzAppendCanonical holds appendCanonical to the decoder's way: when it
// takes a value, it writes what decoding and marshalling it writes.
func FuzzAppendCanonical(f *testing.F) {
	for _, s := range []string{
		`{"prompt_tokens":137,"candidate_tokens":28,"total_tokens":165}`,
		`{"b":[1.0,{"y":"a","x":-0.5e1}],"a":{"d":null,"c":false}}`,
		`[{"b":"&","a":1}]`, `{"a":1,"a":2}`, `{"b":1e999999,"a":0.000001}`, ` [ 1 , "x" ] `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) == 0 || (raw[0] != '{' && raw[0] != '[') {
			return // appendJSONValue sends only objects and arrays
		}
		got, ok := appendCanonical(nil, raw)
		if !ok {
			return
		}
		want, err := viaDecoder(raw)
		if err != nil {
			t.Fatalf("%q: appendCanonical wrote %s where the decoder fails: %v", raw, got, err)
		}
		if string(got) != string(want) {
			t.Fatalf("%q: appendCanonical wrote %s, the decoder's way %s", raw, got, want)
		}
	})
}
