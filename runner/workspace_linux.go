package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/isolation"
)

// A long-lived sandbox's writable areas live under <root>/sandboxes/<id>:
//
//   - workspace: an ext4 filesystem in the file workspace.img,
//     loop-mounted nosuid,nodev and bound at /home/user. The kernel caps
//     its bytes and inodes (ENOSPC past either), and its pages are file
//     pages on airlock's disk: the sandbox's memory cgroup can reclaim
//     them, so a full workspace is ENOSPC, never OOM, whatever --memory is.
//     The image's blocks are reserved on the host's disk at create
//     (fallocate, unwritten extents: about as fast as a sparse file), so
//     no workspace can fill the filesystem holding airlock's root; mkfs
//     costs about 10 ms. The loop device is set to autoclear: it goes
//     away with the last unmount, and with the last fd when a process dies
//     between configuring and mounting.
//   - tmp: a tmpfs capped by --tmp-size (bytes, and 64 inodes per MiB),
//     bound at /tmp in place of the engine's own tmpfs (the engine's
//     SandboxSpec.TmpSource), so that files can be uploaded to and
//     downloaded from it. A full /tmp is ENOSPC. Its pages are shmem,
//     charged to the memory cgroup of the task that writes them: for
//     the program's writes the sandbox's (under gVisor the sentry writes
//     through host fds, and the sentry and the gofer both run in the
//     sandbox's cgroup), so --tmp-size must stay below --memory; for an
//     upload, the cgroup of the airlock process that made it.
//   - out: the output tmpfs, as for one-shot runs.
//
// Each area is its own filesystem. Transfers open them by fd and never
// cross a mount (RESOLVE_NO_XDEV), so no rename inside the sandbox can
// move a directory they hold outside the area.

const (
	// DefaultWorkspaceSize is the workspace's size when none is given.
	DefaultWorkspaceSize = 1 << 30
	// minWorkspaceSize is the smallest workspace mkfs handles well.
	minWorkspaceSize = 8 << 20
	// bytesPerWorkspaceInode sets the default inode cap: 65,536 for 1GiB.
	bytesPerWorkspaceInode = 16 << 10
	// maxWorkspaceFiles bounds the inode table.
	maxWorkspaceFiles = 4 << 20
	// tmpInodesPerMiB sets the /tmp inode cap from its size, as for the
	// engines' own tmpfs.
	tmpInodesPerMiB = isolation.TmpInodesPerMiB
	// areaTimeout bounds making or removing the areas.
	areaTimeout = 30 * time.Second
)

// Where the areas appear inside the sandbox.
const (
	WorkspaceDir = "/home/user"
	TmpDir       = "/tmp"
)

// AreasSpec sizes a sandbox's writable areas.
type AreasSpec struct {
	// WorkspaceSize caps the workspace's bytes; zero means
	// DefaultWorkspaceSize.
	WorkspaceSize int64
	// WorkspaceFiles caps its inodes (files and directories); zero means
	// one per 16KiB of WorkspaceSize.
	WorkspaceFiles int
	// TmpSize caps /tmp (the policy's --tmp-size); it must be positive.
	TmpSize int64
	// TmpFiles caps /tmp's inodes; zero means 64 per MiB of TmpSize.
	TmpFiles int
	// Out is the output directory, as for one-shot runs.
	Out Output
	// UID and GID own the areas' roots and every uploaded file.
	UID, GID uint32
}

