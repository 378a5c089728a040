package cgroup

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3"
)

// childEnv makes the test binary, re-run in a mount namespace of its own,
// take a controller away there and try New: "v1:pids" unmounts the pids
// hierarchy, "v2" mounts the unified hierarchy over /sys/fs/cgroup.
const childEnv = "AIRLOCK_CGROUP_TEST_CHILD"

// inOwnMountNS runs test in a child process with a private mount
// namespace (Go makes its / private, so nothing it mounts or unmounts
// reaches the host), with childEnv set to what.
func inOwnMountNS(t *testing.T, test, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("unmounting a cgroup hierarchy in a mount namespace needs root; `make test` runs this as root")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+what)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s: %v\n%s", what, err, out)
	} else if strings.Contains(string(out), "--- SKIP") {
		t.Logf("%s skipped:\n%s", what, out)
	}
}

// testID is a group id of this test's own.
func testID(what string) string {
	return fmt.Sprintf("test-%s-%d-%d", what, os.Getpid(), time.Now().UnixNano())
}

// On cgroup v1, cgroup1.Default leaves out a hierarchy that is not
// mounted, and keeps the directory left on /sys/fs/cgroup's tmpfs, where
// the limits would land in plain files: New must refuse either way,
// naming the controller, and leave nothing. That holds for the freezer
// (KillAll's) and cpuacct (Stats') as for the limits' controllers.
func TestNewRefusesUnmountedController(t *testing.T) {
	if what := os.Getenv(childEnv); strings.HasPrefix(what, "v1:") {
		refuseWithout(t, strings.TrimPrefix(what, "v1:"))
		return
	}
	if Unified() {
		t.Skip("a cgroup v2 host; TestNewRefusesV2WithoutControllers covers it")
	}
	for _, c := range []string{"memory", "cpu", "pids", "freezer", "cpuacct"} {
		if !isMounted(c) {
			t.Errorf("this host has no %s hierarchy: New cannot work here at all", c)
			continue
		}
		inOwnMountNS(t, t.Name(), "v1:"+c)
	}
}

// A v1 host with no freezer hierarchy at all (a kernel or a container
// runtime without it, no directory for it either): New must refuse it,
// naming the freezer, rather than make a group KillAll cannot freeze.
// The child puts a tmpfs of its own on /sys/fs/cgroup and mounts the
// host's other hierarchies there again, as they are mounted on the host.
func TestNewRefusesHostWithoutFreezer(t *testing.T) {
	if os.Getenv(childEnv) == "v1-no-freezer" {
		refuseWithoutFreezer(t)
		return
	}
	if Unified() {
		t.Skip("a cgroup v2 host, whose groups need no freezer hierarchy")
	}
	inOwnMountNS(t, t.Name(), "v1-no-freezer")
}

