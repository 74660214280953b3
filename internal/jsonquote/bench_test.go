package jsonquote

import (
	"testing"

	"github.com/sawtooth-dev/sawtooth/internal/reviewgen"
)

// BenchmarkAppend quotes generated reviews' texts, the strings export
// and the store's packing quote most.
func BenchmarkAppend(b *testing.B) {
	g := reviewgen.New(1)
	texts := make([]string, 1000)
	size := 0
	for i := range texts {
		texts[i] = g.Next().Text
		size += len(texts[i])
	}
	b.SetBytes(int64(size))
	var out []byte
	for b.Loop() {
		for _, s := range texts {
			out = Append(out[:0], s)
		}
	}
}
