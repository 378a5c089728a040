package artifacts

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/safeopen"
)

// destDir is an open destination directory. Everything beneath it is
// reached through its fd, one component at a time, never through a
// symlink, and nothing in it is ever replaced.
type destDir struct {
	f *os.File
}

func openDest(path string) (*destDir, error) {
	f, err := safeopen.Dir(path)
	if err != nil {
		return nil, err
	}
	return &destDir{f: f}, nil
}

func (d *destDir) Close() error { return d.f.Close() }

// conflict is a destination path that cannot take a delivery: it is taken
// by a file, a symlink or another user's directory.
type conflict struct{ detail string }

func (c *conflict) Error() string { return c.detail }

var errTaken = errors.New("taken")

// subdir opens the directory rel (slash-separated, "." for the top)
// beneath d, creating what is missing. The caller closes the fd.
func (d *destDir) subdir(rel string) (int, error) {
	fd, err := unix.Dup(int(d.f.Fd()))
	if err != nil || rel == "." {
		return fd, err
	}
	for _, comp := range strings.Split(rel, "/") {
		if err := unix.Mkdirat(fd, comp, 0o755); err != nil && err != unix.EEXIST {
			unix.Close(fd)
			return -1, fmt.Errorf("creating %q in the destination: %w", rel, err)
		}
		next, err := unix.Openat2(fd, comp, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolve.Resolve &^ unix.RESOLVE_NO_XDEV})
		var st unix.Stat_t
		if err == nil {
			if err = unix.Fstat(next, &st); err != nil {
				unix.Close(next)
			}
		}
		unix.Close(fd)
		switch {
		case err == unix.ELOOP:
			return -1, &conflict{fmt.Sprintf("%q in the destination is a symlink; airlock does not follow it", Escape(comp))}
		case err == unix.ENOTDIR:
			return -1, &conflict{fmt.Sprintf("%q in the destination is not a directory", Escape(comp))}
		case err != nil:
			return -1, fmt.Errorf("opening %q in the destination: %w", rel, err)
		case st.Uid != 0 && int(st.Uid) != os.Geteuid():
			unix.Close(next)
			return -1, &conflict{fmt.Sprintf("%q in the destination is owned by uid %d, neither root nor you", Escape(comp), st.Uid)}
		}
		fd = next
	}
	return fd, nil
}

// tempFile is a file being written in a destination directory.
type tempFile struct {
	dirfd int
	name  string
	f     *os.File
}

// create makes a temporary file in the directory rel beneath d.
func (d *destDir) create(rel string) (*tempFile, error) {
	dirfd, err := d.subdir(rel)
	if err != nil {
		return nil, err
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	name := ".airlock-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		unix.Close(dirfd)
		return nil, fmt.Errorf("writing to the destination: %w", err)
	}
	return &tempFile{dirfd: dirfd, name: name, f: os.NewFile(uintptr(fd), name)}, nil
}

func (t *tempFile) discard() {
	if t == nil {
		return
	}
	t.f.Close()
	unix.Unlinkat(t.dirfd, t.name, 0)
	unix.Close(t.dirfd)
}

// commit makes the file 0644 and gives it the name base, which must not
// exist yet: errTaken when it does. Readers see the whole file or none of
// it; like cp, it does not fsync.
func (t *tempFile) commit(base string) error {
	defer unix.Close(t.dirfd)
	err := t.f.Chmod(0o644)
	if cerr := t.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat2(t.dirfd, t.name, t.dirfd, base, unix.RENAME_NOREPLACE)
		if err == unix.EINVAL || err == unix.ENOSYS {
			// No RENAME_NOREPLACE on this filesystem: link(2) refuses an
			// existing name too.
			if err = unix.Linkat(t.dirfd, t.name, t.dirfd, base, 0); err == nil {
				unix.Unlinkat(t.dirfd, t.name, 0)
			}
		}
	}
	if err != nil {
		unix.Unlinkat(t.dirfd, t.name, 0)
		if err == unix.EEXIST {
			return errTaken
		}
		return fmt.Errorf("delivering %q: %w", Escape(base), err)
	}
	return nil
}

// quarantineName is shown with every component's leading '.' escaped, so
// nothing in quarantine is a dotfile that a tool would act on. Escape
// already turns '\' into \x5c, so the result names no other path.
func quarantineName(shown string) string {
	parts := strings.Split(shown, "/")
	for i, p := range parts {
		if strings.HasPrefix(p, ".") {
			parts[i] = `\x2e` + p[1:]
		}
	}
	return strings.Join(parts, "/")
}
