package store

import (
	"bytes"
	"os"
	"strconv"
	"sync"
)

// statm is /proc/self/statm, opened once: a busy run's writes read it
// again and again, one pread each (about 10 µs).
var statm struct {
	once sync.Once
	f    *os.File
}

// residentShared is the process's resident pages that map files (the
// third field of /proc/self/statm: RssFile and RssShmem), in bytes, or -1
// when it cannot be read. bbolt's mapping of the file is most of it; the
// executable's pages are the rest.
func residentShared() int64 {
	statm.once.Do(func() { statm.f, _ = os.Open("/proc/self/statm") })
	if statm.f == nil {
		return -1
	}
	var buf [128]byte
	n, _ := statm.f.ReadAt(buf[:], 0) // io.EOF with the whole line read
	fields := bytes.Fields(buf[:n])
	if len(fields) < 3 {
		return -1
	}
	pages, err := strconv.ParseInt(string(fields[2]), 10, 64)
	if err != nil {
		return -1
	}
	return pages * int64(os.Getpagesize())
}
