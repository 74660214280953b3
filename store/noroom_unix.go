//go:build unix

package store

import "syscall"

// noRoomErrors are the errors a write gets when the disk is full
// (ENOSPC) or the user's quota on it is spent (EDQUOT).
var noRoomErrors = []error{syscall.ENOSPC, syscall.EDQUOT}

// quotaExceeded is the one of noRoomErrors that a raised quota cures.
var quotaExceeded error = syscall.EDQUOT
