package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/roottest"
)

const testUID, testGID = 65534, 65534

// newAreas makes a sandbox's areas under a fresh root; they are removed
// at the end.
func newAreas(t *testing.T, s AreasSpec) *Areas {
	t.Helper()
	roottest.Require(t, "a sandbox's areas are loop devices and tmpfs mounts")
	if s.TmpSize == 0 {
		s.TmpSize = 16 << 20
	}
	if s.UID == 0 {
		s.UID, s.GID = testUID, testGID
	}
	if s.Out.Dir == "" && !s.Out.Disabled {
		s.Out = Output{Dir: "/out", Size: 16 << 20, Files: 100}
	}
	a, err := CreateAreas(context.Background(), t.TempDir(), "sb1", s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Remove(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return a
}

func fsType(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Type
}

func TestAreasLayout(t *testing.T) {
	a := newAreas(t, AreasSpec{})
	if got := fsType(t, a.Workspace); got != unix.EXT4_SUPER_MAGIC {
		t.Errorf("workspace is filesystem %#x, want ext4", got)
	}
	if fsType(t, a.Tmp) != unix.TMPFS_MAGIC || fsType(t, a.Out) != unix.TMPFS_MAGIC {
		t.Error("/tmp and /out should be tmpfs")
	}
	for _, d := range []string{a.Workspace, a.Tmp, a.Out} {
		var st unix.Stat_t
		if err := unix.Lstat(d, &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != testUID || st.Gid != testGID || st.Mode&0o7777 != 0o755 {
			t.Errorf("%s: owner %d:%d mode %#o, want %d:%d 0755", d, st.Uid, st.Gid, st.Mode&0o7777, testUID, testGID)
		}
		var sf unix.Statfs_t
		unix.Statfs(d, &sf)
		if sf.Flags&unix.ST_NOSUID == 0 || sf.Flags&unix.ST_NODEV == 0 {
			t.Errorf("%s: mounted without nosuid,nodev (flags %#x)", d, sf.Flags)
		}
	}
	if ents, _ := os.ReadDir(a.Workspace); len(ents) != 0 {
		t.Errorf("a new workspace holds %v", ents)
	}
	m := a.Mounts()
	want := []string{"/home/user", "/out"}
	if len(m) != len(want) {
		t.Fatalf("mounts %+v", m)
	}
	for i, w := range want {
		if m[i].Target != w || m[i].ReadOnly {
			t.Errorf("mount %d is %+v, want writable %s", i, m[i], w)
		}
	}
	// The image's blocks are reserved on the host's disk, every one.
	var st unix.Stat_t
	unix.Stat(filepath.Join(a.Dir, "workspace.img"), &st)
	if st.Size != DefaultWorkspaceSize || st.Blocks*512 < DefaultWorkspaceSize {
		t.Errorf("image: size %d, %d bytes allocated; want %d reserved", st.Size, st.Blocks*512, DefaultWorkspaceSize)
	}
}

func TestWorkspaceENOSPC(t *testing.T) {
	a := newAreas(t, AreasSpec{WorkspaceSize: 16 << 20})
	f, err := os.Create(filepath.Join(a.Workspace, "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for n < 64<<20 {
		k, err := f.Write(buf)
		n += int64(k)
		if err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("write: %v, want ENOSPC", err)
			}
			break
		}
	}
	if n >= 64<<20 || n > 16<<20 {
		t.Fatalf("wrote %d bytes into a 16MiB workspace", n)
	}
}

func TestWorkspaceInodeCap(t *testing.T) {
	a := newAreas(t, AreasSpec{WorkspaceSize: 16 << 20, WorkspaceFiles: 200})
	var made int
	for ; made < 10_000; made++ {
		f, err := os.Create(filepath.Join(a.Workspace, strconv.Itoa(made)))
		if err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatalf("create: %v, want ENOSPC", err)
			}
			break
		}
		f.Close()
	}
	// mkfs rounds the inode count up to fill its inode table blocks.
	if made == 10_000 || made > 1024 {
		t.Fatalf("created %d files in a workspace capped at 200", made)
	}
}

