package store

import "syscall"

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
