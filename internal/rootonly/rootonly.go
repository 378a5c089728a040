// Package rootonly checks that a file airlock runs as root (runsc, which
// the oci engine and dockerd start for every sandbox) or keeps its state
// in (its root directory) cannot be changed by another user: not the
// file, and not a directory or symlink on its path, where a rename or a
// new link would put another file in its place.
package rootonly

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// maxLinks bounds the symlinks followed, as the kernel's ELOOP does.
const maxLinks = 40

// Error is a name on the path that another user can change.
type Error struct {
	Path string
	UID  uint32
	// Mode is the permission bits, with 01000 for the sticky bit.
	Mode uint32
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (owner uid %d, mode %04o) can be changed by a user other than root", e.Path, e.UID, e.Mode)
}

// Fix says how to make the name root's alone.
func (e *Error) Fix() string {
	return fmt.Sprintf("make it root's and writable by root alone: `chown root %s && chmod go-w %s`, or install it under a directory that is (`make setup` does)", e.Path, e.Path)
}

// Check returns an *Error for the first name on path (every directory from
// /, each symlink and what it names, then the file) that a user other than
// root, or than the one running airlock, owns or may write. A sticky
// directory that others may write passes: they cannot rename or remove
// what is not theirs there. Any other failure (a name that does not exist)
// is returned as it is.
func Check(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	links := 0
	_, err = walk(abs, &links)
	return err
}

// walk checks each name of the absolute path p, following symlinks as the
// kernel does, and returns p resolved.
func walk(p string, links *int) (string, error) {
	cur := "/"
	if err := check(cur); err != nil {
		return "", err
	}
	for _, name := range strings.Split(p, "/") {
		switch name {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur) // cur holds no symlink
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if err := judge(next, fi); err != nil {
				return "", err
			}
			cur = next
			continue
		}
		// Who owns a symlink matters in a sticky directory: its owner may
		// replace it.
		if err := owner(next, fi); err != nil {
			return "", err
		}
		if *links++; *links > maxLinks {
			return "", &fs.PathError{Op: "resolving", Path: p, Err: syscall.ELOOP}
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = cur + "/" + target
		}
		if cur, err = walk(target, links); err != nil {
			return "", err
		}
	}
	return cur, nil
}

func check(p string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	return judge(p, fi)
}

// judge refuses a file or directory another user owns or may write.
func judge(p string, fi fs.FileInfo) error {
	if err := owner(p, fi); err != nil {
		return err
	}
	sticky := fi.IsDir() && fi.Mode()&fs.ModeSticky != 0
	if fi.Mode().Perm()&0o022 != 0 && !sticky {
		return newError(p, fi)
	}
	return nil
}

// owner refuses a name owned by anyone but root or the caller.
func owner(p string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("rootonly: no owner in the file's status")
	}
	if st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return newError(p, fi)
	}
	return nil
}

func newError(p string, fi fs.FileInfo) *Error {
	e := &Error{Path: p, Mode: uint32(fi.Mode().Perm())}
	if fi.Mode()&fs.ModeSticky != 0 {
		e.Mode |= 0o1000
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.UID = st.Uid
	}
	return e
}
