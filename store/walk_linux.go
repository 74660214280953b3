package store

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// releasePages tells the kernel the n bytes of the file mapping at addr
// are not needed (madvise MADV_DONTNEED): their page-table entries go, so
// they leave the resident set; a later touch reads them back from the
// page cache. A failure only leaves the pages resident.
func releasePages(addr, n uintptr) {
	if addr == 0 || n == 0 {
		return
	}
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, addr, n, syscall.MADV_DONTNEED)
}

// statm is /proc/self/statm, opened once and read again at offset 0
// (one system call, not three, at each look: a walk looks every
// releaseEvery items).
var statm struct {
	once sync.Once
	f    *os.File
}

// residentFileBytes is the process's file-backed (and shared) resident
// memory, the third field of /proc/self/statm in pages; -1 when it cannot
// be read, which releases as if it were large.
func residentFileBytes() int64 {
	statm.once.Do(func() { statm.f, _ = os.Open("/proc/self/statm") })
	if statm.f == nil {
		return -1
	}
	var buf [128]byte
	n, err := statm.f.ReadAt(buf[:], 0)
	if n == 0 && err != nil {
		return -1
	}
	f := bytes.Fields(buf[:n])
	if len(f) < 3 {
		return -1
	}
	pages, err := strconv.ParseInt(string(f[2]), 10, 64)
	if err != nil {
		return -1
	}
	return pages * int64(os.Getpagesize())
}
