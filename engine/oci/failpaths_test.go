package oci

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/roottest"
)

// A kill that cannot be delivered says so when it gives up.
func TestKillReportsWhyItFailed(t *testing.T) {
	roottest.Require(t, "it makes a cgroup")
	cg, err := cgroup.New("failpaths-kill-test", cgroup.Limits{Memory: 64 << 20, MilliCPUs: 1000, Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	// Gone before the kill: every KillAll fails.
	if err := cg.Delete(context.Background()); err != nil {
		t.Fatal(err)
	}
	if cg.KillAll(context.Background()) == nil {
		t.Fatal("KillAll of a deleted cgroup succeeded; this test needs it to fail")
	}
	// Not in the cgroup and not a group leader: nothing kill sends reaches it.
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	_, err = kill(context.Background(), cg, cmd, make(chan error), 500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "failpaths-kill-test") {
		t.Fatalf("kill: %v; want an error carrying the cgroup's failure", err)
	}
}
