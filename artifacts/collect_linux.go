package artifacts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/gabriel-vasile/mimetype"
	"golang.org/x/sys/unix"
)

// maxDepth bounds directory nesting; deeper entries are rejected as too_many.
const maxDepth = 32

// sniffLen is how much of a file the type detector sees.
const sniffLen = 3072

// resolve is the openat2 policy for every lookup: one component, beneath
// the directory fd, never through a symlink, never onto another mount.
var resolve = unix.OpenHow{
	Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
}

type collector struct {
	ctx   context.Context
	opt   Options
	dest  *destDir
	quar  *destDir
	rep   Report
	files int
	total int64
	bufs  [2][]byte // copyHashed's buffers, one written while one is hashed
}

// Collect checks every entry under src and delivers the accepted files to
// opt.Dest. It returns an error only when it cannot do its job at all (src
// unreadable, a destination unwritable); a hostile file is a Rejection.
func Collect(ctx context.Context, src string, opt Options) (Report, error) {
	if err := opt.validate(); err != nil {
		return Report{}, err
	}
	c := &collector{ctx: ctx, opt: opt, rep: Report{Artifacts: []Artifact{}, Rejected: []Rejection{}}}
	var err error
	if opt.Dest != "" {
		if c.dest, err = openDest(opt.Dest); err != nil {
			return Report{}, err
		}
		defer c.dest.Close()
	}
	if opt.Quarantine != "" {
		if c.quar, err = openDest(opt.Quarantine); err != nil {
			return Report{}, err
		}
		defer c.quar.Close()
	}
	fd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return Report{}, fmt.Errorf("opening output directory %q: %w", src, err)
	}
	defer unix.Close(fd)
	if err := c.walk(fd, "", "", "", 0); err != nil {
		return c.rep, err
	}
	return c.rep, nil
}

func (c *collector) reject(shown string, r Reason, detail string) {
	c.rep.Rejected = append(c.rep.Rejected, Rejection{Path: shown, Reason: r, Detail: detail})
}

// walk visits one directory. rel is the real relative path (for delivery),
// shown its escaped form (for reports), hidden the first dot-prefixed
// component on the way, when dotfiles are not allowed.
func (c *collector) walk(dirfd int, rel, shown, hidden string, depth int) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	names, err := readNames(dirfd)
	if err != nil {
		return fmt.Errorf("reading %q: %w", shown, err)
	}
	for _, name := range names {
		relp, shownp := path.Join(rel, name), path.Join(shown, Escape(name))
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			c.reject(shownp, ReasonNotRegular, "cannot stat: "+err.Error())
			continue
		}
		if why := checkName(name); why != "" {
			c.reject(shownp, ReasonBadName, why)
			c.quarantineBadName(dirfd, name, shownp, &st)
			continue
		}
		hiddenp := hidden
		if hiddenp == "" && name[0] == '.' && !c.opt.AllowDotfiles {
			hiddenp = Escape(name)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			c.reject(shownp, ReasonSymlink, "")
		case unix.S_IFDIR:
			if depth+1 > maxDepth {
				c.reject(shownp, ReasonTooMany, fmt.Sprintf("nested deeper than %d directories", maxDepth))
				continue
			}
			sub, err := unix.Openat2(dirfd, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolve.Resolve})
			if err != nil {
				c.reject(shownp, ReasonNotRegular, "cannot open directory: "+err.Error())
				continue
			}
			err = c.walk(sub, relp, shownp, hiddenp, depth+1)
			unix.Close(sub)
			if err != nil {
				return err
			}
		case unix.S_IFREG:
			if err := c.file(dirfd, name, relp, shownp, hiddenp, &st); err != nil {
				return err
			}
		default:
			c.reject(shownp, ReasonNotRegular, fileType(st.Mode))
		}
	}
	return nil
}

func readNames(dirfd int) ([]string, error) {
	dup, err := unix.Dup(dirfd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	slices.Sort(names)
	return names, err
}

func fileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	}
	return fmt.Sprintf("file type %#o", mode&unix.S_IFMT)
}

