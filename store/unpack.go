package store

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrUnsafeLayer is wrapped when a layer names a path outside its root,
// would write through a symlink, or carries an entry airlock refuses.
var ErrUnsafeLayer = errors.New("unsafe layer")

const (
	whiteoutPrefix = ".wh."
	whiteoutMeta   = ".wh..wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// UnpackLayer applies one uncompressed layer tar stream onto root, over
// whatever lower layers were applied before it. See the package comment for
// the rules. On error root holds a partial tree and should be discarded.
func UnpackLayer(root *os.Root, r io.Reader) error {
	u := &unpacker{
		root:       root,
		privileged: os.Geteuid() == 0,
		dirs:       map[string]bool{".": true},
		touched:    map[string]bool{},
		under:      map[string]bool{},
		dirTimes:   map[string]time.Time{},
		paths:      pathBudget{left: int64(MaxPathBytes), of: "one layer"},
	}
	tr := tar.NewReader(r)
	for n := 1; ; n++ {
		h, err := tr.Next()
		if err == io.EOF {
			return u.finish()
		}
		if err != nil {
			return fmt.Errorf("reading layer: %w", err)
		}
		if n > MaxEntries {
			return fmt.Errorf("%w: the layer holds more than %d entries, the cap on one layer", ErrLayerCap, MaxEntries)
		}
		if err := u.entry(h, tr); err != nil {
			return fmt.Errorf("unpacking %q: %w", h.Name, err)
		}
	}
}

type unpacker struct {
	root       *os.Root
	privileged bool
	// dirs caches paths known to be real directories (not symlinks). It is
	// cleared whenever a directory is removed.
	dirs map[string]bool
	// touched holds every path this layer created; under holds every
	// ancestor of one. Whiteouts and opaque markers spare both.
	touched map[string]bool
	under   map[string]bool
	// dirTimes are applied last: adding children changes a directory's mtime.
	dirTimes map[string]time.Time
	// paths is what the keys of these maps may still take; dirsCost, what
	// those of dirs took, given back when it is cleared. The layer's
	// entries were checked against the same caps at import (LayerCheck),
	// for the whole image; the maps last one layer.
	paths    pathBudget
	dirsCost int64
}

// knowDir records that p is a real directory.
func (u *unpacker) knowDir(p string) error {
	if u.dirs[p] {
		return nil
	}
	k, err := keep(&u.paths, u.dirs, p)
	if err != nil {
		return err
	}
	u.dirs[k] = true
	u.dirsCost += pathCost + int64(len(k))
	return nil
}

// forgetDirs clears dirs.
func (u *unpacker) forgetDirs() {
	u.dirs = map[string]bool{".": true}
	u.paths.left += u.dirsCost
	u.dirsCost = 0
}

func (u *unpacker) entry(h *tar.Header, data io.Reader) error {
	name, kind, err := classify(h)
	if err != nil {
		return err
	}
	switch kind {
	case skipEntry:
		return nil
	case whiteoutEntry:
		return u.whiteout(name, path.Base(name))
	}
	if name == "." {
		return u.dir(name, h)
	}
	if _, err := u.parents(name, true); err != nil {
		return err
	}
	switch h.Typeflag {
	case tar.TypeDir:
		return u.dir(name, h)
	case tar.TypeSymlink:
		return u.symlink(name, h)
	case tar.TypeLink:
		return u.link(name, h)
	default:
		return u.file(name, h, data)
	}
}

// maxName is PATH_MAX: no longer name can be opened as a whole.
const maxName = 4096

// maxDepth bounds how many directories deep a layer's name may lie. A
// name of "a/" repeated is short enough, yet each of its ancestors is
// checked and resolved one by one: the work grows with the square of its
// depth. Real images stay far below (node_modules trees included).
const maxDepth = 256

type entryKind int

const (
	plainEntry    entryKind = iota // a file, directory, symlink or hardlink to apply
	skipEntry                      // ignored: devices, FIFOs, global headers, AUFS bookkeeping
	whiteoutEntry                  // a .wh.<name> or opaque marker
)

// classify applies the rules that need nothing but the header itself, for
// UnpackLayer and CheckLayers alike: it returns the entry's clean name and
// what to do with it, or why the layer is refused.
func classify(h *tar.Header) (string, entryKind, error) {
	if h.Typeflag == tar.TypeXGlobalHeader {
		return "", skipEntry, nil
	}
	if len(h.Name) > maxName || len(h.Linkname) > maxName {
		return "", 0, fmt.Errorf("%w: a name over %d bytes", ErrUnsafeLayer, maxName)
	}
	name, err := cleanName(h.Name)
	if err != nil {
		return "", 0, err
	}
	if strings.Count(name, "/") >= maxDepth {
		return "", 0, fmt.Errorf("%w: %q lies more than %d directories deep", ErrUnsafeLayer, name[:64]+"…", maxDepth)
	}
	if strings.Contains("/"+path.Dir(name), "/"+whiteoutPrefix) {
		return name, skipEntry, nil // under a whiteout name, such as AUFS's .wh..wh.plnk/
	}
	if base := path.Base(name); strings.HasPrefix(base, whiteoutPrefix) {
		hidden := strings.TrimPrefix(base, whiteoutPrefix)
		if !strings.HasPrefix(base, whiteoutMeta) && (hidden == "" || hidden == "." || hidden == "..") {
			return "", 0, fmt.Errorf("%w: whiteout %q names no entry", ErrUnsafeLayer, name)
		}
		return name, whiteoutEntry, nil
	}
	switch h.Typeflag {
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return name, skipEntry, nil
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
	default:
		return "", 0, fmt.Errorf("%w: entry type %q is not supported", ErrUnsafeLayer, h.Typeflag)
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return "", 0, fmt.Errorf("%w: sparse files are not supported", ErrUnsafeLayer)
		}
	}
	if h.Uid < 0 || h.Gid < 0 || int64(h.Uid) >= math.MaxUint32 || int64(h.Gid) >= math.MaxUint32 {
		return "", 0, fmt.Errorf("%w: owner %d:%d is out of range", ErrUnsafeLayer, h.Uid, h.Gid)
	}
	if name == "." && h.Typeflag != tar.TypeDir {
		return "", 0, fmt.Errorf("%w: a non-directory entry names the root", ErrUnsafeLayer)
	}
	switch h.Typeflag {
	case tar.TypeSymlink:
		if err := checkSymlink(name, h.Linkname); err != nil {
			return "", 0, err
		}
	case tar.TypeLink:
		if _, err := cleanName(h.Linkname); err != nil {
			return "", 0, fmt.Errorf("hardlink target: %w", err)
		}
	}
	return name, plainEntry, nil
}

