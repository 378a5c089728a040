package cgroup

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
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

func TestKillAllTakesDaemons(t *testing.T) {
	g := newGroup(t, Limits{Memory: 64 << 20, MilliCPUs: 500, Pids: 32})
	// The shell starts a daemon in a new session and exits: only the cgroup
	// still knows about it.
	cmd := exec.Command("sh", "-c", "read go; setsid sleep 300 </dev/null >/dev/null 2>&1 & exec sleep 300")
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
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
