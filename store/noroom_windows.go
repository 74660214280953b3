package store

import "syscall"

// Windows reports a full disk as ERROR_DISK_FULL (112) or
// ERROR_HANDLE_DISK_FULL (39), and a spent NTFS quota as
// ERROR_DISK_QUOTA_EXCEEDED (1295); the syscall package names none of
// them. syscall.ENOSPC and EDQUOT are invented values there that no
// Windows call returns, kept in case a layer above maps to them.
const (
	errorHandleDiskFull    = syscall.Errno(39)
	errorDiskFull          = syscall.Errno(112)
	errorDiskQuotaExceeded = syscall.Errno(1295)
)

var noRoomErrors = []error{errorDiskFull, errorHandleDiskFull, errorDiskQuotaExceeded, syscall.ENOSPC, syscall.EDQUOT}

var quotaExceeded error = errorDiskQuotaExceeded