// checkSymlink refuses an empty target, and a relative one that climbs
// above the root from name's directory.
func checkSymlink(name, target string) error {
	if target == "" {
		return fmt.Errorf("%w: symlink with an empty target", ErrUnsafeLayer)
	}
	if !path.IsAbs(target) {
		if r := path.Join(path.Dir(name), target); r == ".." || strings.HasPrefix(r, "../") {
			return fmt.Errorf("%w: symlink target %q climbs out of the root", ErrUnsafeLayer, target)
		}
	}
	return nil
}

// cleanName turns an entry name into a clean relative path, refusing names
// that are absolute or climb out of the root.
func cleanName(name string) (string, error) {
	if path.IsAbs(name) {
		return "", fmt.Errorf("%w: %q is absolute", ErrUnsafeLayer, name)
	}
	c := path.Clean(name)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%w: %q climbs out of the root", ErrUnsafeLayer, name)
	}
	return c, nil
}

// parents checks that every ancestor of name is a real directory, refusing
// a symlink anywhere on the way. Missing ancestors are created (mode 0755)
// if create is set; otherwise exists reports false.
func (u *unpacker) parents(name string, create bool) (exists bool, err error) {
	dir := path.Dir(name)
	if u.dirs[dir] {
		return true, nil
	}
	p := ""
	for part := range strings.SplitSeq(dir, "/") {
		p = path.Join(p, part)
		if u.dirs[p] {
			continue
		}
		fi, err := u.root.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if !create {
				return false, nil
			}
			if err := u.root.Mkdir(p, 0o700); err != nil {
				return false, err
			}
			if err := u.root.Chmod(p, 0o755); err != nil {
				return false, err
			}
			if err := u.created(p); err != nil {
				return false, err
			}
		case err != nil:
			return false, err
		case fi.Mode()&fs.ModeSymlink != 0:
			return false, fmt.Errorf("%w: %q is under the symlink %q", ErrUnsafeLayer, name, p)
		case !fi.IsDir():
			return false, fmt.Errorf("%q is under %q, which is not a directory", name, p)
		}
		if err := u.knowDir(p); err != nil {
			return false, err
		}
	}
	return true, nil
}

// created records that this layer made p.
func (u *unpacker) created(p string) error {
	k, err := keep(&u.paths, u.touched, p)
	if err != nil {
		return err
	}
	u.touched[k] = true
	for q := path.Dir(p); q != "." && !u.under[q]; q = path.Dir(q) {
		if k, err = keep(&u.paths, u.under, q); err != nil {
			return err
		}
		u.under[k] = true
	}
	return nil
}

// clear removes whatever is at name, so that a new entry can take its place.
func (u *unpacker) clear(name string) error {
	fi, err := u.root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return u.remove(name, fi)
}

func (u *unpacker) remove(name string, fi fs.FileInfo) error {
	if !fi.IsDir() {
		return u.root.Remove(name)
	}
	u.forgetDirs()
	return u.root.RemoveAll(name)
}