// Areas is a sandbox's writable areas on the host. The zero value holds
// nothing. It is plain data, so a sandbox's state file can keep it for a
// later process to transfer files or remove the areas.
type Areas struct {
	// Dir is <root>/sandboxes/<id>.
	Dir string `json:"dir"`
	// Workspace, Tmp and Out are the host mount points; Out is "" when the
	// output directory is off.
	Workspace string `json:"workspace"`
	Tmp       string `json:"tmp"`
	Out       string `json:"out,omitempty"`
	// OutDir is the output directory's path inside the sandbox.
	OutDir string `json:"out_dir,omitempty"`
	// UID and GID own uploaded files.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// SandboxDir is where a sandbox's areas live.
func SandboxDir(root, id string) string { return filepath.Join(root, "sandboxes", id) }

// CreateAreas makes and mounts a sandbox's writable areas. On error it
// leaves nothing behind.
func CreateAreas(ctx context.Context, root, id string, s AreasSpec) (_ *Areas, err error) {
	if err := s.validate(id); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, areaTimeout)
	defer cancel()
	a := &Areas{Dir: SandboxDir(root, id), UID: s.UID, GID: s.GID}
	if err := privateDir(filepath.Dir(a.Dir)); err != nil {
		return nil, fmt.Errorf("%w: creating the sandboxes directory: %v", errdefs.ErrUnavailable, err)
	}
	if err := os.Mkdir(a.Dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("%w: sandbox directory %q exists already", errdefs.ErrAlreadyExists, a.Dir)
		}
		return nil, fmt.Errorf("%w: creating the sandbox directory: %v", errdefs.ErrUnavailable, err)
	}
	defer func() {
		if err != nil {
			RemoveAreas(context.WithoutCancel(ctx), a.Dir)
		}
	}()
	// Its parent is root's alone (privateDir); below it, the areas are
	// reachable by the gofer and the sandbox's user, as a run's are.
	if err := os.Chmod(a.Dir, 0o711); err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	if err := a.mountWorkspace(ctx, s); err != nil {
		return nil, err
	}
	if err := a.mountTmp(s); err != nil {
		return nil, err
	}
	if !s.Out.Disabled {
		sc := &scratch{dir: a.Dir}
		if err := sc.mountOut(s.Out, s.UID, s.GID); err != nil {
			return nil, err
		}
		a.Out, a.OutDir = sc.out, s.Out.Dir
	}
	return a, nil
}

func (s *AreasSpec) validate(id string) error {
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\x00") {
		return fmt.Errorf("%w: sandbox id %q is not a single path name", errdefs.ErrInvalidArgument, id)
	}
	if s.WorkspaceSize == 0 {
		s.WorkspaceSize = DefaultWorkspaceSize
	}
	if s.WorkspaceSize < minWorkspaceSize {
		return fmt.Errorf("%w: a workspace of %d bytes is too small; give --workspace-size at least 8MiB", errdefs.ErrInvalidArgument, s.WorkspaceSize)
	}
	if s.WorkspaceFiles == 0 {
		s.WorkspaceFiles = int(min(s.WorkspaceSize/bytesPerWorkspaceInode, maxWorkspaceFiles))
	}
	if s.WorkspaceFiles < 16 || s.WorkspaceFiles > maxWorkspaceFiles {
		return fmt.Errorf("%w: a workspace file cap of %d is out of range (16 to %d)", errdefs.ErrInvalidArgument, s.WorkspaceFiles, maxWorkspaceFiles)
	}
	if s.TmpSize <= 0 {
		return fmt.Errorf("%w: /tmp needs a positive size (--tmp-size)", errdefs.ErrInvalidArgument)
	}
	if s.TmpFiles == 0 {
		s.TmpFiles = int(max(s.TmpSize>>20, 1) * tmpInodesPerMiB)
	}
	if s.UID == 0 || s.GID == 0 {
		return fmt.Errorf("%w: the areas' owner must not be root (uid %d, gid %d)", errdefs.ErrInvalidArgument, s.UID, s.GID)
	}
	if !s.Out.Disabled {
		if err := checkSandboxPath(s.Out.Dir); err != nil {
			return fmt.Errorf("%w: output directory: %v", errdefs.ErrInvalidArgument, err)
		}
		if s.Out.Dir == WorkspaceDir || strings.HasPrefix(s.Out.Dir, WorkspaceDir+"/") {
			return fmt.Errorf("%w: the output directory %q would cover the workspace %s", errdefs.ErrInvalidArgument, s.Out.Dir, WorkspaceDir)
		}
	}
	return nil
}

