package oci

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// rootOverlay mounts a per-run, writable view of the shared rootfs lower
// at <bundle>/rootfs; the runtime then makes it read-only for the program.
func rootOverlay(bundle, lower string) (string, error) {
	upper, work, merged := filepath.Join(bundle, "upper"), filepath.Join(bundle, "work"), filepath.Join(bundle, "rootfs")
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return "", fmt.Errorf("creating overlay directories: %w", err)
		}
	}
	if err := mountOverlay(merged, unix.MS_NODEV|unix.MS_NOSUID, []string{lower}, upper, work); err != nil {
		return "", fmt.Errorf("mounting the run's root overlay: %w", err)
	}
	return merged, nil
}

// mountOverlay mounts an overlayfs at target. Its layers are named by
// /proc/self/fd paths of O_PATH descriptors: overlayfs shows its options as
// given, and a program reads them in its mountinfo, so host paths never
// appear there. upper "" mounts a read-only stack of lowers.
func mountOverlay(target string, flags uintptr, lowers []string, upper, work string) error {
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	name := func(dir string) (string, error) {
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", fmt.Errorf("opening %s: %w", dir, err)
		}
		fds = append(fds, fd)
		return "/proc/self/fd/" + strconv.Itoa(fd), nil
	}
	var ls []string
	for _, l := range lowers {
		n, err := name(l)
		if err != nil {
			return err
		}
		ls = append(ls, n)
	}
	opts := "lowerdir=" + strings.Join(ls, ":")
	if upper != "" {
		u, err := name(upper)
		if err != nil {
			return err
		}
		w, err := name(work)
		if err != nil {
			return err
		}
		opts += ",upperdir=" + u + ",workdir=" + w
	}
	if err := unix.Mount("overlay", target, "overlay", flags, opts); err != nil {
		return fmt.Errorf("mounting overlay at %s: %w", target, err)
	}
	return nil
}

func unmount(path string, log *slog.Logger) {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
		log.Warn("unmounting", "path", path, "err", err)
	}
}
