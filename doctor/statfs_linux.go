package doctor

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// freeBytes is what an unprivileged writer may still use on path's
// filesystem.
func freeBytes(path string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// isCgroupFS reports whether a cgroup v1 hierarchy is mounted at path.
func isCgroupFS(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.CGROUP_SUPER_MAGIC
}
