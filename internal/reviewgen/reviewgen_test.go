package reviewgen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func generate(tb testing.TB, n int, seed uint64) []byte {
	tb.Helper()
	var buf bytes.Buffer
	if err := Generate(&buf, n, seed); err != nil {
		tb.Fatalf("Generate: %v", err)
	}
	return buf.Bytes()
}

func reviews(n int, seed uint64) []Review {
	g := New(seed)
	out := make([]Review, n)
	for i := range out {
		out[i] = g.Next()
	}
	return out
}

// clean reads text as a keyword classifier behind a sanitizer would:
// invisible characters dropped, control characters and odd whitespace read
// as single spaces, lower case.
func clean(s string) string {
	var sb strings.Builder
	space := false
	for _, r := range s {
		switch {
		case r == '\u200b' || r == '\u200c' || r == '\u200d' || r == '\u2060' || r == '\ufeff' || r == '\u00ad':
			continue
		case unicode.IsSpace(r) || unicode.IsControl(r):
			if !space {
				sb.WriteByte(' ')
			}
			space = true
			continue
		}
		space = false
		sb.WriteRune(unicode.ToLower(r))
	}
	return strings.TrimSpace(sb.String())
}

var keywords = func() (m [numThemes][]string) {
	for _, t := range Themes() {
		m[t] = Keywords(t)
	}
	return m
}()

// matches returns the themes whose keywords s holds.
func matches(s string) []Theme {
	var out []Theme
	for _, t := range Themes() {
		for _, k := range keywords[t] {
			if strings.Contains(s, k) {
				out = append(out, t)
				break
			}
		}
	}
	return out
}

func TestGenerate_deterministic(t *testing.T) {
	a := generate(t, 500, 7)
	b := generate(t, 500, 7)
	if !bytes.Equal(a, b) {
		t.Fatal("two runs with seed 7 differ")
	}
	if c := generate(t, 500, 8); bytes.Equal(a, c) {
		t.Fatal("seeds 7 and 8 give the same reviews")
	}
	if p := generate(t, 100, 7); !bytes.HasPrefix(a, p) {
		t.Fatal("the first 100 reviews depend on n")
	}
}

func TestGenerate_lines(t *testing.T) {
	out := generate(t, 3000, 1)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		if !utf8.Valid(line) {
			t.Fatalf("line %d is not valid UTF-8", n)
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		var rv Review
		if err := json.Unmarshal(line, &rv); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		if len(m) != 7 {
			t.Errorf("line %d has %d fields, want 7: %s", n, len(m), line)
		}
		if _, ok := m["rating"].(float64); !ok {
			t.Errorf("line %d: rating is %T, want a JSON number", n, m["rating"])
		}
		switch {
		case rv.ID != fmt.Sprintf("r%06d", n):
			t.Errorf("line %d: id %q", n, rv.ID)
		case rv.Rating < 1 || rv.Rating > 5:
			t.Errorf("line %d: rating %d", n, rv.Rating)
		case rv.Date < "2025-02-01" || rv.Date > "2026-01-31":
			t.Errorf("line %d: date %s", n, rv.Date)
		case !slices.Contains(Apps, rv.App):
			t.Errorf("line %d: app %q", n, rv.App)
		case !slices.Contains(Locales, rv.Locale):
			t.Errorf("line %d: locale %q", n, rv.Locale)
		case rv.Version == "":
			t.Errorf("line %d: no version", n)
		}
	}
	if n != 3000 {
		t.Fatalf("%d lines, want 3000", n)
	}
}

