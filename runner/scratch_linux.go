package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/receipt"
)

// scratch is one run's host-side directories under <root>/runs/<id>: the
// staged, read-only inputs and the size-capped output tmpfs.
type scratch struct {
	dir    string
	out    string // the mounted tmpfs, "" when the output directory is off
	mounts []engine.Mount
	// inputs lists every staged input file, by sandbox path, for receipts.
	inputs []receipt.File
}

// prepareScratch stages inputs and mounts the output tmpfs. On error it
// leaves nothing behind.
func prepareScratch(root, id string, s *Spec, uid, gid uint32, deadline time.Time) (_ *scratch, err error) {
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
		if err := sc.stageInputs(s.Inputs, int64(s.InputLimit)); err != nil {
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

// stageInputs copies each input into the run directory, so the sandbox sees
// a private, read-only snapshot: host symlinks are skipped, modes are
// reduced to 0644/0755, and the total is capped.
func (sc *scratch) stageInputs(inputs []Input, limit int64) error {
	var total int64
	for i, in := range inputs {
		dst := filepath.Join(sc.dir, "in", fmt.Sprint(i))
		if err := os.MkdirAll(filepath.Dir(dst), 0o711); err != nil {
			return err
		}
		src, err := filepath.Abs(in.Host)
		if err != nil {
			return fmt.Errorf("%w: --input %q: %v", errdefs.ErrInvalidArgument, in.Host, err)
		}
		// The path named on the command line is resolved; nothing below it is.
		if src, err = filepath.EvalSymlinks(src); err != nil {
			return fmt.Errorf("%w: --input %q: %v", errdefs.ErrNotFound, in.Host, err)
		}
		if err := sc.copyTree(src, dst, in.Sandbox, &total, limit); err != nil {
			return fmt.Errorf("--input %q: %w", in.Host, err)
		}
		sc.mounts = append(sc.mounts, engine.Mount{Source: dst, Target: in.Sandbox, ReadOnly: true})
	}
	return nil
}

func (sc *scratch) copyTree(src, dst, sandbox string, total *int64, limit int64) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("%w: reading %q: %v", errdefs.ErrNotFound, p, err)
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			return nil // never followed
		case !d.Type().IsRegular():
			return nil // devices, FIFOs and sockets are not inputs
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if *total += fi.Size(); *total > limit {
			return fmt.Errorf("%w: inputs pass the %d-byte cap; raise --input-limit or pass less", errdefs.ErrInvalidArgument, limit)
		}
		mode := os.FileMode(0o644)
		if fi.Mode().Perm()&0o111 != 0 {
			mode = 0o755
		}
		sum, err := copyFile(p, target, mode)
		if err == nil {
			sc.inputs = append(sc.inputs, receipt.File{Path: path.Join(sandbox, filepath.ToSlash(rel)), Size: fi.Size(), SHA256: sum})
		}
		return err
	})
}

// copyFile copies src to a new file dst and returns the hex sha256 of what
// it copied.
func copyFile(src, dst string, mode os.FileMode) (string, error) {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return "", fmt.Errorf("%w: %v", errdefs.ErrNotFound, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, h), in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(dst, mode)
	}
	return hex.EncodeToString(h.Sum(nil)), err
}

// cleanup unmounts the output tmpfs and removes the run directory.
func (sc *scratch) cleanup() error {
	sc.out = ""
	return removeRunDir(sc.dir)
}

// checkSandboxPath refuses mount targets that would shadow the system or
// each other.
func checkSandboxPath(p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p {
		return fmt.Errorf("sandbox path %q must be absolute and clean", p)
	}
	for _, bad := range []string{"/", "/proc", "/sys", "/dev", "/tmp", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/usr"} {
		if p == bad || bad != "/" && strings.HasPrefix(p, bad+"/") {
			return fmt.Errorf("sandbox path %q would cover %s", p, bad)
		}
	}
	return nil
}