// A full workspace stays on disk: a program in a memory cgroup capped at
// 32MiB writes 128MiB into it without being OOM-killed, and the same write
// into a tmpfs of /tmp's kind is (which shows the test can fail).
func TestWorkspaceNotChargedAsMemory(t *testing.T) {
	a := newAreas(t, AreasSpec{WorkspaceSize: 256 << 20})
	if err := write128MiBInCgroup(t, filepath.Join(a.Workspace, "f")); err != nil {
		t.Fatalf("writing 128MiB to the workspace under a 32MiB memory cap: %v", err)
	}
	tmp := t.TempDir()
	if err := unix.Mount("tmpfs", tmp, "tmpfs", 0, "size=256m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(tmp, unix.MNT_DETACH)
	err := write128MiBInCgroup(t, filepath.Join(tmp, "f"))
	if err == nil {
		t.Fatal("a tmpfs took 128MiB under a 32MiB memory cap: the cgroup does not limit, and the workspace check above proves nothing")
	}
	t.Logf("the same write to a tmpfs: %v", err)
}

func write128MiBInCgroup(t *testing.T, file string) error {
	t.Helper()
	cg := filepath.Join("/sys/fs/cgroup/memory", fmt.Sprintf("airlock-wstest-%d", time.Now().UnixNano()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatalf("creating a memory cgroup (v1): %v", err)
	}
	defer func() {
		for i := 0; i < 100 && os.Remove(cg) != nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
	}()
	if err := os.WriteFile(filepath.Join(cg, "memory.limit_in_bytes"), []byte("33554432"), 0); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(cg, "memory.memsw.limit_in_bytes"), []byte("33554432"), 0)
	cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec dd if=/dev/zero of="$2" bs=1M count=128 conv=fsync status=none`, "sh", cg, file)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

func TestRemoveAreasLeavesNothing(t *testing.T) {
	roottest.Require(t, "a sandbox's areas are loop devices and tmpfs mounts")
	root := t.TempDir()
	a, err := CreateAreas(context.Background(), root, "sb1", AreasSpec{TmpSize: 1 << 20, UID: testUID, GID: testGID, Out: Output{Dir: "/out", Size: 1 << 20, Files: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if len(loopsUnder(a.Dir)) != 1 || len(mountsUnder(a.Dir)) != 3 {
		t.Fatalf("loops %v, mounts %v: want 1 and 3", loopsUnder(a.Dir), mountsUnder(a.Dir))
	}
	os.WriteFile(filepath.Join(a.Workspace, "x"), []byte("x"), 0o644)
	for i := 0; i < 2; i++ { // idempotent
		if err := a.Remove(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	assertGone(t, a.Dir)
}

// A workspace left by a dead process (the loop device still held by a
// mount) is found and removed from its directory alone.
func TestRemoveAreasForReaper(t *testing.T) {
	roottest.Require(t, "a sandbox's areas are loop devices and tmpfs mounts")
	root := t.TempDir()
	a, err := CreateAreas(context.Background(), root, "dead", AreasSpec{TmpSize: 1 << 20, UID: testUID, GID: testGID, Out: Output{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	// Also a loop device bound to its image with no mount, as after a
	// crash with the device still open elsewhere.
	img, _ := os.Open(filepath.Join(a.Dir, "workspace.img"))
	dev, err := attachLoop(img, img.Name())
	img.Close()
	if err != nil {
		t.Fatal(err)
	}
	dev.Close()
	if err := RemoveAreas(context.Background(), SandboxDir(root, "dead")); err != nil {
		t.Fatal(err)
	}
	assertGone(t, a.Dir)
	if err := RemoveAreas(context.Background(), SandboxDir(root, "never")); err != nil {
		t.Errorf("removing a sandbox directory that never existed: %v", err)
	}
}

func assertGone(t *testing.T, dir string) {
	t.Helper()
	if m := mountsUnder(dir); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	if l := loopsUnder(dir); len(l) > 0 {
		t.Errorf("loop devices left: %v", l)
	}
	if out, _ := exec.Command("losetup", "-a").Output(); strings.Contains(string(out), dir) {
		t.Errorf("losetup -a still lists the image: %s", out)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox directory left: %v", err)
	}
}

func TestCreateAreasRefuses(t *testing.T) {
	for name, s := range map[string]AreasSpec{
		"tiny workspace": {WorkspaceSize: 1 << 20, TmpSize: 1 << 20, UID: 1, GID: 1, Out: Output{Disabled: true}},
		"no tmp size":    {UID: 1, GID: 1, Out: Output{Disabled: true}},
		"root owner":     {TmpSize: 1 << 20, Out: Output{Disabled: true}},
		"out over home":  {TmpSize: 1 << 20, UID: 1, GID: 1, Out: Output{Dir: "/home/user/out", Size: 1 << 20, Files: 1}},
	} {
		root := t.TempDir()
		if _, err := CreateAreas(context.Background(), root, "x", s); err == nil {
			t.Errorf("%s: created", name)
		}
		if _, err := os.Lstat(SandboxDir(root, "x")); err == nil {
			t.Errorf("%s: left the sandbox directory", name)
		}
	}
	if _, err := CreateAreas(context.Background(), t.TempDir(), "../x", AreasSpec{TmpSize: 1, UID: 1, GID: 1}); err == nil {
		t.Error("an id with a slash was taken")
	}
}

// BenchmarkAreas measures making and removing a sandbox's areas with a
// 1GiB workspace.
func BenchmarkAreas(b *testing.B) {
	root := b.TempDir()
	var create, remove time.Duration
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		a, err := CreateAreas(context.Background(), root, strconv.Itoa(i), AreasSpec{TmpSize: 64 << 20, UID: testUID, GID: testGID, Out: Output{Dir: "/out", Size: 64 << 20, Files: 1000}})
		if err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		if err := a.Remove(context.Background()); err != nil {
			b.Fatal(err)
		}
		create, remove = create+mid.Sub(start), remove+time.Since(mid)
	}
	b.ReportMetric(float64(create.Microseconds())/1000/float64(b.N), "create-ms/op")
	b.ReportMetric(float64(remove.Microseconds())/1000/float64(b.N), "remove-ms/op")
}

// Twenty sandboxes' areas made and removed at once: each gets its own loop
// device, and nothing is left.
func TestAreasConcurrent(t *testing.T) {
	roottest.Require(t, "a sandbox's areas are loop devices and tmpfs mounts")
	root := t.TempDir()
	errs := make(chan error, 20)
	for i := range 20 {
		go func() {
			a, err := CreateAreas(context.Background(), root, strconv.Itoa(i), AreasSpec{TmpSize: 1 << 20, UID: testUID, GID: testGID, Out: Output{Disabled: true}})
			if err == nil {
				if werr := os.WriteFile(filepath.Join(a.Workspace, "id"), []byte(strconv.Itoa(i)), 0o644); werr != nil {
					err = werr
				}
				if rerr := a.Remove(context.Background()); err == nil {
					err = rerr
				}
			}
			errs <- err
		}()
	}
	for range 20 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for i := range 20 {
		assertGone(t, SandboxDir(root, strconv.Itoa(i)))
	}
}
