package stages

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
	"golang.org/x/text/unicode/runenames"

	"github.com/sawtooth-dev/sawtooth/pipeline"
)

// DefaultMaxChars is the default SanitizeOptions.MaxChars, in runes: about
// 1,000 tokens of English, far more than any app review needs.
const DefaultMaxChars = 4000

// EmojiPolicy says what sanitizing does with emoji. Some safety filters
// react to emoji strings, and a label rarely needs them.
type EmojiPolicy string

const (
	// EmojiKeep leaves emoji as they are (the default).
	EmojiKeep EmojiPolicy = "keep"
	// EmojiStrip removes emoji.
	EmojiStrip EmojiPolicy = "strip"
	// EmojiDescribe replaces each emoji by its lowercase Unicode name in
	// colons, e.g. "👍" -> ":thumbs up sign:", a flag by ":flag us:", and an
	// emoji newer than our Unicode tables by ":emoji:".
	EmojiDescribe EmojiPolicy = "describe"
)

// ParseEmojiPolicy parses a policy name as given on a command line.
// The empty string is EmojiKeep.
func ParseEmojiPolicy(s string) (EmojiPolicy, error) {
	switch p := EmojiPolicy(strings.ToLower(strings.TrimSpace(s))); p {
	case "":
		return EmojiKeep, nil
	case EmojiKeep, EmojiStrip, EmojiDescribe:
		return p, nil
	default:
		return "", fmt.Errorf("unknown emoji policy %q: use keep, strip or describe", s)
	}
}

// Change names recorded in SanitizeOutput.Changes, in the order they are
// listed there.
const (
	ChangeInvalidUTF8   = "invalid_utf8"   // invalid byte sequences (and U+FFFD from an earlier lossy decode) dropped
	ChangeNFC           = "nfc"            // normalised to Unicode NFC
	ChangeControl       = "control"        // control characters replaced by a space
	ChangeFormat        = "format"         // invisible format characters dropped: zero-width spaces and joiners, bidi controls, soft hyphens, tags
	ChangeBOM           = "bom"            // byte order marks (U+FEFF) dropped
	ChangeWhitespace    = "whitespace"     // whitespace runs collapsed to one space, ends trimmed
	ChangeEmojiStrip    = "emoji_strip"    // emoji removed (EmojiStrip)
	ChangeEmojiDescribe = "emoji_describe" // emoji replaced by names (EmojiDescribe)
	ChangeTruncate      = "truncate"       // cut to MaxChars
)

type changeSet uint16

const (
	chInvalidUTF8 changeSet = 1 << iota
	chNFC
	chControl
	chFormat
	chBOM
	chWhitespace
	chEmojiStrip
	chEmojiDescribe
	chTruncate
)

var changeNames = []string{
	ChangeInvalidUTF8, ChangeNFC, ChangeControl, ChangeFormat, ChangeBOM,
	ChangeWhitespace, ChangeEmojiStrip, ChangeEmojiDescribe, ChangeTruncate,
}

func (c changeSet) names() []string {
	out := []string{}
	for i, name := range changeNames {
		if c&(1<<i) != 0 {
			out = append(out, name)
		}
	}
	return out
}

// SanitizeOptions configures Clean. The zero value uses the defaults.
type SanitizeOptions struct {
	// MaxChars is the longest output, in runes (Unicode code points).
	// Zero means DefaultMaxChars.
	MaxChars int
	// Emoji is the emoji policy; "" means EmojiKeep.
	Emoji EmojiPolicy
}

// SanitizeOutput is the sanitize stage's output, stored as JSON.
type SanitizeOutput struct {
	// Text is the cleaned text: valid UTF-8, NFC, no control or format
	// characters, single spaces, trimmed, at most MaxChars runes.
	Text string `json:"text"`
	// Chars is Text's length in runes.
	Chars int `json:"chars"`
	// Truncated is true when Text was cut to MaxChars.
	Truncated bool `json:"truncated"`
	// OriginalChars is the input's length in runes (an invalid byte counts
	// as one).
	OriginalChars int `json:"original_chars"`
	// Changes lists what sanitizing changed (Change* names, in a fixed
	// order); empty, not null, when the text was already clean.
	Changes []string `json:"changes"`
}

