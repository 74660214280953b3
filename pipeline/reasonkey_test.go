package pipeline

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestReasonKey(t *testing.T) {
	long := "x" + strings.Repeat("é", 150) // 301 bytes: byte 200 is inside a rune
	cases := []struct {
		name string
		dead DeadLetter
		want string
	}{
		{"item prefix dropped, numbers masked", DeadLetter{Class: ClassTransient, Message: `item "r12": HTTP 503 after 3 attempts`}, "transient: HTTP # after # attempts"},
		{"quoted parts masked", DeadLetter{Class: ClassPermanent, Message: `label "spam" is not one of "bug", "other"`}, `permanent: label "…" is not one of "…", "…"`},
		{"same cause, same key", DeadLetter{Class: ClassTransient, Message: `item "r99": HTTP 500 after 12 attempts`}, "transient: HTTP # after # attempts"},
		{"long message cut on a rune boundary", DeadLetter{Class: ClassPermanent, Message: long}, "permanent: x" + strings.Repeat("é", 99) + "…"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ReasonKey(tc.dead)
			if got != tc.want {
				t.Errorf("ReasonKey = %q, want %q", got, tc.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("ReasonKey = %q is not valid UTF-8", got)
			}
		})
	}
}
