package monitor

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestOptions_LoggerWords: with Words set, an error a record carries is
// logged as Words rewords it, in both formats; other values, and every
// value without Words, are logged as they are.
func TestOptions_LoggerWords(t *testing.T) {
	words := func(err error) error { return fmt.Errorf("%w (run the check)", err) }
	tests := []struct {
		name, format string
		words        func(error) error
		want, not    string
	}{
		{"text", "text", words, `err="record damaged (run the check)"`, ""},
		{"json", "json", words, `"err":"record damaged (run the check)"`, ""},
		{"no words", "text", nil, `err="record damaged"`, "run the check"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			log, err := Options{LogFormat: tt.format, Words: tt.words}.Logger(&out)
			if err != nil {
				t.Fatal(err)
			}
			log.Warn("answer cache unreadable", "err", errors.New("record damaged"), "stage", "classify", "n", 3)
			got := out.String()
			if !strings.Contains(got, tt.want) || (tt.not != "" && strings.Contains(got, tt.not)) {
				t.Errorf("logged %q, want %q in it", got, tt.want)
			}
			if !strings.Contains(got, "classify") || !strings.Contains(got, "3") {
				t.Errorf("logged %q: the other values changed", got)
			}
		})
	}
}
