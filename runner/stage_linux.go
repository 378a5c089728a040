package runner

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/receipt"
)

// Input staging copies each input into a tmpfs at <run dir>/in, so the
// sandbox sees a private, read-only snapshot. The host path of an input is
// resolved once, by name (for a batch input: beneath its input root, with
// no symlink on the way); nothing below it ever is. The tree is walked from
// directory fds, one component at a time with openat2, and every opened fd
// is checked against what was listed: an entry swapped meanwhile (for a
// symlink, a FIFO, another file) refuses the run with errChanged. Symlinks,
// devices, FIFOs, sockets and other mounts met in the listing are skipped.
// The bytes read are capped at the input limit, the tmpfs cannot grow past
// it, and the whole copy has a deadline.

const (
	// maxInputEntries caps the files and directories staged for one run;
	// the tmpfs has this many inodes, plus a little slack.
	maxInputEntries = 100_000
	// maxInputDepth bounds directory nesting.
	maxInputDepth = 128
	// inputSizeSlack is tmpfs room on top of the input limit for the page
	// each small file takes; the byte count enforces the limit exactly.
	inputSizeSlack = 16 << 20
	// stageTimeout bounds the whole copy: a slow or hostile source must
	// not hold the run forever.
	stageTimeout = 5 * time.Minute
)

// errChanged is an input entry that changed between being listed and being
// opened: a swap under way. The run is refused rather than staged from a
// tree that is moving.
var errChanged = errors.New("changed while being copied")

// stageResolve is the openat2 policy below an input: one component, never
// through a symlink, never onto another mount.
const stageResolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// resolveAt is stageResolve at a depth: the input itself (depth 0) may be
// a mount point, nothing below it may.
func resolveAt(depth int) uint64 {
	if depth == 0 {
		return stageResolve &^ unix.RESOLVE_NO_XDEV
	}
	return stageResolve
}

type devIno struct{ dev, ino uint64 }

func devInoOf(st *unix.Stat_t) devIno { return devIno{uint64(st.Dev), st.Ino} }

// privateFile is a file no batch input may hold, and what it is.
type privateFile struct {
	id   devIno
	what string
}

// privateFiles are the batch's jobs and results files, by device and
// inode. A file that cannot be identified so is refused, not skipped.
func (opt BatchOptions) privateFiles() ([]privateFile, error) {
	var out []privateFile
	for _, f := range []struct {
		info        os.FileInfo
		field, what string
	}{
		{opt.JobsFile, "JobsFile", "the batch's jobs file, which holds every job's expected_stdout"},
		{opt.Results, "Results", "the batch's results file (--out), which holds the other jobs' output"},
	} {
		if f.info == nil {
			continue
		}
		st, ok := f.info.Sys().(*syscall.Stat_t)
		if !ok {
			return nil, fmt.Errorf("%w: BatchOptions.%s gives no device and inode; pass what os.Stat returns", errdefs.ErrInvalidArgument, f.field)
		}
		out = append(out, privateFile{id: devIno{uint64(st.Dev), st.Ino}, what: f.what})
	}
	return out, nil
}

// stager is one run's input copy.
type stager struct {
	ctx     context.Context
	limit   int64
	total   int64
	entries int
	// The input being staged is the guard's tree: its root is a batch's
	// input root, or the path --input named.
	treeGuard
	buf    []byte
	inputs []receipt.File
}

