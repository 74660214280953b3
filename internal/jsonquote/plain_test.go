package jsonquote

import (
	"strings"
	"testing"
)

// plainLenByByte is PlainLen one byte at a time, as the table says.
func plainLenByByte(s string) int {
	for i := 0; i < len(s); i++ {
		if !plainByte[s[i]] {
			return i
		}
	}
	return len(s)
}

func TestPlainLen(t *testing.T) {
	cases := []struct {
		s    string
		want int
	}{
		{"", 0},
		{"plain", 5},
		{"exactly8", 8},
		{"sixteen bytes ok", 16},
		{"a\"b", 1},
		{"0123456789<", 10},
		{"01234567>", 8},
		{"0123456&89", 7},
		{"0123456\\", 7},
		{"tab\there", 3},
		{"\x1f", 0},
		{"\x7f and on", 8},
		{"café", 3},
		{"twelve chars\n", 12},
	}
	for _, c := range cases {
		if got := PlainLen(c.s); got != c.want {
			t.Errorf("PlainLen(%q) = %d, want %d", c.s, got, c.want)
		}
		if got := PlainLen([]byte(c.s)); got != c.want {
			t.Errorf("PlainLen([]byte(%q)) = %d, want %d", c.s, got, c.want)
		}
	}
}

// TestPlainLen_everyByteEveryPlace puts each of the 256 bytes at each
// place of a plain run longer than two words: the word test must stop at
// (or before) every byte the table does not pass.
func TestPlainLen_everyByteEveryPlace(t *testing.T) {
	base := []byte(strings.Repeat("abcdefgh", 3))
	for b := 0; b < 256; b++ {
		for at := range base {
			s := append([]byte(nil), base...)
			s[at] = byte(b)
			if got, want := PlainLen(s), plainLenByByte(string(s)); got != want {
				t.Fatalf("byte %#x at %d: PlainLen = %d, want %d", b, at, got, want)
			}
		}
	}
}

func FuzzPlainLen(f *testing.F) {
	for _, s := range []string{"", "plain text here", "a<b", "\xff\xfe", "é😀 more text", "01234567\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := PlainLen(s), plainLenByByte(s); got != want {
			t.Fatalf("PlainLen(%q) = %d, want %d", s, got, want)
		}
	})
}
