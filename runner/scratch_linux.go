package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/receipt"
)

// scratch is one run's host-side directories under <root>/runs/<id>: the
// input tmpfs, bound read-only (see stage_linux.go), and the size-capped
// output tmpfs.
type scratch struct {
	dir    string
	out    string // the mounted tmpfs, "" when the output directory is off
	mounts []engine.Mount
	// inputs lists every staged input file, by sandbox path, for receipts.
	inputs []receipt.File
	// mounted is set before the first mount is tried: until then cleanup
	// has no mount to look for.
	mounted bool
}

// prepareScratch stages inputs and mounts the output tmpfs. On error it
// leaves nothing behind.
func prepareScratch(ctx context.Context, root, id string, s *Spec, uid, gid uint32, deadline time.Time) (_ *scratch, err error) {
	sc := &scratch{dir: filepath.Join(root, "runs", id)}
	if err := os.MkdirAll(sc.dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: creating run directory: %v", errdefs.ErrUnavailable, err)
	}
	defer func() {
		if err != nil {
			sc.cleanup()
		}
	}()
	// First, so that a reaper can tell this run from one whose owner died.
	if err := writeOwner(sc.dir, deadline); err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	// The run directory itself is private; what the sandbox sees below it
	// must be reachable by the gofer and readable by the sandbox's user.
	if err := os.Chmod(sc.dir, 0o711); err != nil {
		return nil, err
	}
	if len(s.Inputs) > 0 {
		if err := sc.stageInputs(ctx, root, s.Inputs, int64(s.InputLimit), deadline); err != nil {
			return nil, err
		}
	}
	if !s.Output.Disabled {
		if err := sc.mountOut(s.Output, uid, gid); err != nil {
			return nil, err
		}
	}
	return sc, nil
}

func (sc *scratch) mountOut(o Output, uid, gid uint32) error {
	sc.out = filepath.Join(sc.dir, "out")
	if err := os.Mkdir(sc.out, 0o700); err != nil {
		return fmt.Errorf("%w: creating output directory: %v", errdefs.ErrUnavailable, err)
	}
	// size caps the bytes and nr_inodes the entries: both are enforced by
	// the kernel, so a program past either gets ENOSPC.
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0755,uid=%d,gid=%d", int64(o.Size), o.Files+outInodeSlack, uid, gid)
	sc.mounted = true
	if err := unix.Mount("tmpfs", sc.out, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		sc.out = ""
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("%w: mounting the output tmpfs needs root (CAP_SYS_ADMIN); run airlock as root, or turn the output directory off with --out-dir none", errdefs.ErrUnavailable)
		}
		return fmt.Errorf("%w: mounting the output tmpfs: %v", errdefs.ErrUnavailable, err)
	}
	sc.mounts = append(sc.mounts, engine.Mount{Source: sc.out, Target: o.Dir})
	return nil
}

// outInodeSlack leaves room for directories and the root inode on top of
// the file cap; the scanner's own count enforces the cap exactly.
const outInodeSlack = 64

// orphan keeps the run directory for the reapers, when the engine could
// not free the run's sandbox: with it gone, nothing but `airlock reap`
// would find what the engine still holds (its cgroups, say). Its tmpfs go
// now; its owner file says nobody owns it, so the next sweep (at any
// airlock command's start, or airlock serve's every 30s) has the engines
// reap the run, then removes the directory.
func (sc *scratch) orphan() error {
	sc.out = ""
	var errs []error
	for _, m := range mountsUnder(sc.dir) {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmounting %q: %w", m, err))
		}
	}
	errs = append(errs, atomicfile.Replace(filepath.Join(sc.dir, ownerFile), []byte("{}"), 0o600))
	return errors.Join(errs...)
}

// cleanup unmounts the input and output tmpfs and removes the run directory.
func (sc *scratch) cleanup() error {
	sc.out = ""
	if !sc.mounted {
		return os.RemoveAll(sc.dir)
	}
	return removeRunDir(sc.dir)
}

// checkSandboxPath refuses mount targets that would shadow the system:
// see isolation.ReservedTargets.
func checkSandboxPath(p string) error { return isolation.CheckTarget(p) }
