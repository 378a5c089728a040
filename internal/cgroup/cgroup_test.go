package cgroup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/isolation"
)

// These tests need root and a real cgroup hierarchy; `make test` runs them
// as root.
func newGroup(t *testing.T, l Limits) *Group {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root; `make test` runs this as root")
	}
	g, err := New(fmt.Sprintf("test-%d-%d", os.Getpid(), time.Now().UnixNano()), l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Delete(context.Background()) })
	return g
}

// startIn starts cmd, a shell that first reads a line, puts it in g, then
// lets it go on: what it starts from then on is in g too.
func startIn(t *testing.T, g *Group, cmd *exec.Cmd) *exec.Cmd {
	t.Helper()
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	return cmd
}

func TestKillAllTakesDaemons(t *testing.T) {
	g := newGroup(t, Limits{Memory: 64 << 20, MilliCPUs: 500, Pids: 32})
	// The shell starts a daemon in a new session and exits: only the cgroup
	// still knows about it.
	cmd := startIn(t, g, exec.Command("sh", "-c", "read go; setsid sleep 300 </dev/null >/dev/null 2>&1 & exec sleep 300"))
	// Children forked after Add land in the group too; wait for the daemon.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if s, _ := g.Stats(); s.PidsPeak >= 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.KillAll(ctx); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if empty, err := g.Empty(); err != nil || !empty {
		t.Errorf("group not empty after KillAll: %v %v", empty, err)
	}
	s, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if s.PidsPeak < 2 || s.CPU <= 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestCountsPidsLimitHits(t *testing.T) {
	g := newGroup(t, Limits{Memory: 64 << 20, MilliCPUs: 1000, Pids: 4})
	cmd := exec.Command("sh", "-c", "read go; for i in 1 2 3 4 5 6 7 8; do sleep 30 & done; wait")
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	deadline := time.Now().Add(5 * time.Second)
	var s Stats
	for time.Now().Before(deadline) {
		if s, _ = g.Stats(); s.PidsLimitHits > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The peak is read before the events; read both again now that the
	// hit is known, so the peak cannot lag behind it.
	s, _ = g.Stats()
	g.KillAll(context.Background())
	cmd.Wait()
	if s.PidsLimitHits == 0 || s.PidsPeak != 4 {
		t.Errorf("stats %+v: want pids-limit hits and a peak of 4", s)
	}
}

// TestRemoveTakesNestedGroups is the reaper's case: a runtime nested its
// own group in the run's, a task still lives there, and the owner is gone.
func TestRemoveTakesNestedGroups(t *testing.T) {
	g := newGroup(t, Limits{Memory: 64 << 20, MilliCPUs: 500, Pids: 32})
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	joined := 0
	for _, d := range dirsOf(g.Path()) {
		child := filepath.Join(d, "ctr", "deeper")
		if err := os.MkdirAll(child, 0o755); err != nil {
			t.Fatal(err)
		}
		// cpuset children start with no cpus and refuse tasks; the others
		// take it.
		if os.WriteFile(filepath.Join(child, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0) == nil {
			joined++
		}
	}
	if joined == 0 {
		t.Fatal("the task joined no nested group: the test proves nothing")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Remove(ctx, filepath.Base(g.Path())); err != nil {
		t.Fatal(err)
	}
	if left := dirsOf(g.Path()); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
	if err := cmd.Wait(); err == nil {
		t.Error("the nested task was not killed")
	}
}

// TestIdle is what a reap of another root's leftovers asks: a group with a
// task in it, nested or not, or one just made, is not idle.
func TestIdle(t *testing.T) {
	g := newGroup(t, Limits{Memory: 64 << 20, MilliCPUs: 500, Pids: 32})
	id := filepath.Base(g.Path())
	if !Idle(id, 0) {
		t.Error("an empty group is not idle")
	}
	if Idle(id, time.Hour) {
		t.Error("a group made just now is idle with an hour's grace")
	}
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	joined := false
	for _, d := range dirsOf(g.Path()) {
		child := filepath.Join(d, "ctr")
		if err := os.MkdirAll(child, 0o755); err != nil {
			t.Fatal(err)
		}
		joined = os.WriteFile(filepath.Join(child, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0) == nil || joined
	}
	if !joined {
		t.Fatal("the task joined no nested group: the test proves nothing")
	}
	if Idle(id, 0) {
		t.Error("a group with a task in a nested group is idle")
	}
	if !Idle("no-such-group", 0) {
		t.Error("a group that is not there is not idle")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
}

// A swap limit's write into a group without the file is the kernel's
// missing swap accounting, said so with its fix; any other failed write
// is left as it is.
func TestSwapAdvice(t *testing.T) {
	dir := t.TempDir()
	missing := &fs.PathError{Op: "open", Path: filepath.Join(dir, "memory.memsw.limit_in_bytes"), Err: fs.ErrPermission}
	err := swapAdvice(fmt.Errorf("creating: %w", missing))
	if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "swapaccount=1") {
		t.Fatalf("v1: %v; want the boot parameter named, the cause kept", err)
	}
	if err := swapAdvice(&fs.PathError{Op: "open", Path: filepath.Join(dir, "memory.swap.max"), Err: fs.ErrPermission}); !strings.Contains(err.Error(), "swapaccount=1") {
		t.Fatalf("v2: %v", err)
	}
	present := filepath.Join(dir, "memory.swap.max")
	os.WriteFile(present, nil, 0o600)
	for _, e := range []error{
		&fs.PathError{Op: "open", Path: present, Err: fs.ErrPermission},
		&fs.PathError{Op: "open", Path: filepath.Join(dir, "memory.limit_in_bytes"), Err: fs.ErrPermission},
		errors.New("other"),
	} {
		if got := swapAdvice(e); got != e {
			t.Errorf("swapAdvice(%v) = %v; want it unchanged", e, got)
		}
	}
}

// The smallest CPU limit a policy passes (isolation.MinCPUs) is a CFS
// quota the kernel takes: below 1 ms per period cpu.cfs_quota_us (v1) or
// cpu.max (v2) refuses it, and the run would fail as unavailable instead
// of being refused as invalid before anything is made.
func TestNewTakesMinimumCPUs(t *testing.T) {
	g := newGroup(t, Limits{Memory: 64 << 20, MilliCPUs: int64(isolation.MinCPUs), Pids: 32})
	f := filepath.Join(mountpoint, "cpu", g.Path(), "cpu.cfs_quota_us")
	if Unified() {
		f = filepath.Join(mountpoint, g.Path(), "cpu.max")
	}
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if q := strings.Fields(string(b)); len(q) == 0 || q[0] != "1000" {
		t.Errorf("%s reads %q; want a quota of 1000 µs", f, b)
	}
}