// file checks one regular file and delivers it if it passes.
func (c *collector) file(dirfd int, name, rel, shown, hidden string, st *unix.Stat_t) error {
	c.files++
	switch {
	case c.files > c.opt.MaxFiles:
		c.reject(shown, ReasonTooMany, fmt.Sprintf("more than %d files", c.opt.MaxFiles))
		return nil
	case st.Nlink > 1:
		c.reject(shown, ReasonHardlink, fmt.Sprintf("%d links", st.Nlink))
		return nil
	case st.Size > c.opt.MaxFileBytes:
		c.reject(shown, ReasonTooLarge, fmt.Sprintf("%d bytes, over the %d-byte file cap", st.Size, c.opt.MaxFileBytes))
		return nil
	case c.total+st.Size > c.opt.MaxTotalBytes:
		c.reject(shown, ReasonTooLarge, fmt.Sprintf("%d bytes would pass the %d-byte total cap", st.Size, c.opt.MaxTotalBytes))
		return nil
	}
	fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC,
		Resolve: resolve.Resolve,
	})
	if err != nil {
		c.reject(shown, ReasonNotRegular, "cannot open: "+err.Error())
		return nil
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	// The entry may have been swapped since lstat; trust only the open fd.
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil || fst.Ino != st.Ino || fst.Dev != st.Dev || fst.Mode&unix.S_IFMT != unix.S_IFREG || fst.Nlink != 1 {
		c.reject(shown, ReasonNotRegular, "changed while being checked")
		return nil
	}
	if sparse(&fst) {
		c.reject(shown, ReasonTooLarge, fmt.Sprintf("%d bytes, of which %d are stored (a sparse file): airlock reads only files whose bytes were written", fst.Size, fst.Blocks*512))
		return nil
	}
	if hidden != "" {
		c.reject(shown, ReasonHiddenName, fmt.Sprintf("%q starts with '.', and tools act on dotfiles by themselves (.git, .ssh, .bashrc); allow them with --artifacts-allow-dotfiles", hidden))
		c.quarantine(f, shown)
		return nil
	}

	sink, err := c.tempIn(c.dest, path.Dir(rel))
	var taken *conflict
	if errors.As(err, &taken) {
		c.reject(shown, ReasonExists, taken.detail)
		return nil
	}
	if err != nil {
		return err
	}
	var w io.Writer
	if sink != nil {
		w = sink.f
	}
	n, sum, headb, err := c.copyHashed(w, io.LimitReader(f, c.opt.MaxFileBytes+1))
	if err != nil {
		sink.discard()
		return fmt.Errorf("reading %q: %w", shown, err)
	}
	if n > c.opt.MaxFileBytes || c.total+n > c.opt.MaxTotalBytes {
		sink.discard()
		c.reject(shown, ReasonTooLarge, "grew past its cap while being read")
		return nil
	}
	m := mimetype.Detect(headb)
	ext := lowerExt(name)
	var why Reason
	switch {
	case !allowed(c.opt.Types, m):
		why = ReasonTypeNotAllowed
	case !extensionAgrees(m, ext):
		why = ReasonTypeMismatch
	}
	if why != "" {
		sink.discard()
		detail := "content is " + baseType(m.String()) + ", which the type allowlist (--artifact-types) does not list"
		if why == ReasonTypeMismatch {
			detail = mismatchDetail(m, ext)
		}
		c.reject(shown, why, detail)
		c.quarantine(f, shown)
		return nil
	}
	if sink != nil {
		err := sink.commit(path.Base(rel))
		if err == errTaken {
			c.reject(shown, ReasonExists, "the destination already has a file of that name; airlock never replaces one: move it away or deliver into an empty directory")
			return nil
		}
		if err != nil {
			return err
		}
	}
	c.total += n
	c.rep.Artifacts = append(c.rep.Artifacts, Artifact{Path: rel, Size: n, SHA256: hex.EncodeToString(sum), MIME: baseType(m.String())})
	return nil
}

