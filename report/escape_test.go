package report

import (
	"bytes"
	"strings"
	"testing"
)

func TestMdText(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"script", hostileScript, `&lt;script&gt;alert\(&quot;x&quot;\)&lt;/script&gt;`},
		{"attribute breakout", hostileImg, `&quot;&gt;&lt;img src=x onerror=alert\(1\)&gt;`},
		{"tracking image", hostileMdImg, `\!\[t\]\(http://evil.example/track.png\)`},
		{"escape sequence", "a" + hostileEsc + "b", `a\\x1b\[2Jb`},
		{"table pipe and newline", "a|b\nc", `a\|b\\x0ac`},
		{"emphasis and code", "*a* _b_ `c`", "\\*a\\* \\_b\\_ \\`c\\`"},
		{"plain", "TaskFlow 2026-11", "TaskFlow 2026-11"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mdText(tt.in); got != tt.want {
				t.Errorf("mdText(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestTermText(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"clear screen", "x" + hostileEsc + "y", `x\x1b[2Jy`},
		{"carriage return", "ok\rEVIL", `ok\x0dEVIL`},
		{"bidi override", "abc\u202edcb", `abc\u202edcb`},
		{"C1 control", "a\u009bb", `a\x9bb`},
		{"plain unicode", "café ✓", "café ✓"},
		{"emoji joiner kept", "🤦\u200d♂️", "🤦\u200d♂️"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := termText(tt.in); got != tt.want {
				t.Errorf("termText(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestReport_HostileData renders the fixed dataset, whose app names,
// review text, run id, run message, dead-letter reason and ids are
// hostile, in every format, and checks what each must never contain.
func TestReport_HostileData(t *testing.T) {
	tests := []struct {
		name   string
		render func(*bytes.Buffer, *Data) error
		never  []string
		want   []string
	}{
		{
			name:   "markdown",
			render: func(b *bytes.Buffer, d *Data) error { return Markdown(b, d) },
			never:  []string{"<script", "<img", "![", "](http", "\x1b", `"><`},
			want:   []string{`&lt;script&gt;alert\(&quot;x&quot;\)&lt;/script&gt;\!\[t\]\(http://evil.example/track.png\)`, "### What people say"},
		},
		{
			name:   "text",
			render: func(b *bytes.Buffer, d *Data) error { return Text(b, d) },
			never:  []string{"\x1b", "\r"},
			want:   []string{`run-\x1b[2J1`, `clears`},
		},
		{
			name:   "html",
			render: func(b *bytes.Buffer, d *Data) error { return HTML(b, d) },
			never:  []string{"<script", "<img", "\x1b"},
			want:   []string{"&lt;script&gt;", "&lt;img src=x onerror=alert(1)&gt;", `class="quote"`, `class="trend"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tt.render(&b, fixtureData(t)); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			for _, bad := range tt.never {
				if i := strings.Index(out, bad); i >= 0 {
					t.Errorf("output holds %q: …%s…", bad, out[max(0, i-60):min(len(out), i+60)])
				}
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q", w)
				}
			}
		})
	}
}
