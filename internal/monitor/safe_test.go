package monitor

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestTerminalSafe(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain", "the app crashes", "the app crashes"},
		{"unicode", "très bien 👍", "très bien 👍"},
		{"clear screen", "a\x1b[2Jb", `a\x1b[2Jb`},
		{"fake line", "ok\nsawtooth: all good", `ok\nsawtooth: all good`},
		{"carriage return", "50%\rdone", `50%\rdone`},
		{"C1 CSI", "a\u009b2Jb", `a\u009b2Jb`},
		{"DEL", "a\x7fb", `a\x7fb`},
		{"invalid UTF-8", "a\xffb", `a\xffb`},
		{"literal replacement char", "a\uFFFDb", "a\uFFFDb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TerminalSafe(tt.in); got != tt.want {
				t.Errorf("TerminalSafe(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestWriteJSONSafe(t *testing.T) {
	in := map[string]string{"message": "a\x1b[2J\u009b31mb\x7f"}
	var buf bytes.Buffer
	if err := WriteJSONSafe(&buf, in); err != nil {
		t.Fatal(err)
	}
	for _, c := range []byte{0x1b, 0x7f} {
		if bytes.IndexByte(buf.Bytes(), c) >= 0 {
			t.Errorf("output holds control byte %#x: %q", c, buf.String())
		}
	}
	if bytes.Contains(buf.Bytes(), []byte("\u009b")) {
		t.Errorf("output holds U+009B: %q", buf.String())
	}
	var back map[string]string
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || back["message"] != in["message"] {
		t.Errorf("round trip = %q, %v; want %q", back["message"], err, in["message"])
	}
}

func TestTerminalSafeLines(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"line breaks kept", "stopped:\n  sawtooth run --db x", "stopped:\n  sawtooth run --db x"},
		{"escape on a line", "server said \x1b[2Jhi\nnext", `server said \x1b[2Jhi` + "\nnext"},
		{"carriage return escaped", "a\r\nb", `a\r` + "\nb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TerminalSafeLines(tt.in); got != tt.want {
				t.Errorf("TerminalSafeLines(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
