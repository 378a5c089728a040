package oci

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// bundleTmpfs caps a bundle's tmpfs. A bundle holds the spec, the
// runtime's logs, an idle init and the root overlay's upper layer, where
// the runtime only makes mount points: a few hundred KiB.
const bundleTmpfs = "size=16m,nr_inodes=4096,mode=0700"

// makeBundle creates dir as a tmpfs of its own. A bundle lives no longer
// than its sandbox, so nothing in it goes to disk: its overlay's upper
// layer, its spec and the runtime's logs are dropped in one unmount, where
// on the host's filesystem the overlay's unmount waited for a journal
// commit (1-2 ms a run here) and removing the files cost as much again.
func makeBundle(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating bundle: %w", err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, bundleTmpfs); err != nil {
		os.Remove(dir)
		return fmt.Errorf("mounting the bundle's tmpfs: %w", err)
	}
	return nil
}

// removeBundle unmounts a bundle's root overlay and tmpfs and removes its
// directory. A bundle that is not there is not an error.
func removeBundle(dir string) error {
	for _, m := range []string{rootfsOf(dir), dir} {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			return fmt.Errorf("unmounting %s: %w", m, err)
		}
	}
	// A bundle made before bundles were tmpfs has files to remove.
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing bundle: %w", err)
	}
	return nil
}

// rootfsOf is where rootOverlay mounts a bundle's root.
func rootfsOf(bundle string) string { return filepath.Join(bundle, "rootfs") }

// rootOverlay mounts a per-run, writable view of the shared rootfs lower
// at rootfsOf(bundle); the runtime then makes it read-only for the program.
func rootOverlay(bundle, lower string) error {
	upper, work, merged := filepath.Join(bundle, "upper"), filepath.Join(bundle, "work"), rootfsOf(bundle)
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("creating overlay directories: %w", err)
		}
	}
	if err := mountOverlay(merged, unix.MS_NODEV|unix.MS_NOSUID, []string{lower}, upper, work); err != nil {
		return fmt.Errorf("mounting the run's root overlay: %w", err)
	}
	return nil
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