// stageInputs mounts the input tmpfs and copies every input into it.
func (sc *scratch) stageInputs(ctx context.Context, root string, inputs []Input, limit int64, deadline time.Time) error {
	ctx, cancel := context.WithDeadline(ctx, earliest(deadline, time.Now().Add(stageTimeout)))
	defer cancel()
	st := &stager{ctx: ctx, limit: limit, buf: make([]byte, 256<<10)}
	var err error
	if st.protected, st.protectedFiles, err = protectedDirs(root); err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	in := filepath.Join(sc.dir, "in")
	if err := os.Mkdir(in, 0o711); err != nil {
		return fmt.Errorf("%w: creating the input directory: %v", errdefs.ErrUnavailable, err)
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0711", limit+inputSizeSlack, maxInputEntries+len(inputs)+64)
	sc.mounted = true
	if err := unix.Mount("tmpfs", in, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("%w: mounting the input tmpfs needs root (CAP_SYS_ADMIN); run airlock as root", errdefs.ErrUnavailable)
		}
		return fmt.Errorf("%w: mounting the input tmpfs: %v", errdefs.ErrUnavailable, err)
	}
	dst, err := unix.Open(in, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: opening the input directory: %v", errdefs.ErrUnavailable, err)
	}
	defer unix.Close(dst)
	for i, input := range inputs {
		name := fmt.Sprint(i)
		if err := st.input(dst, name, input); err != nil {
			return fmt.Errorf("%s %q: %w", inputWhat(input), input.Host, err)
		}
		sc.mounts = append(sc.mounts, engine.Mount{Source: filepath.Join(in, name), Target: input.Sandbox, ReadOnly: true})
	}
	sc.inputs = st.inputs
	return nil
}

func inputWhat(in Input) string {
	if in.Beneath != "" {
		return "batch input"
	}
	return "--input"
}

func earliest(a, b time.Time) time.Time {
	if !a.IsZero() && a.Before(b) {
		return a
	}
	return b
}

// open resolves an input's host path to its parent directory fd and its
// own name in it, the one step done by name.
func (st *stager) open(in Input) (parent int, name string, err error) {
	if in.Beneath != "" {
		parent, name, st.root, err = openBeneath(in)
		return parent, name, err
	}
	src, err := filepath.Abs(in.Host)
	if err != nil {
		return -1, "", fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err)
	}
	// The path named on the command line is resolved, once; nothing below it is.
	if src, err = filepath.EvalSymlinks(src); err != nil {
		return -1, "", fmt.Errorf("%w: %v", errdefs.ErrNotFound, err)
	}
	dir, base := filepath.Dir(src), filepath.Base(src)
	if src == "/" {
		dir, base = "/", "."
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", fmt.Errorf("%w: %v", errdefs.ErrNotFound, err)
	}
	return fd, base, nil
}

// openBeneath resolves a batch input: a relative path beneath its root,
// through no symlink and no "..", to its parent's fd and its name, and
// gives who may link in the root. The root itself is resolved by name,
// once.
func openBeneath(in Input) (parent int, name string, root linkOwner, err error) {
	dir, base := path.Split(path.Clean(in.Host))
	if base == "" || base == "." || base == ".." || path.IsAbs(in.Host) {
		return -1, "", root, fmt.Errorf("%w: name a file or directory beneath the input root %q", errdefs.ErrInvalidArgument, in.Beneath)
	}
	rfd, err := unix.Open(in.Beneath, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", root, fmt.Errorf("%w: opening the input root %q: %v", errdefs.ErrNotFound, in.Beneath, err)
	}
	defer unix.Close(rfd)
	var rs unix.Stat_t
	if err := unix.Fstat(rfd, &rs); err != nil {
		return -1, "", root, fmt.Errorf("%w: checking the input root %q: %v", errdefs.ErrNotFound, in.Beneath, err)
	}
	fd, err := unix.Openat2(rfd, cmp.Or(dir, "."), &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, "", root, beneathError(in, err)
	}
	return fd, base, dirOwner(&rs), nil
}

// checkBeneath checks that a batch input resolves beneath its root and is
// no symlink itself, without copying anything.
func checkBeneath(in Input) error {
	parent, base, _, err := openBeneath(in)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	var s unix.Stat_t
	if err := unix.Fstatat(parent, base, &s, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return beneathError(in, err)
	}
	if s.Mode&unix.S_IFMT == unix.S_IFLNK {
		return beneathError(in, unix.ELOOP)
	}
	return nil
}