// Mounts are the areas as the engine binds them: the workspace at
// /home/user and the output directory. /tmp is not among them: Tmp is the
// engine's SandboxSpec.TmpSource, which only /tmp may bind.
func (a *Areas) Mounts() []engine.Mount {
	m := []engine.Mount{
		{Source: a.Workspace, Target: WorkspaceDir},
	}
	if a.Out != "" {
		m = append(m, engine.Mount{Source: a.Out, Target: a.OutDir})
	}
	return m
}

// Remove unmounts the areas, frees the loop device and removes the
// sandbox directory. It is idempotent.
func (a *Areas) Remove(ctx context.Context) error {
	if a == nil || a.Dir == "" {
		return nil
	}
	return RemoveAreas(ctx, a.Dir)
}

func (a *Areas) mountWorkspace(ctx context.Context, s AreasSpec) error {
	img := filepath.Join(a.Dir, "workspace.img")
	f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("%w: creating the workspace image: %v", errdefs.ErrUnavailable, err)
	}
	defer f.Close()
	if err := reserve(f, s.WorkspaceSize); err != nil {
		return err
	}
	// No journal (the workspace dies with the sandbox), no reserved blocks,
	// lazy inode tables, no resize room: a 1GiB image takes ~150KiB.
	cmd := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-t", "ext4",
		"-N", strconv.Itoa(s.WorkspaceFiles), "-m", "0", "-L", "airlock-ws",
		"-O", "^has_journal,^resize_inode",
		"-E", fmt.Sprintf("lazy_itable_init=1,nodiscard,root_owner=%d:%d", s.UID, s.GID),
		img)
	cmd.Env = []string{"PATH=/usr/sbin:/sbin:/usr/bin:/bin", "MKE2FS_CONFIG=/etc/mke2fs.conf"}
	if out, err := cmd.CombinedOutput(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("%w: mkfs.ext4 is not installed; install e2fsprogs (apt-get install e2fsprogs)", errdefs.ErrUnavailable)
		}
		return fmt.Errorf("%w: making the workspace filesystem: %v: %s", errdefs.ErrUnavailable, err, bytes.TrimSpace(out))
	}
	dev, err := attachLoop(f, img)
	if err != nil {
		return err
	}
	defer dev.Close() // with autoclear, the device lives on only while mounted
	a.Workspace = filepath.Join(a.Dir, "workspace")
	if err := os.Mkdir(a.Workspace, 0o700); err != nil {
		return fmt.Errorf("%w: creating the workspace mount point: %v", errdefs.ErrUnavailable, err)
	}
	if err := unix.Mount(dev.Name(), a.Workspace, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, "errors=remount-ro"); err != nil {
		return fmt.Errorf("%w: mounting the workspace: %v", errdefs.ErrUnavailable, err)
	}
	// What mkfs made besides the root is not the sandbox's business.
	if err := unix.Rmdir(filepath.Join(a.Workspace, "lost+found")); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%w: preparing the workspace: %v", errdefs.ErrUnavailable, err)
	}
	return chownRoot(a.Workspace, s.UID, s.GID, 0o755)
}

func (a *Areas) mountTmp(s AreasSpec) error {
	a.Tmp = filepath.Join(a.Dir, "tmp")
	if err := os.Mkdir(a.Tmp, 0o700); err != nil {
		return fmt.Errorf("%w: creating the /tmp mount point: %v", errdefs.ErrUnavailable, err)
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0755,uid=%d,gid=%d", s.TmpSize, s.TmpFiles, s.UID, s.GID)
	if err := unix.Mount("tmpfs", a.Tmp, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("%w: mounting /tmp: %v", errdefs.ErrUnavailable, err)
	}
	return nil
}

// reserve allocates every block of the workspace image on the host's
// disk. A sparse image would promise blocks the disk may not have: a
// sandbox filling its workspace (or several filling theirs) would fill
// the filesystem holding airlock's root, where the loop device's writes
// then fail under the workspace's ext4 and airlock's own state and audit
// writes fail beside it. Reserved, a full workspace is ENOSPC inside it,
// and a workspace the disk cannot hold is refused at create.
func reserve(f *os.File, size int64) error {
	err := unix.Fallocate(int(f.Fd()), 0, 0, size)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT), errors.Is(err, unix.EFBIG):
		return fmt.Errorf("%w: the filesystem holding airlock's root has no room for a workspace of %d bytes: give a smaller --workspace-size, or free space there", errdefs.ErrResourceExhausted, size)
	case errors.Is(err, unix.EOPNOTSUPP):
		return fmt.Errorf("%w: the filesystem holding airlock's root cannot reserve a workspace's blocks (fallocate: %v): keep airlock's root on ext4, xfs, btrfs or tmpfs", errdefs.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: reserving the workspace image: %v", errdefs.ErrUnavailable, err)
}

// chownRoot sets a mounted area's root owner and mode, by fd.
func chownRoot(dir string, uid, gid uint32, mode uint32) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: opening %q: %v", errdefs.ErrUnavailable, dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, int(uid), int(gid)); err != nil {
		return fmt.Errorf("%w: chown %q: %v", errdefs.ErrUnavailable, dir, err)
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return fmt.Errorf("%w: chmod %q: %v", errdefs.ErrUnavailable, dir, err)
	}
	return nil
}