func TestGenerator_distribution(t *testing.T) {
	const n = 3000
	themes := map[Theme]int{}
	quirks := map[Quirk]int{}
	locales := map[string]int{}
	apps := map[string]int{}
	months := map[string]int{}
	for _, rv := range reviews(n, 1) {
		themes[rv.Theme]++
		quirks[rv.Quirk]++
		locales[rv.Locale]++
		apps[rv.App]++
		months[rv.Date[:7]]++

		runes := utf8.RuneCountInString(rv.Text)
		switch rv.Quirk {
		case Empty:
			if clean(rv.Text) != "" {
				t.Errorf("%s: empty review has text %q", rv.ID, rv.Text)
			}
		case Long:
			if runes < 6000 || runes > 20000 {
				t.Errorf("%s: long review has %d characters", rv.ID, runes)
			}
		case Unsafe:
			if !strings.Contains(rv.Text, UnsafePhrases[0]) && !strings.Contains(rv.Text, UnsafePhrases[1]) {
				t.Errorf("%s: unsafe review without an unsafe phrase: %q", rv.ID, rv.Text)
			}
		case Control:
			if !strings.ContainsFunc(rv.Text, unicode.IsControl) {
				t.Errorf("%s: control review without a control character: %q", rv.ID, rv.Text)
			}
		}
		if rv.Quirk != Long && runes > 1000 {
			t.Errorf("%s: %d characters in a %q review", rv.ID, runes, rv.Quirk)
		}
	}

	share := func(k int) float64 { return float64(k) / n }
	for _, th := range Themes() {
		if s := share(themes[th]); s < 0.10 || s > 0.35 {
			t.Errorf("theme %s: %.1f%% of reviews", th, 100*s)
		}
	}
	for q, want := range map[Quirk]float64{Emoji: 0.04, EmojiOnly: 0.01, Empty: 0.005, Long: 0.005, Unsafe: 0.003, Control: 0.01, Stock: StockShare * 0.8 * 0.93} {
		if got := share(quirks[q]); got < want/3 || got > want*2 {
			t.Errorf("quirk %s: %.2f%% of reviews, want about %.1f%%", q, 100*got, 100*want)
		}
	}
	if s := share(locales["en"]); s < 0.75 || s > 0.85 {
		t.Errorf("en: %.1f%% of reviews, want about 80%%", 100*s)
	}
	for _, l := range Locales {
		if locales[l] == 0 {
			t.Errorf("no review in locale %s", l)
		}
	}
	for _, a := range Apps {
		if apps[a] == 0 {
			t.Errorf("no review of app %s", a)
		}
	}
	if len(months) != 12 {
		t.Errorf("reviews span %d months, want 12", len(months))
	}
}

// TestGenerator_keywords checks the promise of Keywords on every review
// that has words: its own theme's keywords and no other theme's.
func TestGenerator_keywords(t *testing.T) {
	for _, rv := range reviews(3000, 1) {
		if rv.Quirk == Empty || rv.Quirk == EmojiOnly {
			continue
		}
		text := clean(rv.Text)
		if got := matches(text); !slices.Equal(got, []Theme{rv.Theme}) {
			t.Errorf("%s (%s, %s, quirk %q) matches themes %v: %q", rv.ID, rv.Theme, rv.Locale, rv.Quirk, got, text)
		}
	}
}

// TestBanks checks every phrase, so that a phrase the sample above never
// drew cannot break the promise of Keywords either.
func TestBanks(t *testing.T) {
	var neutral []string
	for _, b := range banks {
		neutral = slices.Concat(neutral, b.openers, b.details, b.closers)
	}
	for _, ts := range things {
		neutral = append(neutral, ts...)
	}
	neutral = slices.Concat(neutral, unsafeSentences, Apps)
	for _, s := range neutral {
		if got := matches(strings.ToLower(s)); got != nil {
			t.Errorf("neutral phrase %q matches %v", s, got)
		}
	}
	for li, b := range banks {
		for _, th := range Themes() {
			if len(b.themes[th]) < 2 {
				t.Errorf("%s %s: %d phrases, want at least 2", Locales[li], th, len(b.themes[th]))
			}
			for _, s := range b.themes[th] {
				for _, ts := range things {
					for _, thing := range ts {
						p := strings.ToLower(strings.ReplaceAll(s, "{thing}", thing))
						if got := matches(p); !slices.Equal(got, []Theme{th}) {
							t.Errorf("%s %s phrase %q matches %v", Locales[li], th, p, got)
						}
					}
				}
			}
		}
	}
}

func TestGenerateCSV(t *testing.T) {
	var a, b bytes.Buffer
	if err := GenerateCSV(&a, 300, 3); err != nil {
		t.Fatal(err)
	}
	if err := GenerateCSV(&b, 300, 3); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two runs with seed 3 differ")
	}
	if bytes.IndexByte(a.Bytes(), 0) >= 0 {
		t.Fatal("CSV output holds a NUL byte")
	}
	if !bytes.HasPrefix(a.Bytes(), []byte("id,text,app,rating,date,locale\n")) {
		t.Fatalf("CSV starts %q", a.String()[:40])
	}
}

// TestTestdata checks that the files in testdata/ are what go generate
// writes today.
func TestTestdata(t *testing.T) {
	tests := []struct {
		file string
		n    int
		seed uint64
		gen  func(*bytes.Buffer, int, uint64) error
	}{
		{"reviews.jsonl", 3000, 1, func(w *bytes.Buffer, n int, s uint64) error { return Generate(w, n, s) }},
		{"reviews-small.jsonl", 200, 2, func(w *bytes.Buffer, n int, s uint64) error { return Generate(w, n, s) }},
		{"reviews.csv", 200, 2, func(w *bytes.Buffer, n int, s uint64) error { return GenerateCSV(w, n, s) }},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := os.ReadFile(filepath.Join("..", "..", "testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			var want bytes.Buffer
			if err := tt.gen(&want, tt.n, tt.seed); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("testdata/%s is stale: run go generate ./internal/reviewgen", tt.file)
			}
		})
	}
}
