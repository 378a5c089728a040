package engine

import (
	"fmt"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// CheckTmpSource verifies a SandboxSpec's TmpSource before it is bound at
// /tmp: a directory, not a symlink, that is the root of a tmpfs mounted
// nosuid and nodev. The runtime's bind keeps those flags, so they hold
// inside the sandbox even where the engine's bind cannot say them
// (dockerd's binds take no nosuid or nodev).
func CheckTmpSource(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: opening the /tmp source %q: %v", errdefs.ErrInvalidArgument, dir, err)
	}
	defer unix.Close(fd)
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_BASIC_STATS, &stx); err != nil {
		return fmt.Errorf("%w: examining the /tmp source %q: %v", errdefs.ErrUnavailable, dir, err)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return fmt.Errorf("%w: examining the /tmp source %q: %v", errdefs.ErrUnavailable, dir, err)
	}
	const want = unix.ST_NOSUID | unix.ST_NODEV
	if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 || stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 ||
		fs.Type != unix.TMPFS_MAGIC || fs.Flags&want != want {
		return fmt.Errorf("%w: the /tmp source %q must be the root of a tmpfs mounted nosuid,nodev", errdefs.ErrInvalidArgument, dir)
	}
	return nil
}