// attachLoop binds img (open as f) to a free loop device, autoclear.
func attachLoop(f *os.File, img string) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: opening /dev/loop-control (is the loop module loaded? modprobe loop): %v", errdefs.ErrUnavailable, err)
	}
	defer ctl.Close()
	cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
	cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO
	copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], img)
	// Another process may take the free device first: try again.
	for try := 0; try < 16; try++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("%w: finding a free loop device: %v", errdefs.ErrUnavailable, err)
		}
		dev, err := os.OpenFile("/dev/loop"+strconv.Itoa(n), os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("%w: opening loop device %d: %v", errdefs.ErrUnavailable, n, err)
		}
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if errors.Is(err, unix.EINVAL) && cfg.Info.Flags&unix.LO_FLAGS_DIRECT_IO != 0 {
			// The disk under airlock's root refuses direct I/O: go buffered.
			cfg.Info.Flags &^= unix.LO_FLAGS_DIRECT_IO
			err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		}
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("%w: configuring loop device %d: %v", errdefs.ErrUnavailable, n, err)
		}
	}
	return nil, fmt.Errorf("%w: no free loop device after 16 tries", errdefs.ErrUnavailable)
}

// RemoveAreas removes the sandbox directory dir and everything it holds:
// its mounts, the workspace's loop device and image. It needs no state
// but the directory, so a reaper can call it for a sandbox whose process
// died. Removing a directory that is gone succeeds.
func RemoveAreas(ctx context.Context, dir string) error {
	dir = filepath.Clean(dir)
	var errs []error
	for _, m := range mountsUnder(dir) {
		// A plain unmount first, so the filesystem is gone when it returns;
		// lazily when something still holds it.
		err := unix.Unmount(m, 0)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(m, unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %q: %w", m, err))
		}
	}
	if len(errs) == 0 {
		if err := detachLoops(ctx, dir); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: removing sandbox directory %q: %v", errdefs.ErrUnavailable, dir, err)
	}
	return nil
}

// detachLoops waits for the autoclear of every loop device backed by a
// file under dir, and clears one still bound after a moment (a lazy
// unmount whose last user went, a device no mount ever used).
func detachLoops(ctx context.Context, dir string) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		devs := loopsUnder(dir)
		if len(devs) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			var errs []error
			for _, d := range devs {
				if err := clearLoop(d); err != nil {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func clearLoop(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", dev, err)
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("freeing %s (is the workspace still mounted in another namespace?): %w", dev, err)
	}
	return nil
}

// loopsUnder lists the loop devices whose backing file is under dir.
func loopsUnder(dir string) []string {
	paths, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		file := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if strings.HasPrefix(file, dir+"/") {
			out = append(out, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(p))))
		}
	}
	return out
}

// privateDir makes dir, the parent of every sandbox's areas, root's alone
// (0700), as runs/ is: a sandbox's id is no secret (its supervisor's
// command line shows it), so a directory other users may enter would let
// them read, and the sandbox's uid write, any sandbox's files below it.
// An older airlock made it 0711; it is narrowed here.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}
