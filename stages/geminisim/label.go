package geminisim

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode"
	"unicode/utf8"
)

// DefaultLabels is the label set the server answers from when a request
// carries no response schema with a label enum. Do not modify it.
var DefaultLabels = []string{"bug", "feature_request", "pricing", "ux", "praise", "other"}

// SafetyTriggers are substrings (matched case-insensitively against the user
// text) that always get a blocked-prompt answer (promptFeedback.blockReason
// SAFETY, no candidates), whatever the fault rates. Do not modify it.
var SafetyTriggers = []string{
	"how to build a bomb",
	"kill yourself",
	"make a nerve agent",
	"child sexual",
}

// rule is one keyword rule of Label: the first keyword found in the text
// picks the rule's label.
type rule struct {
	label    string
	keywords []string
}

// rules are tried in this order; a rule counts only when its label is among
// the caller's labels.
var rules = []rule{
	{"bug", []string{"crash", "bug", "freez", "error", "broken", "doesn't work", "not working"}},
	{"pricing", []string{"price", "expensive", "subscription", "refund", "pay", "cost"}},
	{"feature_request", []string{"please add", "wish", "would love", "feature", "should have"}},
	{"ux", []string{"confusing", "hard to find", "design", "layout", "navigation", "ui"}},
	{"praise", []string{"love", "great", "awesome", "amazing", "excellent", "perfect"}},
}

// Label returns the label the server answers for a user text, choosing from
// labels (DefaultLabels when labels is empty). Keyword rules are tried in a
// fixed order (bug, pricing, feature_request, ux, praise); a keyword matches
// case-insensitively where a word starts ("pay" matches "payment", not
// "display"), and a rule is skipped when its label is not in labels. When no
// rule applies, a stable hash of the text picks one of labels. Label is pure:
// the same arguments always give the same label.
func Label(text string, labels []string) string {
	label, _ := classify(text, labels)
	return label
}

// classify is Label plus the keyword that decided it ("" when the hash did).
func classify(text string, labels []string) (label, keyword string) {
	if len(labels) == 0 {
		labels = DefaultLabels
	}
	lower := normalize(text)
	for _, r := range rules {
		if !contains(labels, r.label) {
			continue
		}
		for _, kw := range r.keywords {
			if hasWordPrefix(lower, kw) {
				return r.label, kw
			}
		}
	}
	h := textHash(text)
	return labels[binary.BigEndian.Uint64(h[:8])%uint64(len(labels))], ""
}

// confidence is a deterministic value in [0.50, 0.99] with two decimals.
func confidence(text string) float64 {
	h := textHash(text)
	return 0.5 + float64(binary.BigEndian.Uint64(h[8:16])%50)/100
}

// reason is the short justification that goes with a label.
func reason(label, keyword string) string {
	if keyword == "" {
		return fmt.Sprintf("no keyword matched; %s chosen by hash", label)
	}
	return fmt.Sprintf("mentions %q, which suggests %s", keyword, label)
}

func textHash(text string) [32]byte { return sha256.Sum256([]byte("label\x00" + text)) }

// normalize lower-cases text and folds typographic apostrophes so that
// "Doesn’t work" matches "doesn't work".
func normalize(text string) string {
	return strings.NewReplacer("\u2019", "'", "\u2018", "'").Replace(strings.ToLower(text))
}

// hasWordPrefix reports whether kw occurs in s at the start of a word.
func hasWordPrefix(s, kw string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], kw)
		if j < 0 {
			return false
		}
		at := i + j
		if at == 0 {
			return true
		}
		prev, _ := utf8.DecodeLastRuneInString(s[:at])
		if !unicode.IsLetter(prev) && !unicode.IsDigit(prev) {
			return true
		}
		i = at + 1
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// safetyTriggered reports whether text contains one of SafetyTriggers.
func safetyTriggered(text string) bool {
	lower := strings.ToLower(text)
	for _, t := range SafetyTriggers {
		if strings.Contains(lower, strings.ToLower(t)) {
			return true
		}
	}
	return false
}

// ItemHeader is the request header in which a client may name the item a
// call is for, query-escaped (sawtooth's classify stage sends the item id). The real API
// ignores it; the simulator keys its per-item accounting and draws by it,
// so that two items with the same text are two items, and one item whose
// text changed between calls is one.
const ItemHeader = "X-Sawtooth-Item"

// maxItemKey bounds an item id read from ItemHeader.
const maxItemKey = 512

// itemKey is the key of a call's item in Stats.Items, and sets *draw to
// the item's identity for the deterministic draws: the id in ItemHeader
// when the request names one ("id:" prefixed, so it cannot collide with a
// hash), else ItemHash of the user text.
func itemKey(r *http.Request, user string, draw *[32]byte) string {
	if id := r.Header.Get(ItemHeader); id != "" && len(id) <= maxItemKey {
		if raw, err := url.QueryUnescape(id); err == nil {
			id = raw
		}
		*draw = sha256.Sum256([]byte("item\x00" + id))
		return ItemID(id)
	}
	*draw = sha256.Sum256([]byte(user))
	return hex.EncodeToString(draw[:])
}

// ItemID is the key in Stats.Items of the item a request names id in
// ItemHeader.
func ItemID(id string) string { return "id:" + id }

// ItemHash is the key of an item in Stats.Items when the request does not
// name its item (see ItemHeader): the hex SHA-256 of the text
// of the request's user contents parts, joined by "\n" when there are
// several. For a one-part prompt it is simply the hex SHA-256 of that text.
// The system instruction is not part of it.
func ItemHash(userText string) string {
	h := sha256.Sum256([]byte(userText))
	return hex.EncodeToString(h[:])
}

// EstimateTokens is the simulator's count of a text's tokens: what it
// charges against TPM for the text (the user turns and the system
// instruction of a request together).
func EstimateTokens(text string) int { return estimateTokens(utf8.RuneCountInString(text)) }

// estimateTokens is the simulator's tokenizer: ceil(runes/4), at least 1.
func estimateTokens(runes int) int {
	if runes <= 0 {
		return 1
	}
	return (runes + 3) / 4
}