func (u *unpacker) dir(name string, h *tar.Header) error {
	fi, err := u.root.Lstat(name)
	switch {
	case err == nil && fi.IsDir():
		// Merge into the existing directory.
	case err == nil || errors.Is(err, fs.ErrNotExist):
		if err == nil {
			if err := u.remove(name, fi); err != nil {
				return err
			}
		}
		if err := u.root.Mkdir(name, 0o700); err != nil {
			return err
		}
	default:
		return err
	}
	if err := u.knowDir(name); err != nil {
		return err
	}
	if name != "." {
		if err := u.created(name); err != nil {
			return err
		}
	}
	mode := perm(h)
	if h.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	if !u.privileged {
		// Unprivileged, a read-only directory could not take the entries of
		// this or a later layer, nor be removed.
		mode |= 0o700
	}
	if err := u.root.Chmod(name, mode); err != nil {
		return err
	}
	if err := u.owned(u.root.Lchown(name, h.Uid, h.Gid)); err != nil {
		return err
	}
	k, err := keep(&u.paths, u.dirTimes, name)
	if err != nil {
		return err
	}
	u.dirTimes[k] = h.ModTime
	return nil
}

func (u *unpacker) file(name string, h *tar.Header, data io.Reader) error {
	if err := u.clear(name); err != nil {
		return err
	}
	// O_EXCL: a new inode every time, never one a link elsewhere shares.
	f, err := u.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := u.created(name); err != nil {
		f.Close()
		return err
	}
	_, err = io.Copy(f, data)
	if err == nil {
		err = u.owned(f.Chown(h.Uid, h.Gid))
	}
	if err == nil {
		err = f.Chmod(perm(h))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return u.root.Chtimes(name, h.ModTime, h.ModTime)
}

func (u *unpacker) symlink(name string, h *tar.Header) error {
	target := h.Linkname
	if err := checkSymlink(name, target); err != nil {
		return err
	}
	if err := u.clear(name); err != nil {
		return err
	}
	if err := u.root.Symlink(target, name); err != nil {
		return err
	}
	if err := u.created(name); err != nil {
		return err
	}
	if err := u.owned(u.root.Lchown(name, h.Uid, h.Gid)); err != nil {
		return err
	}
	return lutimes(u.root, name, h.ModTime)
}

func (u *unpacker) link(name string, h *tar.Header) error {
	target, err := cleanName(h.Linkname)
	if err != nil {
		return fmt.Errorf("hardlink target: %w", err)
	}
	ok, err := u.parents(target, false)
	if err != nil {
		return fmt.Errorf("hardlink target: %w", err)
	}
	if !ok {
		return fmt.Errorf("hardlink target %q does not exist", target)
	}
	fi, err := u.root.Lstat(target)
	if err != nil {
		return fmt.Errorf("hardlink target: %w", err)
	}
	if fi.IsDir() {
		return fmt.Errorf("hardlink target %q is a directory", target)
	}
	if target == name {
		return nil
	}
	if err := u.clear(name); err != nil {
		return err
	}
	// linkat without AT_SYMLINK_FOLLOW: a link to a symlink is a link to
	// the symlink itself.
	if err := u.root.Link(target, name); err != nil {
		return err
	}
	return u.created(name)
}

// whiteout applies .wh.<name> or .wh..wh..opq; the marker itself is never
// created.
func (u *unpacker) whiteout(name, base string) error {
	dir := path.Dir(name)
	if base == whiteoutOpaque {
		if _, err := u.parents(name, true); err != nil {
			return err
		}
		return u.prune(dir)
	}
	if strings.HasPrefix(base, whiteoutMeta) {
		return nil // other AUFS bookkeeping
	}
	p := path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix))
	ok, err := u.parents(p, false)
	if err != nil || !ok {
		return err
	}
	fi, err := u.root.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if u.touched[p] || u.under[p] {
		// The layer wrote here itself: hide only what lies beneath.
		if fi.IsDir() {
			return u.prune(p)
		}
		return nil
	}
	return u.remove(p, fi)
}

// prune removes every entry under dir that this layer did not create. dir
// has been checked to be a real directory.
func (u *unpacker) prune(dir string) error {
	d, err := u.root.Open(dir)
	if err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		p := path.Join(dir, n)
		fi, err := u.root.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case !u.touched[p] && !u.under[p]:
			if err := u.remove(p, fi); err != nil {
				return err
			}
		case fi.IsDir():
			if err := u.prune(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// finish sets the mtimes of this layer's directories, which stay as the
// layer gives them only once their children are in place.
func (u *unpacker) finish() error {
	for name, mtime := range u.dirTimes {
		if ok, err := u.parents(name, false); err != nil || !ok {
			continue // replaced or removed later in the layer
		}
		if fi, err := u.root.Lstat(name); err != nil || !fi.IsDir() {
			continue
		}
		if err := u.root.Chtimes(name, mtime, mtime); err != nil {
			return fmt.Errorf("setting times of %q: %w", name, err)
		}
	}
	return nil
}

// owned passes on a chown error, except that an unprivileged unpack cannot
// give files away and keeps them as its own.
func (u *unpacker) owned(err error) error {
	if err != nil && !u.privileged && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL)) {
		return nil
	}
	return err
}

// perm is the entry's permission bits; setuid, setgid and sticky are
// dropped.
func perm(h *tar.Header) fs.FileMode {
	return fs.FileMode(h.Mode) & fs.ModePerm
}
