package ingest

import (
	"bytes"
	"encoding/json"
	"maps"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// jsonNumberSyntax is the JSON number grammar as a regular expression:
// what isJSONNumber read before, kept as its reference.
var jsonNumberSyntax = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// TestIsJSONNumber: the hand-written reader agrees with the grammar on
// the cases that decide a column's type and on random strings of the
// characters numbers are made of.
func TestIsJSONNumber(t *testing.T) {
	cases := []string{"", "0", "-0", "7", "-12", "007", "0.5", "1.", ".5", "1e3", "1E+3", "1e-3", "1e", "1e+", "-", "--1",
		"1.5e10", "0x1p4", "1_000", "Inf", "NaN", " 1", "1 ", "12a", "4.0", "3.14.15", "1e3e3"}
	r := rand.New(rand.NewPCG(7, 31))
	const alphabet = "0123456789-+.eE x"
	for range 20000 {
		b := make([]byte, r.IntN(8))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		if got, want := isJSONNumber(s), jsonNumberSyntax.MatchString(s); got != want {
			t.Errorf("isJSONNumber(%q) = %v, want %v", s, got, want)
		}
	}
}

// TestPlainObject: every line plainObject reads, it reads as
// json.Unmarshal into a map of raw messages does; the lines it leaves to
// encoding/json are the ones with an escaped or non-UTF-8 key, nested past
// jsonscan's depth, or not one valid object.
func TestPlainObject(t *testing.T) {
	tests := []struct {
		line  string
		plain bool // read in place, not left to encoding/json
	}{
		{`{"id":"r1","text":"Great app","rating":5,"app":"x","date":"2025-04-08"}`, true},
		{` { "id" : 1 , "text" : "a\"b\u00e9" , "tags" : ["a", {"b": null}], "ok": true, "n": -1.5e3 } `, true},
		{`{}`, true},
		{`{"id":"a","id":"b"}`, true},
		{`{"caf` + "\u00e9" + `":"x"}`, true},
		{`{"text":"` + "\xff" + `"}`, true}, // a value's bytes are the decoder's to replace
		{`{"a\"b":"x"}`, false},
		{`{"` + "\xff" + `":"x"}`, false},
		{`{"a":` + strings.Repeat("[", 1100) + strings.Repeat("]", 1100) + `}`, false},
		{`{"a":1,}`, false},
		{`{"a":1}}`, false},
		{`{"a":1} x`, false},
		{`{"a" 1}`, false},
		{`{"a":01}`, false},
		{`{"a":"` + "\x01" + `"}`, false},
		{`[{"a":1}]`, false},
		{`null`, false},
		{`{"a":1`, false},
		{`{"a":tru}`, false},
	}
	for _, tt := range tests {
		got, ok := plainObject([]byte(tt.line))
		if ok != tt.plain {
			t.Errorf("plainObject(%.60q): ok %v, want %v", tt.line, ok, tt.plain)
		}
		if ok {
			checkAsDecoded(t, []byte(tt.line), got)
		}
	}
}

// FuzzPlainObject holds plainObject to encoding/json on any line it reads.
func FuzzPlainObject(f *testing.F) {
	for _, s := range []string{`{"id":"r1","text":"x","n":1}`, `{"a":[1,{"b":"\u0041"}],"c":null}`, `{"a":1,"a":2}`, `{ }`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if got, ok := plainObject(line); ok {
			checkAsDecoded(t, line, got)
		}
	})
}

// checkAsDecoded fails t unless encoding/json reads line as the object
// got, member for member.
func checkAsDecoded(t *testing.T, line []byte, got map[string]json.RawMessage) {
	t.Helper()
	var want map[string]json.RawMessage
	if err := json.Unmarshal(line, &want); err != nil || want == nil {
		t.Fatalf("plainObject read %.80q, which encoding/json refuses: %v", line, err)
	}
	if !maps.EqualFunc(got, want, func(a, b json.RawMessage) bool { return bytes.Equal(a, b) }) {
		t.Fatalf("plainObject(%.80q) = %q, encoding/json reads %q", line, got, want)
	}
}

// TestJSONString: a string is decoded as json.Unmarshal decodes it,
// escapes and invalid UTF-8 included.
func TestJSONString(t *testing.T) {
	for _, raw := range []string{`""`, `"plain"`, `"caf` + "\u00e9" + `"`, `"a\"b"`, `"\u00e9\n"`, `"` + "\xff\xfe" + `"`, `"\ud800"`} {
		var want string
		if err := json.Unmarshal([]byte(raw), &want); err != nil {
			t.Fatal(err)
		}
		if got, err := jsonString([]byte(raw)); err != nil || got != want {
			t.Errorf("jsonString(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
}
