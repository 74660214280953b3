package footprint

import (
	"os"
	"syscall"
)

// ReleaseExecutable hands back the resident pages of the executable's
// code and read-only data (madvise MADV_DONTNEED): a page the run needs
// again comes back from the page cache at its next touch, a minor fault.
// Called once a command has done its setup, it drops what the packages'
// initialisation and the setup alone touched (tables, parsers and clients
// of dependencies a run never calls again), which the kernel's fault-around
// maps in blocks of 16 pages or more. It returns the bytes of mappings
// released; a failure only leaves the pages resident.
func ReleaseExecutable() uintptr {
	st, err := os.Stat("/proc/self/exe")
	if err != nil {
		return 0
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0
	}
	spans := readOnlySpans(f, sys.Ino)
	f.Close()
	var n uintptr
	for _, s := range spans {
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, s.lo, s.hi-s.lo, syscall.MADV_DONTNEED); e == 0 {
			n += s.hi - s.lo
		}
	}
	return n
}
