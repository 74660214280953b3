package store

import (
	"bytes"
	"compress/flate"
	"errors"
	"io"
	"sync"
)

// A long record (a review of pages, an output as long) is stored
// deflated (tagFlate, record format 4): a value past a page takes pages
// of its own, so a 14 KB review took four, and text deflates to a third
// or less. PostgreSQL does the same to a value over 2 KB (TOAST). Short
// records, nearly all of them, are left as they are: they would not
// shrink, and every walk reads them. So are records past maxFlate, which
// a reader would refuse to inflate.
const minFlate = 1024 // shorter records are not deflated

// maxFlate is the most a deflated record may inflate to: a damaged one
// must not exhaust memory. A variable only so that a test can try the
// cap without a record of hundreds of megabytes.
var maxFlate = 1 << 28

// The flate state is large (a writer's is most of a megabyte): reuse it.
var (
	deflaters = sync.Pool{New: func() any {
		w, _ := flate.NewWriter(nil, flate.DefaultCompression) // the level is valid
		return w
	}}
	inflaters = sync.Pool{New: func() any { return flate.NewReader(nil) }}
)

// deflateRecord is the stored form of the record v: deflated when v is
// long (but no longer than maxFlate) and deflating it saves a quarter
// or more, else v.
func deflateRecord(v []byte) []byte {
	if len(v) < minFlate || len(v) > maxFlate || v[0] == tagFlate {
		return v
	}
	var buf bytes.Buffer
	buf.WriteByte(tagFlate)
	w := deflaters.Get().(*flate.Writer)
	defer deflaters.Put(w)
	w.Reset(&buf)
	if _, err := w.Write(v); err != nil || w.Close() != nil || buf.Len() > len(v)*3/4 {
		return v
	}
	return buf.Bytes()
}

var errFlate = errors.New("a deflated record that does not inflate")

// inflateRecord is the record a tagFlate value v holds. It is never
// another deflated record nor a long one (long.go keeps a deflated record
// in chunks, not the other way round): either would let a damaged record
// lead a reader round in a circle until its stack overflowed.
func inflateRecord(v []byte) ([]byte, error) {
	r := inflaters.Get().(io.ReadCloser)
	defer inflaters.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(v[1:]), nil); err != nil {
		return nil, errFlate
	}
	out, err := io.ReadAll(io.LimitReader(r, int64(maxFlate)+1))
	if err != nil || len(out) == 0 || len(out) > maxFlate || out[0] == tagFlate || out[0] == tagLong {
		return nil, errFlate
	}
	return out, nil
}
