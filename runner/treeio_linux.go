package runner

import (
	"archive/tar"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/artifacts"
)

// The host's side of a tree transfer: a host directory read into a tar
// stream for UploadTree, and the sinks DownloadTree writes into (a host
// directory, delivered as artifacts are; or a tar stream).

// hostResolve is the openat2 policy of every lookup below a host tree: one
// component, never through a symlink.
const hostResolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// TarHostTree writes the tree at the host directory src to w as a tar
// stream of its directories and regular files, with names relative to
// src. It reads from directory fds, one component at a time, and never
// follows a symlink, src's own included; an opened file must be the inode
// listed. Anything else (a symlink, a FIFO, a device, a socket, a name
// the sandbox would refuse, a file over maxFile bytes when maxFile is
// positive) is left out and reported through each, its path shown below
// base, the sandbox directory the tree goes to; nothing of it is opened or
// sent. So is what the input stager refuses (treeGuard): a directory or
// file of airlock's root, and a file with more than one link that anyone
// but its owner may have linked in. A src at or below airlock's root is
// refused whole. A file that changes size while read ends the stream with
// an error.
func TarHostTree(ctx context.Context, src string, w io.Writer, base string, maxFile int64, each func(Transfer), opts ...HostTreeOption) error {
	h := &hostTree{src: src, base: base, maxFile: maxFile, each: each}
	for _, o := range opts {
		o(h)
	}
	var err error
	h.protected, h.protectedFiles, err = protectedDirs(cmp.Or(h.airlockRoot, DefaultRoot))
	if errors.Is(err, os.ErrNotExist) && h.airlockRoot == "" {
		// No airlock state at the default root: nothing of it to keep out.
		h.protected, h.protectedFiles = nil, nil
	} else if err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	fd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%w: %s is a symlink; airlock never follows one: name its target", errdefs.ErrInvalidArgument, src)
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%w: %s is not a directory", errdefs.ErrInvalidArgument, src)
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("%w: %s: no such directory", errdefs.ErrNotFound, src)
	case err != nil:
		return fmt.Errorf("%w: opening %s: %v", errdefs.ErrUnavailable, src, err)
	}
	defer unix.Close(fd)
	if err := h.checkAncestors(fd, "."); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%w: checking %s: %v", errdefs.ErrUnavailable, src, err)
	}
	h.rootWhat, h.root = fmt.Sprintf("the tree's root %q", src), dirOwner(&st)
	h.tw = tar.NewWriter(w)
	if err := h.walk(ctx, fd, "", 0, h.root); err != nil {
		return err
	}
	return h.tw.Close()
}

// HostTreeOption sets how TarHostTree reads a host tree.
type HostTreeOption func(*hostTree)

// AirlockRoot names airlock's state directory, none of which TarHostTree
// ever sends; DefaultRoot unless told.
func AirlockRoot(root string) HostTreeOption { return func(h *hostTree) { h.airlockRoot = root } }

type hostTree struct {
	tw          *tar.Writer
	src, base   string
	maxFile     int64
	each        func(Transfer)
	sum         TreeSummary // counts only the refusals reported here
	airlockRoot string
	treeGuard
}

// walk sends the directory dirfd, rel below src, in which dir may link.
func (h *hostTree) walk(ctx context.Context, dirfd int, rel string, depth int, dir linkOwner) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	names, err := treeNames(dirfd, math.MaxInt)
	if err != nil {
		return fmt.Errorf("%w: reading %q: %v", errdefs.ErrUnavailable, rel, err)
	}
	for _, name := range names {
		relp := path.Join(rel, name)
		t := Transfer{Direction: DirectionUpload, Path: treePath(h.base, relp)}
		if why := artifacts.CheckName(name); why != "" {
			treeRecord(&h.sum, h.each, t, refuse(ReasonInvalidPath, "%s", why))
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			treeRecord(&h.sum, h.each, t, refuse(ReasonNotFound, "cannot stat it on this machine: %v", err))
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if depth+1 > maxInputDepth {
				treeRecord(&h.sum, h.each, t, refuse(artifacts.ReasonTooMany, "nested deeper than %d directories", maxInputDepth))
				continue
			}
			if p, ok := h.protected[devInoOf(&st)]; ok {
				treeRecord(&h.sum, h.each, t, refuse(ReasonInvalidPath, "airlock's own state directory %q (keys, store, run state), which never goes into a sandbox; copy a tree that does not hold it", p))
				continue
			}
			sub, err := h.open(dirfd, name, &st, unix.O_DIRECTORY)
			if err != nil {
				treeRecord(&h.sum, h.each, t, err)
				continue
			}
			err = h.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: relp + "/", Mode: 0o755})
			if err == nil {
				err = h.walk(ctx, sub, relp, depth+1, dirOwner(&st))
			}
			unix.Close(sub)
			if err != nil {
				return err
			}
		case unix.S_IFREG:
			if h.maxFile > 0 && st.Size > h.maxFile {
				treeRecord(&h.sum, h.each, t, refuse(ReasonTooLarge, "%d bytes, over the %d-byte file cap", st.Size, h.maxFile))
				continue
			}
			if err := h.file(ctx, dirfd, name, relp, &st, t, dir); err != nil {
				return err
			}
		case unix.S_IFLNK:
			treeRecord(&h.sum, h.each, t, refuse(ReasonSymlink, "a symlink on this machine, which airlock never follows"))
		default:
			treeRecord(&h.sum, h.each, t, refuse(artifacts.ReasonNotRegular, "a %s on this machine; only regular files and directories are copied", hostFileType(st.Mode)))
		}
	}
	return nil
}

