package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A limit the kernel refuses fails New midway, after some hierarchies
// have their directory: none may survive the failure.
func TestNewLeavesNothingOnFailedWrite(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root; `make test` runs this as root")
	}
	id := fmt.Sprintf("test-fail-%d-%d", os.Getpid(), time.Now().UnixNano())
	// pids.max takes at most PID_MAX_LIMIT (4194304).
	g, err := New(id, Limits{Memory: 64 << 20, MilliCPUs: 500, Pids: 1 << 23})
	if err == nil {
		g.Delete(t.Context())
		t.Fatal("New accepted a pids limit above the kernel's maximum: the test proves nothing")
	}
	if left := dirsOf(filepath.Join(Parent, id)); len(left) != 0 {
		Remove(t.Context(), id)
		t.Errorf("a failed New left %v", left)
	}
}
