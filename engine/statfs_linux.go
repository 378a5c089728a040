package engine

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// FreeBytes is what an unprivileged writer may still use on path's file
// system.
func FreeBytes(path string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}
