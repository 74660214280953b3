package stages

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

func TestClean(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		opt       SanitizeOptions
		want      string
		changes   []string
		truncated bool
	}{
		{name: "clean text unchanged", in: "Great app, works well.", want: "Great app, works well.", changes: []string{}},
		{name: "nfc composes", in: "cafe\u0301 cre\u0300me", want: "café crème", changes: []string{ChangeNFC}},
		{name: "invalid utf8 dropped", in: "bad\xff\xfe byte\xc3", want: "bad byte", changes: []string{ChangeInvalidUTF8}},
		{name: "replacement char dropped", in: "lossy \uFFFDdecode", want: "lossy decode", changes: []string{ChangeInvalidUTF8}},
		{name: "control becomes space", in: "foo\x00bar\x1b[0m\x7f", want: "foo bar [0m", changes: []string{ChangeControl}},
		{name: "c1 control", in: "a\u0080b", want: "a b", changes: []string{ChangeControl}},
		{name: "zero width dropped", in: "zero\u200Bwidth\u200C join\u2060er\u00AD", want: "zerowidth joiner", changes: []string{ChangeFormat}},
		{name: "bidi controls dropped", in: "\u202Eevil\u202C text", want: "evil text", changes: []string{ChangeFormat}},
		{name: "bom dropped", in: "\uFEFFhello\uFEFF world", want: "hello world", changes: []string{ChangeBOM}},
		{name: "newlines and tabs collapse", in: "line one\n\nline\ttwo\r\n", want: "line one line two", changes: []string{ChangeWhitespace}},
		{name: "unicode spaces collapse", in: "\u3000wide\u00A0nbsp\u2003em  ", want: "wide nbsp em", changes: []string{ChangeWhitespace}},
		{name: "leading space trimmed", in: "  x", want: "x", changes: []string{ChangeWhitespace}},
		{name: "dropped format char exposes nfc", in: "e\u200B\u0301", want: "é", changes: []string{ChangeNFC, ChangeFormat}},
		{
			name: "truncates at word boundary", in: "the quick brown fox jumps", opt: SanitizeOptions{MaxChars: 17},
			want: "the quick brown", changes: []string{ChangeTruncate}, truncated: true,
		},
		{
			name: "truncates exactly at a space", in: "the quick brown fox", opt: SanitizeOptions{MaxChars: 15},
			want: "the quick brown", changes: []string{ChangeTruncate}, truncated: true,
		},
		{
			name: "truncates long word at rune boundary", in: "ééééééééééé", opt: SanitizeOptions{MaxChars: 4},
			want: "éééé", changes: []string{ChangeTruncate}, truncated: true,
		},
		{
			name: "truncation keeps combining marks", in: "ab q\u0301q\u0301", opt: SanitizeOptions{MaxChars: 6},
			want: "ab q\u0301", changes: []string{ChangeTruncate}, truncated: true,
		},
		{
			name: "truncation drops a sequence it cannot keep whole", in: "ok👨\u200D👩\u200D👧", opt: SanitizeOptions{MaxChars: 5},
			want: "ok", changes: []string{ChangeTruncate}, truncated: true,
		},
		{name: "emoji kept by default", in: "love it 😍👍🏽", want: "love it 😍👍🏽", changes: []string{}},
		{name: "zwj kept inside emoji", in: "family 👨\u200D👩\u200D👧", want: "family 👨\u200D👩\u200D👧", changes: []string{}},
		{name: "emoji strip", in: "love it 😍 so much👍🏽!", opt: SanitizeOptions{Emoji: EmojiStrip}, want: "love it so much!", changes: []string{ChangeWhitespace, ChangeEmojiStrip}},
		{name: "emoji strip keeps text symbols", in: "Acme™ ©2024 ✓", opt: SanitizeOptions{Emoji: EmojiStrip}, want: "Acme™ ©2024 ✓", changes: []string{}},
		{name: "emoji strip selector makes emoji", in: "©\uFE0F x", opt: SanitizeOptions{Emoji: EmojiStrip}, want: "x", changes: []string{ChangeWhitespace, ChangeEmojiStrip}},
		{name: "emoji strip zwj sequence", in: "dev 👩\u200D💻 here", opt: SanitizeOptions{Emoji: EmojiStrip}, want: "dev here", changes: []string{ChangeWhitespace, ChangeEmojiStrip}},
		{name: "emoji strip flag", in: "from 🇺🇸", opt: SanitizeOptions{Emoji: EmojiStrip}, want: "from", changes: []string{ChangeWhitespace, ChangeEmojiStrip}},
		{name: "emoji strip orphan selector", in: "a\uFE0Fb", opt: SanitizeOptions{Emoji: EmojiStrip}, want: "ab", changes: []string{ChangeEmojiStrip}},
		{name: "emoji describe", in: "great 👍", opt: SanitizeOptions{Emoji: EmojiDescribe}, want: "great :thumbs up sign:", changes: []string{ChangeEmojiDescribe}},
		{name: "emoji describe smiling face", in: "☺\uFE0F", opt: SanitizeOptions{Emoji: EmojiDescribe}, want: ":white smiling face:", changes: []string{ChangeEmojiDescribe}},
		{name: "emoji describe skin tone", in: "👍🏽", opt: SanitizeOptions{Emoji: EmojiDescribe}, want: ":thumbs up sign:", changes: []string{ChangeEmojiDescribe}},
		{name: "emoji describe heart", in: "I ❤ it", opt: SanitizeOptions{Emoji: EmojiDescribe}, want: "I :heavy black heart: it", changes: []string{ChangeEmojiDescribe}},
		{name: "emoji describe flag", in: "🇩🇪 app", opt: SanitizeOptions{Emoji: EmojiDescribe}, want: ":flag de: app", changes: []string{ChangeEmojiDescribe}},
		{name: "emoji describe zwj", in: "👩\u200D💻", opt: SanitizeOptions{Emoji: EmojiDescribe}, want: ":woman::personal computer:", changes: []string{ChangeEmojiDescribe}},
		{name: "emoji describe unnamed", in: "new \U0001FAE9", opt: SanitizeOptions{Emoji: EmojiDescribe}, want: "new :emoji:", changes: []string{ChangeEmojiDescribe}},
		{name: "emoji describe policy case", in: "🙂", opt: SanitizeOptions{Emoji: "Describe"}, want: ":slightly smiling face:", changes: []string{ChangeEmojiDescribe}},
		{
			name: "everything at once", in: "\uFEFF  Bad\xff app\u200B!\n\tcafe\u0301 \x00 😡  ", opt: SanitizeOptions{Emoji: EmojiStrip},
			want:    "Bad app! café",
			changes: []string{ChangeInvalidUTF8, ChangeNFC, ChangeControl, ChangeFormat, ChangeBOM, ChangeWhitespace, ChangeEmojiStrip},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Clean(tt.in, tt.opt)
			if err != nil {
				t.Fatalf("Clean(%q) error: %v", tt.in, err)
			}
			if got.Text != tt.want {
				t.Errorf("Text = %q, want %q", got.Text, tt.want)
			}
			if !slices.Equal(got.Changes, tt.changes) {
				t.Errorf("Changes = %q, want %q", got.Changes, tt.changes)
			}
			if got.Truncated != tt.truncated {
				t.Errorf("Truncated = %v, want %v", got.Truncated, tt.truncated)
			}
			if got.Chars != utf8.RuneCountInString(got.Text) {
				t.Errorf("Chars = %d, want %d", got.Chars, utf8.RuneCountInString(got.Text))
			}
			if got.OriginalChars != utf8.RuneCountInString(tt.in) {
				t.Errorf("OriginalChars = %d, want %d", got.OriginalChars, utf8.RuneCountInString(tt.in))
			}
			checkClean(t, tt.in, tt.opt, got)
		})
	}
}

