package reviewgen

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Theme is what a review is about: the label a classifier should give it.
type Theme int

// The themes, in the order Themes returns them.
const (
	Bug            Theme = iota // crashes, freezes, errors
	Pricing                     // price, subscription, refunds
	FeatureRequest              // asks for something new
	UX                          // confusing or cluttered design
	Praise                      // happy users
	numThemes
)

var themeNames = [numThemes]string{"bug", "pricing", "feature_request", "ux", "praise"}

// String returns the theme's label: "bug", "pricing", "feature_request",
// "ux" or "praise".
func (t Theme) String() string {
	if t < 0 || t >= numThemes {
		return "Theme(" + strconv.Itoa(int(t)) + ")"
	}
	return themeNames[t]
}

// Themes returns every theme.
func Themes() []Theme { return []Theme{Bug, Pricing, FeatureRequest, UX, Praise} }

// Keywords returns the words (lower case, in every generated language)
// whose presence marks a text as being about t. A text of theme t holds at
// least one of them, after its invisible characters are removed and its
// odd whitespace and control characters are read as spaces, unless its
// Quirk is EmojiOnly or Empty.
func Keywords(t Theme) []string {
	var out []string
	for _, b := range banks {
		out = append(out, b.keywords[t]...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Quirk marks a review generated to exercise an edge case.
type Quirk string

// The quirks. Plain is the zero value.
const (
	Plain     Quirk = ""
	Emoji     Quirk = "emoji"      // words and many emoji
	EmojiOnly Quirk = "emoji-only" // emoji and no words
	Empty     Quirk = "empty"      // "" or only whitespace and invisible characters
	Long      Quirk = "long"       // 6,000 to 20,000 characters
	Unsafe    Quirk = "unsafe"     // holds one of UnsafePhrases
	Control   Quirk = "control"    // control, zero-width and odd whitespace characters
	// Stock is a short stock phrase ("Great app!", "Doesn't work") that
	// many users write word for word: the exact duplicates of a real
	// review feed.
	Stock Quirk = "stock"
)

// StockShare is the share of plain English reviews replaced by a stock
// phrase.
const StockShare = 0.12

// UnsafePhrases are the phrases that Unsafe reviews hold, for a simulator's
// safety filter to block on.
var UnsafePhrases = []string{"how to build a bomb", "kill yourself"}

// Apps are the apps reviewed.
var Apps = []string{"wallpaper-hd", "photo-editor", "fitness-pal", "budget-buddy", "lingo-learn", "sleep-sounds"}

// Locales are the locales of reviews; about 80% are "en", the rest spread
// evenly over the others.
var Locales = []string{"en", "de", "fr", "es", "ja", "pt-BR"}

// Review is one generated app review. The JSON form (see Generate) holds
// every field except Theme and Quirk.
type Review struct {
	ID      string `json:"id"` // "r000001", "r000002", ...
	Text    string `json:"text"`
	App     string `json:"app"`
	Rating  int    `json:"rating"` // 1 to 5
	Date    string `json:"date"`   // 2025-02-01 to 2026-01-31
	Locale  string `json:"locale"`
	Version string `json:"version"` // e.g. "5.4.1", rising with Date
	Theme   Theme  `json:"-"`
	Quirk   Quirk  `json:"-"`
}

// Generator produces reviews. Two Generators with the same seed produce the
// same reviews. It is not safe for concurrent use.
type Generator struct {
	rng *rand.Rand
	// stock draws the stock phrases from a stream of its own, so that
	// adding them left every other field of every review as it was.
	stock *rand.Rand
	n     int
}

// New returns a Generator seeded with seed.
func New(seed uint64) *Generator {
	return &Generator{rng: rand.New(rand.NewPCG(seed, 0x7265766965777321)), stock: rand.New(rand.NewPCG(seed, 0x73746f636b21))}
}

// firstDay is the first review date; reviews spread over the 365 days from
// it.
var firstDay = time.Date(2025, 2, 1, 0, 0, 0, 0, time.UTC)

// Next returns the next review.
func (g *Generator) Next() Review {
	g.n++
	rv := Review{ID: fmt.Sprintf("r%06d", g.n)}

	app := g.rng.IntN(len(Apps))
	rv.App = Apps[app]
	day := g.rng.IntN(365)
	rv.Date = firstDay.AddDate(0, 0, day).Format(time.DateOnly)
	rv.Version = fmt.Sprintf("%d.%d.%d", majors[app], 2+day/30, g.rng.IntN(3))

	lang := 0
	if g.rng.Float64() >= 0.8 {
		lang = 1 + g.rng.IntN(len(Locales)-1)
	}
	rv.Theme = g.theme()
	rv.Rating = g.rating(rv.Theme)

	switch p := g.rng.Float64(); {
	case p < 0.005:
		rv.Quirk = Empty
	case p < 0.010:
		rv.Quirk = Long
	case p < 0.013:
		rv.Quirk = Unsafe
		lang = 0
	case p < 0.023:
		rv.Quirk = Control
	case p < 0.063:
		rv.Quirk = Emoji
	case p < 0.073:
		rv.Quirk = EmojiOnly
	}
	rv.Locale = Locales[lang]

	b := &banks[lang]
	switch rv.Quirk {
	case Empty:
		rv.Text = pick(g.rng, blanks)
	case Long:
		rv.Text = g.long(b, app, rv.Theme)
	case EmojiOnly:
		rv.Text = g.emojiRun(rv.Theme, 3, 12)
	case Emoji:
		rv.Text = g.emojify(g.text(b, app, rv.Theme), b.sep, rv.Theme)
	case Unsafe:
		s := g.text(b, app, rv.Theme)
		if g.rng.IntN(2) == 0 {
			rv.Text = pick(g.rng, unsafeSentences) + " " + s
		} else {
			rv.Text = s + " " + pick(g.rng, unsafeSentences)
		}
	case Control:
		rv.Text = g.garble(g.text(b, app, rv.Theme), b.sep)
	default:
		rv.Text = g.text(b, app, rv.Theme)
	}
	// One draw per review, whatever it is, keeps the stream aligned.
	if p := g.stock.Float64(); rv.Quirk == Plain && lang == 0 && p < StockShare {
		rv.Quirk = Stock
		rv.Text = pick(g.stock, stockPhrases[rv.Theme])
	}
	return rv
}

func (g *Generator) theme() Theme {
	switch p := g.rng.IntN(100); {
	case p < 25:
		return Bug
	case p < 45:
		return Pricing
	case p < 65:
		return FeatureRequest
	case p < 80:
		return UX
	}
	return Praise
}

// ratings[t] lists ratings for theme t, each as often as it should be
// drawn.
var ratings = [numThemes][]int{
	Bug:            {1, 1, 1, 1, 1, 1, 2, 2, 2, 3},
	Pricing:        {1, 1, 1, 1, 2, 2, 2, 3, 3, 4},
	FeatureRequest: {2, 3, 3, 3, 4, 4, 4, 4, 5, 5},
	UX:             {1, 2, 2, 2, 2, 3, 3, 3, 3, 4},
	Praise:         {4, 4, 4, 5, 5, 5, 5, 5, 5, 5},
}

func (g *Generator) rating(t Theme) int { return pick(g.rng, ratings[t]) }

// text returns a plain review: maybe an opener, one or two theme
// sentences, maybe a detail, maybe a closer.
func (g *Generator) text(b *bank, app int, t Theme) string {
	var parts []string
	if g.rng.IntN(10) < 4 {
		parts = append(parts, pick(g.rng, b.openers))
	}
	i := g.rng.IntN(len(b.themes[t]))
	parts = append(parts, b.themes[t][i])
	if g.rng.IntN(10) < 4 {
		j := g.rng.IntN(len(b.themes[t]) - 1)
		if j >= i {
			j++
		}
		parts = append(parts, b.themes[t][j])
	}
	if g.rng.IntN(10) < 3 {
		parts = append(parts, pick(g.rng, b.details))
	}
	if g.rng.IntN(10) < 3 {
		parts = append(parts, pick(g.rng, b.closers))
	}
	return g.fill(strings.Join(parts, b.sep), app)
}

// fill replaces each {thing} in s with one of app's features.
func (g *Generator) fill(s string, app int) string {
	for strings.Contains(s, "{thing}") {
		s = strings.Replace(s, "{thing}", pick(g.rng, things[app]), 1)
	}
	return s
}

// long returns a rant of 6,000 to 20,000 characters on theme t.
func (g *Generator) long(b *bank, app int, t Theme) string {
	target := 6000 + g.rng.IntN(13800)
	var sb strings.Builder
	n := 0
	for n < target {
		var s string
		if g.rng.IntN(3) == 0 {
			s = pick(g.rng, b.details)
		} else {
			s = pick(g.rng, b.themes[t])
		}
		s = g.fill(s, app)
		if n > 0 {
			sb.WriteString(b.sep)
			n += utf8.RuneCountInString(b.sep)
			if g.rng.IntN(8) == 0 {
				sb.WriteString("\n\n")
				n += 2
			}
		}
		sb.WriteString(s)
		n += utf8.RuneCountInString(s)
	}
	return sb.String()
}

func (g *Generator) emojiRun(t Theme, min, max int) string {
	var sb strings.Builder
	for range min + g.rng.IntN(max-min+1) {
		sb.WriteString(pick(g.rng, emojis[t]))
	}
	return sb.String()
}

// emojify puts emoji after some sentences and a run of them at the end.
func (g *Generator) emojify(s, sep string, t Theme) string {
	var sb strings.Builder
	for i, r := range s {
		sb.WriteRune(r)
		end := i+utf8.RuneLen(r) == len(s) || strings.HasPrefix(s[i+utf8.RuneLen(r):], " ")
		if (r == '.' || r == '!' || r == '?' || r == '。') && end && g.rng.IntN(2) == 0 {
			sb.WriteString(sep)
			sb.WriteString(g.emojiRun(t, 1, 3))
		}
	}
	sb.WriteString(sep)
	sb.WriteString(g.emojiRun(t, 3, 8))
	return sb.String()
}

// garble puts control characters, invisible characters and odd whitespace
// between the words of s (between sentences for languages without spaces),
// never inside a word, so that the text still reads the same once cleaned.
func (g *Generator) garble(s, sep string) string {
	var words []string
	if sep == "" {
		words = strings.SplitAfter(s, "。")
	} else {
		words = strings.Split(s, " ")
	}
	var sb strings.Builder
	if g.rng.IntN(3) == 0 {
		sb.WriteString(pick(g.rng, invisibles))
	}
	for i, w := range words {
		sb.WriteString(w)
		if i == len(words)-1 {
			break
		}
		switch g.rng.IntN(6) {
		case 0:
			sb.WriteString(pick(g.rng, oddSpaces))
		case 1:
			sb.WriteString(sep + pick(g.rng, invisibles))
		case 2:
			sb.WriteString(pick(g.rng, controls))
		default:
			sb.WriteString(sep)
		}
	}
	sb.WriteString(pick(g.rng, controls))
	return sb.String()
}

func pick[T any](rng *rand.Rand, from []T) T { return from[rng.IntN(len(from))] }

// Generate writes n reviews from a Generator seeded with seed to w as JSON
// Lines: one object per line with the fields id, text, app, rating (a
// number), date, locale and version, in that order.
func Generate(w io.Writer, n int, seed uint64) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	g := New(seed)
	for range n {
		if err := enc.Encode(g.Next()); err != nil {
			return fmt.Errorf("write review: %w", err)
		}
	}
	return nil
}

// CSVHeader is the header row GenerateCSV writes.
var CSVHeader = []string{"id", "text", "app", "rating", "date", "locale"}

// GenerateCSV writes the same n reviews as Generate(w, n, seed) to w as
// CSV with the columns of CSVHeader. CSV cannot carry NUL bytes, so they
// are dropped from texts, and a CSV reader turns "\r\n" inside a text into
// "\n".
func GenerateCSV(w io.Writer, n int, seed uint64) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return fmt.Errorf("write header: %w", err)
	}
	g := New(seed)
	for range n {
		rv := g.Next()
		row := []string{rv.ID, strings.ReplaceAll(rv.Text, "\x00", ""), rv.App, strconv.Itoa(rv.Rating), rv.Date, rv.Locale}
		if err := cw.Write(row); err != nil {
			return fmt.Errorf("write review: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write review: %w", err)
	}
	return nil
}