// beneathError explains why a batch input did not resolve beneath its root.
func beneathError(in Input, err error) error {
	switch {
	case errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%w: it leaves the input root %q (batch inputs are relative paths beneath it, without ..; set another root with --input-root)", errdefs.ErrInvalidArgument, in.Beneath)
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%w: it goes through a symlink beneath the input root %q; batch inputs may not", errdefs.ErrInvalidArgument, in.Beneath)
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%w: no such file or directory beneath the input root %q", errdefs.ErrNotFound, in.Beneath)
	}
	return fmt.Errorf("%w: resolving beneath the input root %q: %v", errdefs.ErrInvalidArgument, in.Beneath, err)
}

// input stages one input as name in dst.
func (st *stager) input(dst int, name string, in Input) error {
	parent, base, err := st.open(in)
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	var s unix.Stat_t
	if err := unix.Fstatat(parent, base, &s, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrNotFound, err)
	}
	if err := st.checkAncestors(parent, base); err != nil {
		return err
	}
	// A batch input's root is its input root; --input's, the path named,
	// which a file named directly is its own, whatever its mode (the
	// command line vouches for it).
	st.private, st.rootWhat = in.private, fmt.Sprintf("the input root %q", in.Beneath)
	dir := linkOwner{uid: s.Uid}
	if in.Beneath == "" {
		if s.Mode&unix.S_IFMT == unix.S_IFDIR {
			dir = dirOwner(&s)
		}
		st.rootWhat, st.root = fmt.Sprintf("the input root %q", in.Host), dir
	} else {
		var ps unix.Stat_t
		if err := unix.Fstat(parent, &ps); err != nil {
			return fmt.Errorf("%w: %v", errdefs.ErrNotFound, err)
		}
		dir = dirOwner(&ps)
	}
	switch s.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return st.dir(parent, base, dst, name, in.Sandbox, &s, 0)
	case unix.S_IFREG:
		return st.file(parent, base, dst, name, in.Sandbox, &s, 0, dir)
	case unix.S_IFLNK:
		if in.Beneath != "" {
			return beneathError(in, unix.ELOOP)
		}
		return fmt.Errorf("%w: it is a symlink; name its target instead", errdefs.ErrInvalidArgument)
	}
	return fmt.Errorf("%w: it is a device, FIFO or socket (file type %#o), not a file or directory", errdefs.ErrInvalidArgument, s.Mode&unix.S_IFMT)
}

// count takes one entry off the staging budget and checks the deadline.
func (st *stager) count() error {
	if err := st.ctx.Err(); err != nil {
		return deadlineError(err)
	}
	if st.entries++; st.entries > maxInputEntries {
		return fmt.Errorf("%w: inputs hold more than %d files and directories; pass fewer", errdefs.ErrInvalidArgument, maxInputEntries)
	}
	return nil
}

func deadlineError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: copying the inputs took longer than the staging deadline (%s, or the run's timeout); is the source slow or still being written?", errdefs.ErrInvalidArgument, stageTimeout)
	}
	return err
}

