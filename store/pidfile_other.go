//go:build !unix

package store

// pidOpenFlags: no O_NOFOLLOW or O_NONBLOCK here; writePid still writes
// only to a regular file.
const pidOpenFlags = 0
