package doctor

import "golang.org/x/sys/unix"

// isCgroupFS reports whether a cgroup v1 hierarchy is mounted at path.
func isCgroupFS(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.CGROUP_SUPER_MAGIC
}
