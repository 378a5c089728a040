package cgroup

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// execLoopEnv makes the test binary a program that does nothing but exec
// itself: a Go process, so many-threaded at each execve, as runc init is.
const execLoopEnv = "AIRLOCK_CGROUP_TEST_EXEC_LOOP"

func TestMain(m *testing.M) {
	if os.Getenv(execLoopEnv) != "" {
		for {
			syscall.Exec("/proc/self/exe", []string{os.Args[0]}, os.Environ())
		}
	}
	os.Exit(m.Run())
}

// A kill of a group whose process is in execve, its other threads frozen
// (which then cannot die, so neither can the exec end), must not wait for
// a freeze that never comes: cgroup v1's freezer stays FREEZING, and a
// Freeze that waits for FROZEN waits for ever. KillAll ends each such
// process within its context.
func TestKillAllDuringExec(t *testing.T) {
	if Unified() {
		t.Skip("cgroup v2's kill needs no freezer")
	}
	g := newGroup(t, Limits{Memory: 256 << 20, MilliCPUs: 1000, Pids: 64})
	for i := range 60 {
		cmd := exec.Command("sh", "-c", "read go; exec \"$0\"", os.Args[0])
		cmd.Env = append(os.Environ(), execLoopEnv+"=1")
		startIn(t, g, cmd)
		time.Sleep(time.Duration(10+i%7*5) * time.Millisecond)
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			done <- g.KillAll(ctx)
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("round %d: KillAll still running after 20 s (freezer.state %s)", i, freezerState(g))
		}
		cmd.Wait()
	}
}

func freezerState(g *Group) string {
	b, _ := os.ReadFile(mountpoint + "/freezer" + g.path + "/freezer.state")
	return string(b)
}

// A v1 group whose freezer hierarchy went from under it (New refuses a
// host without one, so only that way) is still killed: KillAll kills
// unfrozen, and the caller's next round finds a child forked meanwhile.
// The child test, in a mount namespace of its own, hides the freezer
// hierarchy behind a tmpfs after New.
func TestKillAllWithoutFreezer(t *testing.T) {
	if os.Getenv(childEnv) == "v1-freezer-gone" {
		killWithoutFreezer(t)
		return
	}
	if Unified() {
		t.Skip("cgroup v2's kill needs no freezer")
	}
	inOwnMountNS(t, t.Name(), "v1-freezer-gone")
}

func killWithoutFreezer(t *testing.T) {
	g := newGroup(t, Limits{Memory: 64 << 20, MilliCPUs: 500, Pids: 32})
	cmd := startIn(t, g, exec.Command("sh", "-c", "read go; exec sleep 300"))
	freezer, err := filepath.EvalSymlinks(filepath.Join(mountpoint, "freezer"))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", freezer, "tmpfs", 0, "mode=755"); err != nil {
		t.Fatalf("hiding %s behind a tmpfs in the test's own mount namespace: %v", freezer, err)
	}
	// Before newGroup's Delete, which needs the freezer back.
	t.Cleanup(func() { syscall.Unmount(freezer, syscall.MNT_DETACH) })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := g.KillAll(ctx); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("KillAll without the freezer: %v", err)
	}
	if err := cmd.Wait(); err == nil {
		t.Errorf("the group's process exited of itself; want it killed")
	} else if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Errorf("the group's process ended with %v; want SIGKILL", err)
	}
}
