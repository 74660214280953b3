package ingest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// readBufferSize is the size of the bufio.Reader under a lineReader: the
// most it reads from the input in one call.
const readBufferSize = 64 << 10

// line is one physical line of input.
type line struct {
	// data is the line without its line ending ("\n" or "\r\n"); nil when
	// tooLong. It is valid until the next call to lineReader.next.
	data []byte
	// no is the 1-based line number.
	no int
	// size is the line's length in bytes, without its line ending.
	size int64
	// tooLong is set when size is over the limit: the line was read and
	// thrown away, never held whole.
	tooLong bool
}

// lineReader splits its input into lines of at most max bytes, holding no
// more than max bytes of any line. It strips a UTF-8 byte order mark at the
// start and refuses UTF-16 input.
type lineReader struct {
	br      *bufio.Reader
	max     int
	buf     []byte
	no      int
	started bool
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, readBufferSize), max: max}
}

// next returns the next line, io.EOF after the last one, or the input's
// read error.
func (lr *lineReader) next() (line, error) {
	if !lr.started {
		lr.started = true
		if err := lr.skipBOM(); err != nil {
			return line{}, err
		}
	}
	lr.buf = lr.buf[:0]
	var size int64
	tooLong := false
	for {
		chunk, err := lr.br.ReadSlice('\n')
		size += int64(len(chunk))
		if !tooLong {
			// +2 leaves room for a "\r\n" that is not part of the line.
			if len(lr.buf)+len(chunk) > lr.max+2 {
				tooLong = true
				lr.buf = lr.buf[:0]
			} else {
				lr.grow(len(chunk))
				lr.buf = append(lr.buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == io.EOF {
			if size == 0 {
				return line{}, io.EOF
			}
			break
		}
		if err != nil {
			return line{}, err
		}
		size-- // the '\n'
		break
	}
	lr.no++
	l := line{no: lr.no, size: size, tooLong: tooLong}
	if tooLong {
		return l, nil
	}
	b := bytes.TrimSuffix(lr.buf, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	l.size = int64(len(b))
	if len(b) > lr.max {
		l.tooLong = true
		return l, nil
	}
	l.data = b
	return l, nil
}

// grow makes room for n more bytes in buf by doubling its capacity, never
// past the line limit: append's gentler growth for large slices would
// allocate about five times the limit on the way to one long line.
func (lr *lineReader) grow(n int) {
	need := len(lr.buf) + n
	if need <= cap(lr.buf) {
		return
	}
	c := min(max(2*cap(lr.buf), need, 4<<10), lr.max+2)
	buf := make([]byte, len(lr.buf), max(c, need))
	copy(buf, lr.buf)
	lr.buf = buf
}

// skipBOM drops a UTF-8 byte order mark at the start of the input and
// fails on a UTF-16 one, which would otherwise show up as NUL bytes on
// every line.
func (lr *lineReader) skipBOM() error {
	b, err := lr.br.Peek(3)
	if err != nil && err != io.EOF {
		return err
	}
	switch {
	case bytes.HasPrefix(b, []byte("\xef\xbb\xbf")):
		_, err := lr.br.Discard(3)
		return err
	case bytes.HasPrefix(b, []byte("\xff\xfe")), bytes.HasPrefix(b, []byte("\xfe\xff")):
		return fmt.Errorf("input is UTF-16 (it starts with the byte order mark % x): convert it to UTF-8, e.g. iconv -f UTF-16 -t UTF-8", b[:2])
	}
	return nil
}