// Clean sanitizes text for a language model:
//
//  1. invalid UTF-8 is dropped (and so is U+FFFD, the mark an earlier lossy
//     decode leaves);
//  2. the text is normalised to NFC;
//  3. control characters become spaces, invisible format characters and
//     byte order marks are dropped, emoji are handled per opt.Emoji;
//  4. whitespace (newlines and tabs included) collapses to single spaces and
//     the ends are trimmed;
//  5. text longer than opt.MaxChars runes is cut, at the last space when one
//     is near enough, never inside a character's combining marks.
//
// Clean is pure and idempotent: Clean(Clean(x).Text) returns the same text
// with no changes. An empty result is a permanent error (nothing to
// classify); invalid options are a fatal one (they fail every item).
func Clean(text string, opt SanitizeOptions) (SanitizeOutput, error) {
	maxChars, policy, err := opt.resolve()
	if err != nil {
		return SanitizeOutput{}, pipeline.Fatal(err)
	}
	out := SanitizeOutput{OriginalChars: utf8.RuneCountInString(text)}
	var ch changeSet

	s := dropInvalid(text, &ch)
	s = nfc(s, &ch)
	s = cleanRunes(s, policy, &ch)
	// Dropping a format character can bring a letter and its combining
	// mark together, so normalise again.
	s = nfc(s, &ch)
	if utf8.RuneCountInString(s) > maxChars {
		s = truncate(s, maxChars)
		ch |= chTruncate
		out.Truncated = true
		// The cut may leave a dangling joiner or half a sequence; one more
		// pass makes the result a fixed point.
		s = nfc(cleanRunes(s, policy, &ch), &ch)
	}
	if s == "" {
		return out, emptyError(text, ch)
	}
	out.Text = s
	out.Chars = utf8.RuneCountInString(s)
	out.Changes = ch.names()
	return out, nil
}

func (o SanitizeOptions) resolve() (int, EmojiPolicy, error) {
	maxChars := o.MaxChars
	switch {
	case maxChars == 0:
		maxChars = DefaultMaxChars
	case maxChars < 0:
		return 0, "", fmt.Errorf("sanitize: max chars is %d: use a positive number of characters, or 0 for %d", o.MaxChars, DefaultMaxChars)
	}
	policy, err := ParseEmojiPolicy(string(o.Emoji))
	if err != nil {
		return 0, "", fmt.Errorf("sanitize: %w", err)
	}
	return maxChars, policy, nil
}

func emptyError(original string, ch changeSet) error {
	if original == "" {
		return verdict(fmt.Errorf("text is empty: nothing to classify; %s", editRowHint))
	}
	what := "whitespace, control, format or invalid characters"
	if ch&chEmojiStrip != 0 {
		what += " and emoji (removed by the strip emoji policy)"
	}
	// No byte count: dead letters are grouped by message, and a number
	// would only show up there as a placeholder.
	return verdict(fmt.Errorf("text is empty after sanitizing (it held only %s): nothing to classify; %s", what, editRowHint))
}

