package jsonquote

import (
	"encoding/json"
	"testing"
)

// TestAppend_AsMarshal holds Append to encoding/json's quoting for every
// byte and the runes it treats specially: the store's record format and
// export's rows both rely on it.
func TestAppend_AsMarshal(t *testing.T) {
	var cases []string
	for b := 0; b < 256; b++ {
		cases = append(cases, "a"+string([]byte{byte(b)})+"z")
	}
	cases = append(cases, "", "plain", "<&>", "q\"b\\", "\b\f\n\r\t\x00\x1f", "caf\u00e9 😀", "\u2028\u2029",
		"é😀\U0010FFFF", "\xff\xfe", "bad \xff\xfe utf8", "\xe2\x80", "<script>&amp;</script>", `"\`)
	for _, s := range cases {
		want, _ := json.Marshal(s)
		if got := Append(nil, s); string(got) != string(want) {
			t.Errorf("Append(%q) = %s, want %s", s, got, want)
		}
	}
}

func FuzzAppend_AsMarshal(f *testing.F) {
	for _, s := range []string{"", "plain", "<&>", "q\"b\\", "\b\f\n\r\t\x00\x1f", "caf\u00e9 😀", "\u2028\u2029", "bad \xff\xfe utf8", "0123456789abcdef<"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := Append(nil, s); string(got) != string(want) {
			t.Fatalf("Append(%q) = %s, want %s", s, got, want)
		}
	})
}