// sparse says whether a file claims more bytes than its blocks hold,
// past a page (a file system may keep a small file in its inode). Its
// holes read as zeros at no cost to the sandbox's output cap (the output
// tmpfs's size counts blocks), so reading, hashing and quarantining them
// would cost the host what the sandbox never paid: a thousand files of
// 64 MiB of holes each. (A compressing file system would look sparse
// too; airlock's output areas are tmpfs.)
func sparse(st *unix.Stat_t) bool {
	return st.Size > st.Blocks*512+4096
}

// lowerExt is name's extension in lower case; a leading dot (.bashrc)
// does not start one.
func lowerExt(name string) string {
	ext := path.Ext(strings.TrimLeft(name, "."))
	b := []byte(ext)
	for i, ch := range b {
		if ch >= 'A' && ch <= 'Z' {
			b[i] = ch + 'a' - 'A'
		}
	}
	return string(b)
}

// quarantine copies a rejected, already-open regular file into the
// quarantine directory under its escaped path.
func (c *collector) quarantine(f *os.File, shown string) {
	if c.quar == nil {
		return
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return
	}
	name := quarantineName(shown)
	sink, err := c.tempIn(c.quar, path.Dir(name))
	if err != nil || sink == nil {
		return
	}
	if _, err := io.Copy(sink.f, io.LimitReader(f, c.opt.MaxFileBytes)); err != nil {
		sink.discard()
		return
	}
	if sink.commit(path.Base(name)) == nil {
		c.rep.Rejected[len(c.rep.Rejected)-1].Quarantined = name
	}
}

// quarantineBadName keeps a badly named regular file under its escaped name.
func (c *collector) quarantineBadName(dirfd int, name, shown string, st *unix.Stat_t) {
	if c.quar == nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 || st.Size > c.opt.MaxFileBytes || sparse(st) {
		return
	}
	// It counts against the file cap as any other file the host copies.
	if c.files++; c.files > c.opt.MaxFiles {
		return
	}
	fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC, Resolve: resolve.Resolve})
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "quarantine")
	defer f.Close()
	var fst unix.Stat_t
	if unix.Fstat(fd, &fst) != nil || fst.Ino != st.Ino || fst.Mode&unix.S_IFMT != unix.S_IFREG || sparse(&fst) {
		return
	}
	c.quarantine(f, shown)
}

// tempIn creates a temporary file in dir under d (nil d: no sink).
func (c *collector) tempIn(d *destDir, dir string) (*tempFile, error) {
	if d == nil {
		return nil, nil
	}
	return d.create(dir)
}

// copyBuf is the size of each of copyHashed's two buffers.
const copyBuf = 1 << 20

// copyHashed reads r once, a buffer at a time, and writes each buffer to
// w (when not nil) while another goroutine hashes that same buffer: what
// is hashed is exactly what was written, and hashing costs no extra time
// beside the copy. It returns the bytes read, their SHA-256 and the first
// sniffLen of them.
func (c *collector) copyHashed(w io.Writer, r io.Reader) (n int64, sum, head []byte, err error) {
	h := sha256.New()
	if c.bufs[0] == nil {
		// Made at the first file: 2 MiB zeroed for an empty output
		// directory cost a run about 1 ms.
		c.bufs = [2][]byte{make([]byte, copyBuf), make([]byte, copyBuf)}
	}
	free := make(chan []byte, len(c.bufs))
	for _, b := range c.bufs {
		free <- b
	}
	work := make(chan []byte, len(c.bufs))
	hashed := make(chan struct{})
	go func() {
		defer close(hashed)
		for b := range work {
			h.Write(b)
			free <- b[:cap(b)]
		}
	}()
	for {
		b := <-free
		k, rerr := io.ReadFull(r, b)
		if k > 0 {
			if len(head) < sniffLen {
				head = append(head, b[:min(k, sniffLen-len(head))]...)
			}
			n += int64(k)
			work <- b[:k]
			if w != nil {
				if _, werr := w.Write(b[:k]); werr != nil {
					err = werr
					break
				}
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			err = rerr
			break
		}
	}
	close(work)
	<-hashed
	return n, h.Sum(nil), head, err
}
