// Package flock serialises read-modify-write of files under airlock's root
// across processes.
package flock

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// With runs fn while holding an exclusive flock on the file at path,
// creating the file (0600) if needed. The lock file is never removed, so
// two processes can never lock different files of the same name.
func With(path string, fn func() error) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("locking %s: %w", path, err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("locking %s: %w", path, err)
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return fn()
}
