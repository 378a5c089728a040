package artifacts

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrExists is wrapped when a delivery finds its name taken: by a file, a
// symlink, something not a directory on the way, or another user's
// directory. Delivery never replaces anything.
var ErrExists = errors.New("the destination name is taken")

// Dest is an open destination directory that files are delivered into as
// the scanner delivers artifacts: every path beneath it reached one
// component at a time from its fd, never through a symlink; directories
// made 0755 where missing; files written to a temporary name, then
// renamed 0644 with RENAME_NOREPLACE, so nothing is ever replaced.
type Dest struct{ d *destDir }

// OpenDest opens the existing directory path without following a final
// symlink, refusing one another non-root user owns.
func OpenDest(path string) (*Dest, error) {
	d, err := openDest(path)
	if err != nil {
		return nil, err
	}
	return &Dest{d: d}, nil
}

// Close closes the directory.
func (d *Dest) Close() error { return d.d.Close() }

// Mkdir makes the directory rel (slash-separated) and any missing parent
// beneath d; one that exists is kept.
func (d *Dest) Mkdir(rel string) error {
	fd, err := d.d.subdir(rel)
	if err != nil {
		return destError(err)
	}
	return unix.Close(fd)
}

// Pending is a file being delivered: written under a temporary name until
// Commit gives it its own.
type Pending struct {
	t    *tempFile
	base string
}

// Create starts the delivery of the file rel (slash-separated) beneath d,
// making its missing parents.
func (d *Dest) Create(rel string) (*Pending, error) {
	dir, base := ".", rel
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		dir, base = rel[:i], rel[i+1:]
	}
	t, err := d.d.create(dir)
	if err != nil {
		return nil, destError(err)
	}
	return &Pending{t: t, base: base}, nil
}

func (p *Pending) Write(b []byte) (int, error) { return p.t.f.Write(b) }

// Commit gives the file its name, which must still be free: an error
// wrapping ErrExists when it is not, and then nothing is delivered.
func (p *Pending) Commit() error {
	err := p.t.commit(p.base)
	p.t = nil
	if errors.Is(err, errTaken) {
		return fmt.Errorf("%w: %q exists; delivery never replaces a file", ErrExists, Escape(p.base))
	}
	return err
}

// Discard removes the temporary file. It is a no-op after Commit.
func (p *Pending) Discard() {
	if p.t != nil {
		p.t.discard()
		p.t = nil
	}
}

func destError(err error) error {
	var c *conflict
	if errors.As(err, &c) {
		return fmt.Errorf("%w: %s", ErrExists, c.detail)
	}
	return err
}