func dropInvalid(s string, ch *changeSet) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, utf8.RuneError) {
		return s
	}
	*ch |= chInvalidUTF8
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r != utf8.RuneError {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func nfc(s string, ch *changeSet) string {
	if norm.NFC.IsNormalString(s) {
		return s
	}
	*ch |= chNFC
	return norm.NFC.String(s)
}

// cleanRunes maps controls to spaces, drops format characters, applies the
// emoji policy, collapses whitespace and trims.
func cleanRunes(s string, policy EmojiPolicy, ch *changeSet) string {
	var b strings.Builder
	b.Grow(len(s))
	var (
		pending   bool // a separator is owed before the next text
		pendingWS bool // ... and whitespace (not only controls) is part of it
		wrote     bool // some text has been written
	)
	emit := func(t string) {
		if pending && wrote {
			b.WriteByte(' ')
		}
		pending, pendingWS = false, false
		b.WriteString(t)
		wrote = true
	}
	emojiChange := chEmojiStrip
	if policy == EmojiDescribe {
		emojiChange = chEmojiDescribe
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if end := emojiEnd(s, i); end > i {
			switch policy {
			case EmojiKeep:
				emit(s[i:end])
			case EmojiStrip:
				*ch |= chEmojiStrip
			case EmojiDescribe:
				emit(describeEmoji(s[i:end]))
				*ch |= chEmojiDescribe
			}
			i = end
			continue
		}
		switch {
		case r == ' ':
			if pending || !wrote {
				*ch |= chWhitespace
			}
			pending, pendingWS = true, true
		case unicode.IsSpace(r):
			*ch |= chWhitespace
			pending, pendingWS = true, true
		case unicode.IsControl(r):
			*ch |= chControl
			pending = true
		case r == '\uFEFF':
			*ch |= chBOM
		case unicode.Is(unicode.Cf, r):
			*ch |= chFormat
		case policy != EmojiKeep && isEmojiComponent(r):
			// A presentation selector, skin tone or keycap mark left
			// without its emoji.
			*ch |= emojiChange
		default:
			emit(s[i : i+size])
		}
		i += size
	}
	if pendingWS {
		*ch |= chWhitespace // trailing whitespace trimmed
	}
	return b.String()
}

// truncate cuts s (NFC, single-spaced) to at most max runes: at the last
// space when that loses at most a short word's worth, and never between a
// character and its combining marks or inside an emoji sequence.
func truncate(s string, max int) string {
	cut := 0
	for n := 0; n < max && cut < len(s); n++ {
		_, size := utf8.DecodeRuneInString(s[cut:])
		cut += size
	}
	if cut >= len(s) {
		return s
	}
	if s[cut] != ' ' {
		if sp := strings.LastIndexByte(s[:cut], ' '); sp > 0 && utf8.RuneCountInString(s[sp:cut]) <= maxWordBackoff(max) {
			return strings.TrimRight(s[:sp], " ")
		}
	}
	for cut > 0 && !safeCut(s, cut) {
		_, size := utf8.DecodeLastRuneInString(s[:cut])
		cut -= size
	}
	return strings.TrimRight(s[:cut], " ")
}

// maxWordBackoff is how many runes truncate gives up to end at a word
// boundary: a long word, but never more than a quarter of the budget.
func maxWordBackoff(max int) int {
	return min(32, max/4)
}

// safeCut reports whether s may be cut before byte i without separating a
// character from its combining marks or splitting an emoji sequence.
func safeCut(s string, i int) bool {
	next, _ := utf8.DecodeRuneInString(s[i:])
	prev, _ := utf8.DecodeLastRuneInString(s[:i])
	if next == zwj || prev == zwj || isEmojiComponent(next) || isTag(next) {
		return false
	}
	return norm.NFC.PropertiesString(s[i:]).BoundaryBefore()
}

const (
	zwj = '\u200D'
	vs  = '\uFE0F' // emoji presentation selector
	vt  = '\uFE0E' // text presentation selector
)

// emojiEnd returns the end of the emoji sequence starting at s[i], or i if
// none starts there. A sequence is a pictograph (or a regional indicator
// pair, a flag) followed by presentation selectors, skin tones, a keycap
// mark, tag characters, and further pictographs joined by ZWJ.
func emojiEnd(s string, i int) int {
	r, size := utf8.DecodeRuneInString(s[i:])
	if isRegional(r) {
		j := i + size
		if r2, size2 := utf8.DecodeRuneInString(s[j:]); isRegional(r2) {
			j += size2
		}
		return j
	}
	if !isPictograph(r) {
		return i
	}
	next, _ := utf8.DecodeRuneInString(s[i+size:])
	if r < 0x1F000 && !isDefaultEmoji(r) && next != vs {
		// ©, ™, arrows and the like are text unless asked to be emoji.
		return i
	}
	j := i + size
	for j < len(s) {
		r, size := utf8.DecodeRuneInString(s[j:])
		switch {
		case isEmojiComponent(r) || isTag(r):
			j += size
		case r == zwj:
			r2, size2 := utf8.DecodeRuneInString(s[j+size:])
			if !isPictograph(r2) {
				return j
			}
			j += size + size2
		default:
			return j
		}
	}
	return j
}

func describeEmoji(seq string) string {
	var b strings.Builder
	for i := 0; i < len(seq); {
		r, size := utf8.DecodeRuneInString(seq[i:])
		switch {
		case isRegional(r):
			r2, size2 := utf8.DecodeRuneInString(seq[i+size:])
			if isRegional(r2) {
				fmt.Fprintf(&b, ":flag %c%c:", 'a'+r-0x1F1E6, 'a'+r2-0x1F1E6)
				size += size2
			} else {
				fmt.Fprintf(&b, ":regional indicator %c:", 'a'+r-0x1F1E6)
			}
		case isPictograph(r):
			name := strings.ToLower(runenames.Name(r))
			if name == "" || strings.HasPrefix(name, "<") {
				name = "emoji"
			}
			b.WriteString(":" + name + ":")
		}
		i += size
	}
	if b.Len() == 0 {
		return ":emoji:"
	}
	return b.String()
}

func isRegional(r rune) bool { return r >= 0x1F1E6 && r <= 0x1F1FF }

func isTag(r rune) bool { return r >= 0xE0020 && r <= 0xE007F }

// isEmojiComponent reports a rune that only modifies the emoji before it.
func isEmojiComponent(r rune) bool {
	return r == vs || r == vt || r == '\u20E3' || (r >= 0x1F3FB && r <= 0x1F3FF)
}

// isPictograph approximates Unicode's Extended_Pictographic property, which
// neither the standard library nor x/text exposes.
func isPictograph(r rune) bool {
	return unicode.Is(pictographs, r)
}

// isDefaultEmoji reports the pictographs below U+1F000 shown as emoji
// without a presentation selector: the Misc Symbols and Dingbats blocks
// (☀ ☺ ♥ ✈ ✔ ❤, which reviews use bare) and the Emoji_Presentation ones
// elsewhere (⌚ ⏰ ⬛ ⭐ ⭕).
func isDefaultEmoji(r rune) bool {
	switch {
	case r >= 0x2600 && r <= 0x27BF:
		return true
	case r == 0x231A, r == 0x231B, r >= 0x23E9 && r <= 0x23EC, r == 0x23F0, r == 0x23F3,
		r == 0x25FD, r == 0x25FE, r == 0x2B1B, r == 0x2B1C, r == 0x2B50, r == 0x2B55:
		return true
	}
	return false
}

// pictographs is Extended_Pictographic from Unicode 15's emoji-data.txt,
// skin tone modifiers (U+1F3FB..U+1F3FF) excluded.
var pictographs = &unicode.RangeTable{
	R16: []unicode.Range16{
		{0x00A9, 0x00A9, 1}, {0x00AE, 0x00AE, 1}, {0x203C, 0x203C, 1}, {0x2049, 0x2049, 1},
		{0x2122, 0x2122, 1}, {0x2139, 0x2139, 1}, {0x2194, 0x2199, 1}, {0x21A9, 0x21AA, 1},
		{0x231A, 0x231B, 1}, {0x2328, 0x2328, 1}, {0x2388, 0x2388, 1}, {0x23CF, 0x23CF, 1},
		{0x23E9, 0x23F3, 1}, {0x23F8, 0x23FA, 1}, {0x24C2, 0x24C2, 1}, {0x25AA, 0x25AB, 1},
		{0x25B6, 0x25B6, 1}, {0x25C0, 0x25C0, 1}, {0x25FB, 0x25FE, 1}, {0x2600, 0x2605, 1},
		{0x2607, 0x2612, 1}, {0x2614, 0x2685, 1}, {0x2690, 0x2705, 1}, {0x2708, 0x2712, 1},
		{0x2714, 0x2714, 1}, {0x2716, 0x2716, 1}, {0x271D, 0x271D, 1}, {0x2721, 0x2721, 1},
		{0x2728, 0x2728, 1}, {0x2733, 0x2734, 1}, {0x2744, 0x2744, 1}, {0x2747, 0x2747, 1},
		{0x274C, 0x274C, 1}, {0x274E, 0x274E, 1}, {0x2753, 0x2755, 1}, {0x2757, 0x2757, 1},
		{0x2763, 0x2767, 1}, {0x2795, 0x2797, 1}, {0x27A1, 0x27A1, 1}, {0x27B0, 0x27B0, 1},
		{0x27BF, 0x27BF, 1}, {0x2934, 0x2935, 1}, {0x2B05, 0x2B07, 1}, {0x2B1B, 0x2B1C, 1},
		{0x2B50, 0x2B50, 1}, {0x2B55, 0x2B55, 1}, {0x3030, 0x3030, 1}, {0x303D, 0x303D, 1},
		{0x3297, 0x3297, 1}, {0x3299, 0x3299, 1},
	},
	R32: []unicode.Range32{
		{0x1F000, 0x1F0FF, 1}, {0x1F10D, 0x1F10F, 1}, {0x1F12F, 0x1F12F, 1}, {0x1F16C, 0x1F171, 1},
		{0x1F17E, 0x1F17F, 1}, {0x1F18E, 0x1F18E, 1}, {0x1F191, 0x1F19A, 1}, {0x1F1AD, 0x1F1E5, 1},
		{0x1F201, 0x1F20F, 1}, {0x1F21A, 0x1F21A, 1}, {0x1F22F, 0x1F22F, 1}, {0x1F232, 0x1F23A, 1},
		{0x1F23C, 0x1F23F, 1}, {0x1F249, 0x1F3FA, 1}, {0x1F400, 0x1F53D, 1}, {0x1F546, 0x1F64F, 1},
		{0x1F680, 0x1F6FF, 1}, {0x1F774, 0x1F77F, 1}, {0x1F7D5, 0x1F7FF, 1}, {0x1F80C, 0x1F80F, 1},
		{0x1F848, 0x1F84F, 1}, {0x1F85A, 0x1F85F, 1}, {0x1F888, 0x1F88F, 1}, {0x1F8AE, 0x1F8FF, 1},
		{0x1F90C, 0x1F93A, 1}, {0x1F93C, 0x1F945, 1}, {0x1F947, 0x1FAFF, 1}, {0x1FC00, 0x1FFFD, 1},
	},
}

// Sanitize is the first stage: it cleans each item's text with Clean.
// The zero value uses the defaults. It is safe for concurrent use and calls
// nothing outside the process, so it needs no limiter.
type Sanitize struct {
	// MaxChars is the longest output text in runes; 0 means DefaultMaxChars.
	MaxChars int
	// Emoji is the emoji policy; "" means EmojiKeep.
	Emoji EmojiPolicy
}

var _ pipeline.Stage = (*Sanitize)(nil)

// Name returns "sanitize".
func (s *Sanitize) Name() string { return "sanitize" }

// Options returns the stage's configuration as SanitizeOptions.
func (s *Sanitize) Options() SanitizeOptions {
	return SanitizeOptions{MaxChars: s.MaxChars, Emoji: s.Emoji}
}

// Process cleans it.Text and returns a SanitizeOutput as JSON. Text that
// is empty after cleaning is a permanent error naming the item.
func (s *Sanitize) Process(_ context.Context, it pipeline.Item) (pipeline.Result, error) {
	out, err := Clean(it.Text, s.Options())
	if err != nil {
		return pipeline.Result{}, fmt.Errorf("item %s: %w", itemRef(it), err)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return pipeline.Result{}, fmt.Errorf("sanitize: encode output: %w", err)
	}
	return pipeline.Result{Output: b}, nil
}

// itemRef names an item in messages: its id and, when known, its input line.
func itemRef(it pipeline.Item) string {
	if it.Line > 0 {
		return fmt.Sprintf("%q (input line %d)", it.ID, it.Line)
	}
	return fmt.Sprintf("%q", it.ID)
}