func TestClean_empty(t *testing.T) {
	tests := []struct {
		name string
		in   string
		opt  SanitizeOptions
		want string // in the message
	}{
		{name: "empty", in: "", want: "text is empty"},
		{name: "whitespace only", in: " \n\t\u3000 ", want: "it held only whitespace"},
		{name: "invisible only", in: "\uFEFF\u200B\x00", want: "nothing to classify"},
		{name: "invalid only", in: "\xff\xfe", want: "edit the row in your input file and run again"},
		{name: "emoji stripped", in: "😍 👍🏽", opt: SanitizeOptions{Emoji: EmojiStrip}, want: "strip emoji policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Clean(tt.in, tt.opt)
			if got := pipeline.ClassOf(context.Background(), err); got != pipeline.ClassPermanent {
				t.Fatalf("class = %q (err %v), want permanent", got, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
			if !isItemVerdict(err) {
				t.Errorf("error %q is not marked as a verdict on the item", err)
			}
		})
	}
}

func TestClean_badOptions(t *testing.T) {
	tests := []struct {
		name string
		opt  SanitizeOptions
	}{
		{name: "unknown emoji policy", opt: SanitizeOptions{Emoji: "sparkle"}},
		{name: "negative max chars", opt: SanitizeOptions{MaxChars: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Clean("text", tt.opt)
			if got := pipeline.ClassOf(context.Background(), err); got != pipeline.ClassFatal {
				t.Fatalf("class = %q (err %v), want fatal", got, err)
			}
		})
	}
}

func TestClean_defaultMaxChars(t *testing.T) {
	in := strings.Repeat("word ", 2000) // 10,000 runes
	got, err := Clean(in, SanitizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !got.Truncated || got.Chars > DefaultMaxChars || got.Chars < DefaultMaxChars-5 {
		t.Errorf("Chars = %d Truncated = %v, want just under %d and truncated", got.Chars, got.Truncated, DefaultMaxChars)
	}
	if strings.HasSuffix(got.Text, " ") || !strings.HasSuffix(got.Text, "word") {
		t.Errorf("text ends %q, want a whole word", got.Text[len(got.Text)-10:])
	}
}

func TestSanitize_Process(t *testing.T) {
	s := &Sanitize{MaxChars: 25, Emoji: EmojiDescribe}
	res, err := s.Process(context.Background(), pipeline.Item{Record: pipeline.Record{ID: "r1", Text: "hi 👍 there friend"}})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(res.Output, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"text": "hi :thumbs up sign: there", "chars": 25.0, "truncated": true, "original_chars": 17.0,
		"changes": []any{ChangeEmojiDescribe, ChangeTruncate},
	}
	for k, v := range want {
		if gj, wj := mustJSON(t, got[k]), mustJSON(t, v); gj != wj {
			t.Errorf("%s = %s, want %s", k, gj, wj)
		}
	}
	if len(got) != len(want) {
		t.Errorf("output has keys %v, want exactly %v", got, want)
	}
	if res.Usage != (pipeline.Usage{}) {
		t.Errorf("Usage = %+v, want zero", res.Usage)
	}

	_, err = s.Process(context.Background(), pipeline.Item{Record: pipeline.Record{ID: "r2", Text: " \n", Line: 7}})
	if pipeline.ClassOf(context.Background(), err) != pipeline.ClassPermanent || !strings.Contains(err.Error(), `"r2" (input line 7)`) {
		t.Errorf("empty item: err = %v, want permanent naming the item and line", err)
	}
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkClean asserts Clean's invariants on one output.
func checkClean(t testing.TB, in string, opt SanitizeOptions, got SanitizeOutput) {
	t.Helper()
	maxChars := opt.MaxChars
	if maxChars == 0 {
		maxChars = DefaultMaxChars
	}
	if !utf8.ValidString(got.Text) {
		t.Fatalf("Clean(%q) = %q: not valid UTF-8", in, got.Text)
	}
	if !norm.NFC.IsNormalString(got.Text) {
		t.Fatalf("Clean(%q) = %q: not NFC", in, got.Text)
	}
	if n := utf8.RuneCountInString(got.Text); n > maxChars || n != got.Chars {
		t.Fatalf("Clean(%q) = %q: %d runes, Chars %d, max %d", in, got.Text, n, got.Chars, maxChars)
	}
	for _, r := range got.Text {
		if unicode.IsControl(r) || r == utf8.RuneError || r == '\uFEFF' || (unicode.IsSpace(r) && r != ' ') {
			t.Fatalf("Clean(%q) = %q: contains %U", in, got.Text, r)
		}
	}
	if got.Text != strings.TrimSpace(got.Text) || strings.Contains(got.Text, "  ") {
		t.Fatalf("Clean(%q) = %q: whitespace not collapsed", in, got.Text)
	}
	again, err := Clean(got.Text, opt)
	if err != nil {
		t.Fatalf("Clean(Clean(%q)) error: %v", in, err)
	}
	if again.Text != got.Text || len(again.Changes) != 0 {
		t.Fatalf("not idempotent: Clean(%q) = %q, Clean of that = %q (changes %q)", in, got.Text, again.Text, again.Changes)
	}
}

func FuzzClean(f *testing.F) {
	seeds := []string{
		"Great app, works well.",
		"cafe\u0301 cre\u0300me",
		"bad\xff\xfe byte\xc3",
		"foo\x00bar\x1b[0m",
		"zero\u200Bwidth\u200D join",
		"\uFEFFhello",
		"line one\n\nline\ttwo\r\n",
		"love it 😍👍🏽 👨\u200D👩\u200D👧 🇺🇸🇩",
		"©\uFE0F ™ ❤\uFE0F 1\uFE0F\u20E3 🏴\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F",
		"e\u200B\u0301 \u0301 a\u0328\u0301",
		"한국어 텍스트 \u1100\u1161\u11A8",
		"\u0958\u0959 क\u093C",
		strings.Repeat("ab ", 50),
		"",
	}
	for _, s := range seeds {
		for _, p := range []EmojiPolicy{EmojiKeep, EmojiStrip, EmojiDescribe} {
			f.Add(s, uint8(0), string(p))
			f.Add(s, uint8(7), string(p))
		}
	}
	f.Fuzz(func(t *testing.T, in string, maxChars uint8, policy string) {
		p, err := ParseEmojiPolicy(policy)
		if err != nil {
			return
		}
		opt := SanitizeOptions{MaxChars: int(maxChars), Emoji: p}
		got, err := Clean(in, opt)
		if err != nil {
			if c := pipeline.ClassOf(context.Background(), err); c != pipeline.ClassPermanent {
				t.Fatalf("Clean(%q) error class %q: %v", in, c, err)
			}
			return
		}
		if got.Text == "" {
			t.Fatalf("Clean(%q) returned empty text without an error", in)
		}
		checkClean(t, in, opt, got)
	})
}
