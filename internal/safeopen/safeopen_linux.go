// Package safeopen opens the host paths a user names for airlock to write
// into (an artifacts directory, a results file) so that another local user
// cannot redirect the write: in a shared directory such as /tmp anyone may
// plant a symlink or a directory of their own under the name.
//
// Rules:
//   - The last component is never followed: a symlink there is refused.
//   - A symlink earlier in the path is followed only when root or the
//     caller owns it (what fs.protected_symlinks would enforce in sticky
//     directories, applied everywhere, whatever the sysctl says).
//   - What is finally opened must be owned by root or the caller, and be
//     of the expected type, checked with fstat on the open fd.
package safeopen

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrUnsafe is wrapped when a path could let another user redirect a write.
var ErrUnsafe = errors.New("unsafe destination")

// maxLinks bounds symlinks followed in one path, as the kernel's MAXSYMLINKS.
const maxLinks = 40

// Dir opens the directory at path for writing beneath, creating it and any
// missing parents (0755) first.
func Dir(path string) (*os.File, error) {
	parent, base, err := parentOf(path, true)
	if err != nil {
		return nil, err
	}
	defer unix.Close(parent)
	if base != "" {
		if err := unix.Mkdirat(parent, base, 0o755); err != nil && err != unix.EEXIST {
			return nil, fmt.Errorf("creating %q: %w", path, err)
		}
	} else {
		base = "."
	}
	fd, err := unix.Openat(parent, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, finalErr(parent, base, path, "directory", err)
	}
	f := os.NewFile(uintptr(fd), path)
	if err := CheckOwner(f, path); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// AppendFile opens the regular file at path for appending, creating it
// (0644) if it does not exist. Its parent directory must exist.
func AppendFile(path string) (*os.File, error) {
	parent, base, err := parentOf(path, false)
	if err != nil {
		return nil, err
	}
	defer unix.Close(parent)
	if base == "" {
		return nil, fmt.Errorf("opening %q: %w", path, unix.EISDIR)
	}
	fd, err := unix.Openat(parent, base, unix.O_WRONLY|unix.O_CREAT|unix.O_APPEND|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, finalErr(parent, base, path, "file", err)
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("checking %q: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, fmt.Errorf("%w: %q is not a regular file; choose another path", ErrUnsafe, path)
	}
	// Writes must not stall on a lock or a FIFO-like surprise: clear the
	// O_NONBLOCK that kept the open itself from blocking.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, unix.O_APPEND); err != nil {
		f.Close()
		return nil, fmt.Errorf("opening %q: %w", path, err)
	}
	if err := CheckOwner(f, path); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// CheckOwner refuses an open file or directory that a user other than root
// and the caller owns: that user could swap or read what airlock writes.
func CheckOwner(f *os.File, shown string) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("checking %q: %w", shown, err)
	}
	return ownerOK(st.Uid, shown)
}

func ownerOK(uid uint32, shown string) error {
	if uid == 0 || int(uid) == os.Geteuid() {
		return nil
	}
	return fmt.Errorf("%w: %q is owned by uid %d, neither root nor you (uid %d); another user could redirect or read what airlock writes there: choose a path you own", ErrUnsafe, shown, uid, os.Geteuid())
}

// finalErr explains a failed open of the last component.
func finalErr(parent int, base, path, what string, err error) error {
	var st unix.Stat_t
	if unix.Fstatat(parent, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return fmt.Errorf("%w: %q is a symlink, and airlock does not follow one where it writes; remove the link or choose another path", ErrUnsafe, path)
	}
	if err == unix.ENOTDIR && what == "directory" {
		return fmt.Errorf("%w: %q exists and is not a directory; choose another path", ErrUnsafe, path)
	}
	return fmt.Errorf("opening %q: %w", path, err)
}

// parentOf opens the directory holding path's last component, and returns
// that component ("" when path names / or ends in . or ..).
func parentOf(path string, mkdir bool) (int, string, error) {
	if path == "" {
		return -1, "", fmt.Errorf("%w: empty path", ErrUnsafe)
	}
	abs := path
	if !filepath.IsAbs(abs) {
		wd, err := unix.Getwd() // the kernel's answer, not $PWD
		if err != nil {
			return -1, "", fmt.Errorf("resolving %q: %w", path, err)
		}
		abs = wd + "/" + path
	}
	dir, base := filepath.Split(filepath.Clean(abs))
	if base == "" || base == "." || base == ".." {
		dir, base = abs, ""
	}
	fd, err := walk(dir, mkdir, path)
	return fd, base, err
}

// walk opens the absolute directory path one component at a time, never
// letting the kernel follow a symlink: each one is checked for its owner,
// read, and its target walked in turn.
func walk(abs string, mkdir bool, shown string) (int, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	comps := strings.Split(abs, "/")
	links := 0
	for len(comps) > 0 {
		c := comps[0]
		comps = comps[1:]
		if c == "" || c == "." {
			continue
		}
		next, err := unix.Openat(fd, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT && mkdir {
			if err = unix.Mkdirat(fd, c, 0o755); err == nil || err == unix.EEXIST {
				next, err = unix.Openat(fd, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		if err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("opening %q: %s: %w", shown, c, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(next, &st); err != nil {
			unix.Close(next)
			unix.Close(fd)
			return -1, fmt.Errorf("checking %q: %w", shown, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			unix.Close(fd)
			fd = next
		case unix.S_IFLNK:
			target, err := readlink(next)
			unix.Close(next)
			if err == nil {
				err = ownerOK(st.Uid, c)
			}
			if links++; err == nil && links > maxLinks {
				err = unix.ELOOP
			}
			if err != nil {
				unix.Close(fd)
				return -1, fmt.Errorf("following the symlink %q in %q: %w", c, shown, err)
			}
			if strings.HasPrefix(target, "/") {
				unix.Close(fd)
				if fd, err = unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
					return -1, err
				}
			}
			comps = append(strings.Split(target, "/"), comps...)
		default:
			unix.Close(next)
			unix.Close(fd)
			return -1, fmt.Errorf("opening %q: %s: %w", shown, c, unix.ENOTDIR)
		}
	}
	return fd, nil
}

// readlink reads the target of the symlink open as an O_PATH fd.
func readlink(fd int) (string, error) {
	for size := 256; size <= 1<<16; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
	return "", unix.ENAMETOOLONG
}