// dir copies the directory name in parent, already lstat'ed as s, to
// dname in dst.
func (st *stager) dir(parent int, name string, dst int, dname, sandbox string, s *unix.Stat_t, depth int) error {
	if err := st.count(); err != nil {
		return err
	}
	if depth > maxInputDepth {
		return fmt.Errorf("%w: %s is nested deeper than %d directories", errdefs.ErrInvalidArgument, sandbox, maxInputDepth)
	}
	if p, ok := st.protected[devInoOf(s)]; ok {
		return protectedError(p)
	}
	fd, err := unix.Openat2(parent, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: resolveAt(depth),
	})
	if errors.Is(err, unix.EXDEV) {
		return nil // a mount point below the input: not crossed
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %w (%v)", errdefs.ErrInvalidArgument, sandbox, errChanged, err)
	}
	defer unix.Close(fd)
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil || devInoOf(&fst) != devInoOf(s) || fst.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("%w: %s: %w", errdefs.ErrInvalidArgument, sandbox, errChanged)
	}
	names, err := st.readNames(fd)
	if err != nil {
		return fmt.Errorf("%w: reading %s: %v", errdefs.ErrInvalidArgument, sandbox, err)
	}
	if err := unix.Mkdirat(dst, dname, 0o755); err != nil {
		return stageWriteError(err)
	}
	sub, err := unix.Openat(dst, dname, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return stageWriteError(err)
	}
	defer unix.Close(sub)
	if err := unix.Fchmod(sub, 0o755); err != nil {
		return stageWriteError(err)
	}
	for _, n := range names {
		var es unix.Stat_t
		if err := unix.Fstatat(fd, n, &es, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("%w: %s: %w (%v)", errdefs.ErrInvalidArgument, path.Join(sandbox, n), errChanged, err)
		}
		switch es.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if es.Dev != s.Dev {
				continue // another mount: not crossed
			}
			err = st.dir(fd, n, sub, n, path.Join(sandbox, n), &es, depth+1)
		case unix.S_IFREG:
			err = st.file(fd, n, sub, n, path.Join(sandbox, n), &es, depth+1, dirOwner(&fst))
		default:
			// Symlinks are never followed; devices, FIFOs and sockets are
			// not inputs.
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// readNames lists a directory, sorted, refusing one that would pass the
// entry budget before holding it all in memory.
func (st *stager) readNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	var names []string
	for {
		chunk, err := f.Readdirnames(1024)
		names = append(names, chunk...)
		if st.entries+len(names) > maxInputEntries {
			return nil, fmt.Errorf("more than %d files and directories", maxInputEntries)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(names)
	return names, nil
}

// file copies the regular file name in parent, already lstat'ed as s, to
// dname in dst; dir may link in parent.
func (st *stager) file(parent int, name string, dst int, dname, sandbox string, s *unix.Stat_t, depth int, dir linkOwner) error {
	if err := st.count(); err != nil {
		return err
	}
	remaining := st.limit - st.total
	if s.Size > remaining {
		return st.overLimit()
	}
	fd, err := unix.Openat2(parent, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC,
		Resolve: resolveAt(depth),
	})
	if err != nil {
		return fmt.Errorf("%w: %s: %w (%v)", errdefs.ErrInvalidArgument, sandbox, errChanged, err)
	}
	src := os.NewFile(uintptr(fd), sandbox)
	defer src.Close()
	// Trust only the open fd: a regular file, the one that was listed.
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil || devInoOf(&fst) != devInoOf(s) || fst.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%w: %s: %w", errdefs.ErrInvalidArgument, sandbox, errChanged)
	}
	if why := st.linked(&fst, dir); why != "" {
		return fmt.Errorf("%w: %s %s", errdefs.ErrInvalidArgument, sandbox, why)
	}
	if fst.Size > remaining {
		return st.overLimit()
	}
	mode := uint32(0o644)
	if fst.Mode&0o111 != 0 {
		mode = 0o755
	}
	ofd, err := unix.Openat(dst, dname, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return stageWriteError(err)
	}
	out := os.NewFile(uintptr(ofd), dname)
	defer out.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(out, h), io.LimitReader(ctxReader{st.ctx, src}, remaining+1), st.buf)
	switch {
	case err != nil && st.ctx.Err() != nil:
		return deadlineError(st.ctx.Err())
	case err != nil:
		return stageWriteError(err)
	case n > remaining:
		return st.overLimit()
	}
	if err := out.Chmod(os.FileMode(mode)); err != nil {
		return stageWriteError(err)
	}
	if err := out.Close(); err != nil {
		return stageWriteError(err)
	}
	st.total += n
	st.inputs = append(st.inputs, receipt.File{Path: sandbox, Size: n, SHA256: hex.EncodeToString(h.Sum(nil))})
	return nil
}

func (st *stager) overLimit() error {
	return fmt.Errorf("%w: inputs pass the %d-byte cap; raise --input-limit or pass less", errdefs.ErrInvalidArgument, st.limit)
}

func stageWriteError(err error) error {
	if errors.Is(err, unix.ENOSPC) {
		return fmt.Errorf("%w: inputs do not fit the input space (each file takes at least a 4KiB page); raise --input-limit or pass fewer files", errdefs.ErrInvalidArgument)
	}
	return fmt.Errorf("%w: staging inputs: %v", errdefs.ErrUnavailable, err)
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