func refuseWithoutFreezer(t *testing.T) {
	hierarchies, err := v1Hierarchies()
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mountpoint, "tmpfs", 0, "mode=755"); err != nil {
		t.Fatalf("mounting a tmpfs at %s in the test's own mount namespace: %v", mountpoint, err)
	}
	for _, h := range hierarchies {
		if slices.Contains(h, "freezer") {
			continue
		}
		// Mounted at the joined name, each controller's own name a link
		// to it, as systemd does.
		joined := strings.Join(h, ",")
		d := filepath.Join(mountpoint, joined)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mount("cgroup", d, "cgroup", 0, joined); err != nil {
			t.Fatalf("mounting the %s hierarchy at %s: %v", joined, d, err)
		}
		for _, c := range h {
			if c != joined {
				if err := os.Symlink(joined, filepath.Join(mountpoint, c)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	id := testID("nofreezer")
	g, err := New(id, Limits{Memory: 64 << 20, MilliCPUs: 500, Pids: 32})
	if err == nil {
		g.Delete(t.Context())
		t.Fatal("New made a group on a v1 host with no freezer hierarchy, which KillAll cannot freeze")
	}
	if !strings.Contains(err.Error(), "freezer controller is not mounted") {
		t.Errorf("New: %v; want it to name the freezer controller", err)
	}
	if left := dirsOf(PathOf(id)); len(left) != 0 {
		Remove(t.Context(), id)
		t.Errorf("a refused New left %v", left)
	}
}

// v1Hierarchies lists the host's mounted cgroup v1 hierarchies, each as
// the controllers it holds (["cpu", "cpuacct"]), those airlock uses only.
func v1Hierarchies() ([][]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	used := []string{"memory", "cpu", "cpuacct", "pids", "freezer", "devices", "cpuset"}
	var out [][]string
	for line := range strings.SplitSeq(string(b), "\n") {
		_, post, ok := strings.Cut(line, " - ")
		p := strings.Fields(post)
		if !ok || len(p) < 3 || p[0] != "cgroup" {
			continue
		}
		var h []string
		for o := range strings.SplitSeq(p[2], ",") {
			if slices.Contains(used, o) {
				h = append(h, o)
			}
		}
		if len(h) > 0 && !slices.ContainsFunc(out, func(x []string) bool { return slices.Equal(x, h) }) {
			out = append(out, h)
		}
	}
	return out, nil
}

func refuseWithout(t *testing.T, c string) {
	dir := filepath.Join(mountpoint, c)
	if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
		t.Fatalf("unmounting %s in the test's own mount namespace: %v", dir, err)
	}
	if isMounted(c) {
		t.Fatalf("%s is still mounted", dir)
	}
	id := testID(c)
	g, err := New(id, Limits{Memory: 64 << 20, MilliCPUs: 500, Pids: 32})
	if err == nil {
		// The tmpfs keeps what New wrote there: Delete cannot finish.
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		g.Delete(ctx)
		cancel()
		os.RemoveAll(filepath.Join(dir, PathOf(id)))
		os.Remove(filepath.Join(dir, Parent))
		t.Fatalf("New made a group without the %s controller", c)
	}
	if !strings.Contains(err.Error(), c+" controller is not mounted") {
		t.Errorf("New: %v; want it to name the %s controller", err, c)
	}
	if left := dirsOf(PathOf(id)); len(left) != 0 {
		Remove(t.Context(), id)
		t.Errorf("a refused New left %v", left)
	}
}

// isMounted reports whether controller c's v1 hierarchy is mounted at
// /sys/fs/cgroup/c (or where that links to).
func isMounted(c string) bool {
	mounts, err := v1Mounts()
	if err != nil {
		return false
	}
	dir, err := filepath.EvalSymlinks(filepath.Join(mountpoint, c))
	if err != nil {
		return false
	}
	for _, m := range mounts[c] {
		if m == dir {
			return true
		}
	}
	return false
}

// On cgroup v2 a controller is offered or not, and a limit file of one
// that is not enabled is missing: writing it fails (EACCES; the kernel
// makes no file), so New fails. It must say which controller, and leave
// nothing. A hybrid host's unified hierarchy offers none of them, so its
// child mounts it at /sys/fs/cgroup to try.
func TestNewRefusesV2WithoutControllers(t *testing.T) {
	if os.Getenv(childEnv) == "v2" {
		refuseV2(t)
		return
	}
	if cgroups.Mode() != cgroups.Hybrid {
		t.Skip("needs a hybrid host, whose unified hierarchy offers no controller airlock limits with")
	}
	inOwnMountNS(t, t.Name(), "v2")
}

func refuseV2(t *testing.T) {
	if err := syscall.Mount("cgroup2", mountpoint, "cgroup2", 0, ""); err != nil {
		t.Fatalf("mounting cgroup2 at %s in the test's own mount namespace: %v", mountpoint, err)
	}
	if !Unified() {
		t.Fatal("the mount did not make the hierarchy unified")
	}
	b, _ := os.ReadFile(filepath.Join(mountpoint, "cgroup.controllers"))
	if strings.Contains(string(b), "memory") {
		t.Skipf("the unified hierarchy offers memory (%q): nothing to refuse", b)
	}
	id := testID("v2")
	g, err := New(id, Limits{Memory: 64 << 20, MilliCPUs: 500, Pids: 32})
	if err == nil {
		g.Delete(t.Context())
		t.Fatal("New made a v2 group without the memory controller")
	}
	if !strings.Contains(err.Error(), "no memory controller") {
		t.Errorf("New: %v; want it to name the memory controller", err)
	}
	if left := dirsOf(PathOf(id)); len(left) != 0 {
		Remove(t.Context(), id)
		t.Errorf("a refused New left %v", left)
	}
}
