package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/units"
)

// maxLayoutJSON caps a layout's oci-layout and index.json files, and each
// index or manifest blob: go-containerregistry reads every one whole before
// it compares a size. 4,096 descriptors (maxDescriptors) take about 1 MiB.
const maxLayoutJSON units.Bytes = 4 << 20

// maxLayoutFiles caps the blobs a layout directory may hold: each is a
// file to open and copy. An image is at most MaxLayers layers, a manifest
// and a config; a layout of many images stays far below.
const maxLayoutFiles = 1 << 14

// copyLayout copies the layout directory src into dir under the rules
// extractLayout applies to a tar: only the layout's own names, regular files
// only, nothing reached through a symlink, and sizes capped before a byte is
// read: the JSON files at maxLayoutJSON, each blob at what a layer may hold
// (lim.Layer), all of them together at lim.Image. A FIFO or device is refused
// from its metadata, never opened. Refusals wrap ErrFormat, or ErrTooLarge
// for a cap, and name the file and the rule.
func copyLayout(ctx context.Context, src, dir string, lim Limits) error {
	lim = lim.orDefault()
	from, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening image %q: %w", src, &os.PathError{Op: "open", Path: src, Err: err})
	}
	defer unix.Close(from)
	to, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer to.Close()
	c := &layoutCopy{ctx: ctx, src: src, to: to,
		blobMax: int64(blobCap(lim.Layer)), left: int64(blobCap(lim.Image)), lim: lim}
	for _, name := range []string{"oci-layout", "index.json"} {
		if err := c.file(from, name, name, int64(maxLayoutJSON), errFixedCap, "the cap on a layout's JSON files"); err != nil {
			return err
		}
	}
	blobs, err := c.dir(from, "blobs", "blobs")
	if blobs < 0 || err != nil {
		return err
	}
	defer unix.Close(blobs)
	return c.each(blobs, "blobs", func(alg string) error {
		if !blobAlg.MatchString(alg) {
			return nil
		}
		rel := "blobs/" + alg
		fd, err := c.dir(blobs, alg, rel)
		if fd < 0 || err != nil {
			return err
		}
		defer unix.Close(fd)
		return c.each(fd, rel, func(name string) error {
			if !blobName.MatchString(name) {
				return nil
			}
			if c.files++; c.files > maxLayoutFiles {
				return fmt.Errorf("%w: %q holds more than %d blobs", ErrFormat, src, maxLayoutFiles)
			}
			return c.file(fd, name, rel+"/"+name, c.blobMax, ErrTooLarge, "the cap on one layer (--max-layer-size)")
		})
	})
}

// blobCap is a size cap widened for what gzip or zstd adds to data they
// cannot compress: a few bytes a block, far below 1/64.
func blobCap(b units.Bytes) units.Bytes { return b + b/64 }

type layoutCopy struct {
	ctx     context.Context
	src     string
	to      *os.Root
	lim     Limits
	blobMax int64
	left    int64 // bytes the blobs may still take, of lim.Image
	files   int
}

// dir opens the directory name under parent without following a symlink;
// -1 if there is none.
func (c *layoutCopy) dir(parent int, name, rel string) (int, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return -1, nil
	} else if err != nil {
		return -1, fmt.Errorf("reading %q: %w", c.rel(rel), err)
	}
	if err := c.kind(&st, rel, unix.S_IFDIR); err != nil {
		return -1, err
	}
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%w: opening %q: %v (a layout holds plain directories only)", ErrFormat, c.rel(rel), err)
	}
	if err := c.same(fd, &st, rel); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := c.to.Mkdir(rel, 0o700); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("unpacking %q: %w", rel, err)
	}
	return fd, nil
}

// each calls fn with the name of each entry of the directory fd, a batch
// at a time, so a huge directory costs no more memory than a small one.
func (c *layoutCopy) each(fd int, rel string, fn func(string) error) error {
	dup, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(dup), c.rel(rel))
	defer d.Close()
	for {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		names, err := d.Readdirnames(256)
		for _, n := range names {
			if err := fn(n); err != nil {
				return err
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %q: %w", c.rel(rel), err)
		}
	}
}

// file copies the regular file name under parent to rel in c.to, refusing
// it if it is anything else, or larger than max (refused wrapping over,
// with rule naming the cap).
func (c *layoutCopy) file(parent int, name, rel string, max int64, over error, rule string) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return nil // the layout reader names what is missing
	} else if err != nil {
		return fmt.Errorf("reading %q: %w", c.rel(rel), err)
	}
	if err := c.kind(&st, rel, unix.S_IFREG); err != nil {
		return err
	}
	if st.Size > max {
		return fmt.Errorf("%w: %q is %d bytes, over %s, %s", over, c.rel(rel), st.Size, units.Bytes(max), rule)
	}
	if rel != "oci-layout" && rel != "index.json" {
		if c.left -= st.Size; c.left < 0 {
			return fmt.Errorf("%w: the blobs of %q hold more than %s, the cap on one image (--max-image-size)", ErrTooLarge, c.src, blobCap(c.lim.Image))
		}
	}
	// O_NONBLOCK: should the file have become a FIFO since, the open
	// returns at once, and the check below refuses it.
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: opening %q: %v (a layout holds regular files only)", ErrFormat, c.rel(rel), err)
	}
	in := os.NewFile(uintptr(fd), c.rel(rel))
	defer in.Close()
	if err := c.same(fd, &st, rel); err != nil {
		return err
	}
	out, err := c.to.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("unpacking %q: %w", rel, err)
	}
	n, err := io.Copy(out, io.LimitReader(in, st.Size+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("unpacking %q: %w", rel, err)
	}
	if n != st.Size {
		return fmt.Errorf("%w: %q changed size while it was copied (%d bytes, then %d)", ErrFormat, c.rel(rel), st.Size, n)
	}
	return nil
}

// kind refuses st unless it is of type want; a symlink, FIFO or device is
// named as such.
func (c *layoutCopy) kind(st *unix.Stat_t, rel string, want uint32) error {
	got := st.Mode & unix.S_IFMT
	if got == want {
		return nil
	}
	what := map[uint32]string{unix.S_IFLNK: "a symlink", unix.S_IFIFO: "a FIFO", unix.S_IFCHR: "a device",
		unix.S_IFBLK: "a device", unix.S_IFSOCK: "a socket", unix.S_IFDIR: "a directory", unix.S_IFREG: "a regular file"}[got]
	rule := "a layout holds regular files and plain directories only, and no symlinks"
	if want == unix.S_IFDIR && got == unix.S_IFREG {
		rule = "it must be a directory"
	}
	return fmt.Errorf("%w: %q is %s: %s", ErrFormat, c.rel(rel), what, rule)
}

// same refuses fd unless it is the inode st described.
func (c *layoutCopy) same(fd int, st *unix.Stat_t, rel string) error {
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil {
		return fmt.Errorf("reading %q: %w", c.rel(rel), err)
	}
	if now.Dev != st.Dev || now.Ino != st.Ino || now.Mode&unix.S_IFMT != st.Mode&unix.S_IFMT {
		return fmt.Errorf("%w: %q changed while it was opened", ErrFormat, c.rel(rel))
	}
	return nil
}

func (c *layoutCopy) rel(rel string) string { return filepath.Join(c.src, rel) }
