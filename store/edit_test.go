package store

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sawtooth-dev/sawtooth/internal/reviewgen"
	"github.com/sawtooth-dev/sawtooth/pipeline"
	bolt "go.etcd.io/bbolt"
)

// longReview is a long review in paragraphs: sanitizing collapses each
// paragraph break and cuts it to the stage's budget.
var longReview = strings.Repeat("Crashed three times today and I lost my progress. I use it every evening before bed. "+
	"Reinstalled it twice already. Otherwise fine, but the sync is slow and the widget is gone.  \n\n", 40)

func TestAppendEdit(t *testing.T) {
	collapsed := strings.Join(strings.Fields(longReview), " ")
	for _, tc := range []struct {
		name, s, text string
		edit          bool // stored as an edit
	}{
		{"whitespace collapsed", collapsed, longReview, true},
		{"collapsed and cut", collapsed[:4000], longReview, true},
		{"cut and marked", collapsed[:3000] + " [...]", longReview, true},
		{"control characters dropped", strings.ReplaceAll(longReview, "\t", ""), strings.ReplaceAll(longReview, "\t", "\x00\x01\t"), true},
		{"a word inserted", longReview[:500] + "INSERTED" + longReview[500:], longReview, true},
		{"another text", strings.Repeat("Nothing like the review at all, a summary instead. ", 20), longReview, false},
		{"longer than the text", longReview + longReview, longReview, false},
		{"empty text", collapsed, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, ok := appendEdit([]byte{0xff}, tc.s, tc.text)
			if ok != tc.edit {
				t.Fatalf("stored as an edit: %v, want %v", ok, tc.edit)
			}
			if !ok {
				if len(out) != 1 {
					t.Errorf("a refused edit appended %d bytes", len(out)-1)
				}
				return
			}
			if len(out) > len(tc.s)/10 {
				t.Errorf("edit of %d bytes for a string of %d", len(out)-1, len(tc.s))
			}
			if out[0] != 0xff || out[1] != pEdit {
				t.Fatalf("edit starts % x, want ff then pEdit", out[:2])
			}
			got, rest, err := appendEdited([]byte("<"), out[2:], tc.text)
			if err != nil || len(rest) != 0 || string(got) != "<"+tc.s {
				t.Fatalf("read back %d bytes, rest %d, err %v; want the string (%d bytes)", len(got)-1, len(rest), err, len(tc.s))
			}
			if rest, err := skipEdit(out[2:]); err != nil || len(rest) != 0 {
				t.Errorf("skip: rest %d, err %v", len(rest), err)
			}
		})
	}
}

// Random texts edited at random (bytes dropped, replaced, inserted, the
// end cut) always read back as they were, or are refused.
func TestAppendEdit_randomEditsRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 31))
	g := reviewgen.New(3)
	edits := 0
	for i := range 2000 {
		text := g.Next().Text
		for len(text) < 300 {
			text += " \n " + g.Next().Text
		}
		b := []byte(text)
		for range rng.IntN(20) {
			at := rng.IntN(len(b))
			switch rng.IntN(3) {
			case 0:
				b = append(b[:at], b[at+1:]...)
			case 1:
				b[at] = byte(rng.IntN(256))
			default:
				b = append(b[:at], append([]byte("xyz"), b[at:]...)...)
			}
		}
		s := string(b[:len(b)-rng.IntN(len(b)/2)])
		out, ok := appendEdit(nil, s, text)
		if !ok {
			continue
		}
		edits++
		got, rest, err := appendEdited(nil, out[1:], text)
		if err != nil || len(rest) != 0 || string(got) != s {
			t.Fatalf("case %d: read back %q (rest %d, %v), want %q", i, got, len(rest), err, s)
		}
	}
	if edits < 1900 {
		t.Errorf("%d of 2000 stored as edits, want most", edits)
	}
}

// A damaged edit is an error, never a panic or a read past the text.
func TestAppendEdited_damaged(t *testing.T) {
	out, ok := appendEdit(nil, strings.Join(strings.Fields(longReview), " "), longReview)
	if !ok {
		t.Fatal("not an edit")
	}
	steps := out[1:]
	for cut := range len(steps) {
		if _, _, err := appendEdited(nil, steps[:cut], longReview); err == nil {
			t.Errorf("cut at %d of %d: no error", cut, len(steps))
		}
	}
	if _, _, err := appendEdited(nil, steps, longReview[:100]); err == nil {
		t.Error("a shorter text: no error")
	}
}

// sanitizeOut is an output as the sanitize stage writes it (stages.Clean,
// which this package cannot import: its SDK's goroutines would fail the
// leak check): whitespace collapsed, cut at a space to 4,000 runes.
func sanitizeOut(tb testing.TB, text string) json.RawMessage {
	tb.Helper()
	s := strings.Join(strings.Fields(text), " ")
	r := []rune(s)
	cut := len(r) > 4000
	if cut {
		s = strings.TrimSpace(string(r[:4000]))
		s = s[:strings.LastIndexByte(s, ' ')]
	}
	b, err := json.Marshal(map[string]any{"text": s, "chars": len([]rune(s)), "truncated": cut,
		"original_chars": len([]rune(text)), "changes": []string{"whitespace", "truncate"}})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// Long reviews with paragraphs, sanitized (collapsed and cut to the
// budget): each took a 4 KB record of its own, two pages; as edits of the
// item's text they share pages, and read back as the stage wrote them.
func TestDB_SanitizedTextIsAnEdit(t *testing.T) {
	db := openTest(t)
	const n = 200
	var rs []pipeline.Record
	for i := range n {
		rs = append(rs, pipeline.Record{ID: fmt.Sprintf("r%04d", i), Text: fmt.Sprintf("review %d. %s", i, longReview)})
	}
	if _, err := db.Ingest(rs); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	advance(t, db, "sanitize", func(id string) json.RawMessage {
		var i int
		fmt.Sscanf(id, "r%d", &i)
		out := sanitizeOut(t, rs[i].Text)
		want[id] = string(out)
		return out
	})
	var st bolt.BucketStats
	size := 0
	if err := db.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(outBucket("sanitize"))
		st = b.Stats()
		return b.ForEach(func(k, v []byte) error { size += len(v); return nil })
	}); err != nil {
		t.Fatal(err)
	}
	if pages := st.LeafPageN + st.LeafOverflowN; pages > 20 || size > n*300 {
		t.Errorf("out/sanitize: %d pages, %d bytes of records for %d outputs, want at most 20 pages, 300 bytes each", pages, size, n)
	}
	got := stageOutputs(t, db, "sanitize")
	if len(got) != n {
		t.Fatalf("%d outputs, want %d", len(got), n)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("%s: read back\n%s\nwant\n%s", id, got[id], w)
		}
	}
}

// An edit is kept only when it is less than half the string, its kind
// byte and step count included (short strings a few letters off their
// text came to just over half).
func TestAppendEdit_lessThanHalf(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	edits := 0
	for range 20000 {
		text := make([]byte, 64+rng.IntN(64))
		for j := range text {
			text[j] = 'a' + byte(rng.IntN(26))
		}
		s := []byte(string(text))
		for range rng.IntN(6) {
			s[rng.IntN(len(s))] = 'A' + byte(rng.IntN(26))
		}
		out, ok := appendEdit(nil, string(s), string(text))
		if !ok {
			continue
		}
		edits++
		if 2*len(out) >= len(s) {
			t.Fatalf("an edit of %d bytes kept for a string of %d", len(out), len(s))
		}
	}
	if edits < 10000 {
		t.Errorf("%d of 20000 stored as edits, want most", edits)
	}
}
