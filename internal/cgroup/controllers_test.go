package cgroup

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
// naming the controller, and leave nothing.
func TestNewRefusesUnmountedController(t *testing.T) {
	if what := os.Getenv(childEnv); strings.HasPrefix(what, "v1:") {
		refuseWithout(t, strings.TrimPrefix(what, "v1:"))
		return
	}
	if Unified() {
		t.Skip("a cgroup v2 host; TestNewRefusesV2WithoutControllers covers it")
	}
	for _, c := range limited {
		if !isMounted(string(c)) {
			t.Errorf("this host has no %s hierarchy: New cannot work here at all", c)
			continue
		}
		inOwnMountNS(t, t.Name(), "v1:"+string(c))
	}
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