// open opens name in dirfd without following a symlink or blocking, and
// refuses it unless it is still the inode st listed.
func (h *hostTree) open(dirfd int, name string, st *unix.Stat_t, flags uint64) (int, error) {
	fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC | flags,
		Resolve: hostResolve,
	})
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return -1, refuse(ReasonSymlink, "swapped for a symlink or another file on this machine while being read")
		}
		return -1, refuse(ReasonNotFound, "cannot open it on this machine: %v", err)
	}
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil || fst.Ino != st.Ino || fst.Dev != st.Dev || fst.Mode&unix.S_IFMT != st.Mode&unix.S_IFMT {
		unix.Close(fd)
		return -1, refuse(artifacts.ReasonNotRegular, "changed on this machine while being read")
	}
	*st = fst
	return fd, nil
}

// file sends the regular file name in dirfd, in which dir may link.
func (h *hostTree) file(ctx context.Context, dirfd int, name, rel string, st *unix.Stat_t, t Transfer, dir linkOwner) error {
	fd, err := h.open(dirfd, name, st, 0)
	if err != nil {
		treeRecord(&h.sum, h.each, t, err)
		return nil
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if why := h.linked(st, dir); why != "" {
		treeRecord(&h.sum, h.each, t, refuse(artifacts.ReasonHardlink, "%s %s", filepath.Join(h.src, rel), why))
		return nil
	}
	if err := h.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Size: st.Size, Mode: 0o644}); err != nil {
		return err
	}
	n, err := io.Copy(h.tw, io.LimitReader(ctxReader{ctx, f}, st.Size))
	if err != nil {
		return fmt.Errorf("copying %s: %w", rel, err)
	}
	if n != st.Size {
		return fmt.Errorf("%w: %s shrank while being read; copy it again once it is still", errdefs.ErrUnavailable, rel)
	}
	return nil
}

func hostFileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "device"
	}
	return fmt.Sprintf("file of type %#o", mode&unix.S_IFMT)
}

// DestSink delivers a downloaded tree into the host directory d, as
// artifacts are delivered: created new, never replacing anything, never
// through a symlink.
func DestSink(d *artifacts.Dest) TreeSink { return destSink{d} }

type destSink struct{ d *artifacts.Dest }

func (s destSink) Dir(rel string) error { return s.d.Mkdir(rel) }

func (s destSink) File(rel string) (TreeFile, error) {
	p, err := s.d.Create(rel)
	if err != nil {
		return nil, err
	}
	return destFile{p}, nil
}

type destFile struct{ p *artifacts.Pending }

func (f destFile) Write(b []byte) (int, error) { return f.p.Write(b) }
func (f destFile) Commit(Transfer) error       { return f.p.Commit() }
func (f destFile) Discard()                    { f.p.Discard() }

// TarSink writes a downloaded tree to a tar stream. Each file is spooled
// until the scanner passes it, so that only passed files reach the stream
// and each with its final size; spool is a file of the caller's, reused
// for every file.
type TarSink struct {
	tw    *tar.Writer
	spool Spool
}

// Spool is a file a TarSink holds each file in before its entry.
type Spool interface {
	io.ReadWriteSeeker
	Truncate(size int64) error
}

// NewTarSink returns a sink writing to w; Close ends the stream.
func NewTarSink(w io.Writer, spool Spool) *TarSink {
	return &TarSink{tw: tar.NewWriter(w), spool: spool}
}

// Close writes the end of the stream.
func (s *TarSink) Close() error { return s.tw.Close() }

// Dir writes a directory entry.
func (s *TarSink) Dir(rel string) error {
	return s.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755})
}

// File starts a file in the spool.
func (s *TarSink) File(rel string) (TreeFile, error) {
	if _, err := s.spool.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	if err := s.spool.Truncate(0); err != nil {
		return nil, err
	}
	return tarFile{s, rel}, nil
}

type tarFile struct {
	s   *TarSink
	rel string
}

func (f tarFile) Write(b []byte) (int, error) { return f.s.spool.Write(b) }
func (f tarFile) Discard()                    {}

func (f tarFile) Commit(tr Transfer) error {
	if _, err := f.s.spool.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := f.s.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.rel, Size: tr.Size, Mode: 0o644}); err != nil {
		return err
	}
	_, err := io.CopyN(f.s.tw, f.s.spool, tr.Size)
	return err
}

// Add writes one more regular file, of size bytes from r, to the stream:
// an entry of the caller's own, such as a report of the transfer.
func (s *TarSink) Add(name string, size int64, r io.Reader) error {
	if err := s.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644}); err != nil {
		return err
	}
	_, err := io.CopyN(s.tw, r, size)
	return err
}
