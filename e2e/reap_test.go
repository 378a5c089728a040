//go:build e2e

package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// mountsUnderRoot lists mounts below the tests' root, other than runsc's
// shared null network namespace.
func mountsUnderRoot() []string {
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range bytes.Split(mi, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) > 4 && strings.HasPrefix(f[4], rootDir) && !strings.HasSuffix(f[4], "null-netns") {
			out = append(out, f[4])
		}
	}
	return out
}

// TestReapAfterSIGKILL kills airlock mid-run with SIGKILL, then checks that
// `airlock reap` leaves no container, runtime sandbox, cgroup, mount or
// scratch directory behind.
func TestReapAfterSIGKILL(t *testing.T) {
	var cmds []*exec.Cmd
	for i := 0; i < 3; i++ {
		cmd := exec.Command(airlockBin, "--root", rootDir, "run", "--engine", engineName, "--isolation", isolationName,
			"--image", busybox, "--", "sh", "-c", "echo busy > /out/x.txt; sleep 600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		running := 0
		for _, s := range sandboxes() {
			if strings.HasPrefix(s, "container ") || strings.HasPrefix(s, "runsc ") || strings.HasPrefix(s, "cgroup ") {
				running++
			}
		}
		if running >= 3 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // let each reach its program
	for _, c := range cmds {
		c.Process.Kill()
		c.Wait()
	}
	left := sandboxes()
	runs, _ := os.ReadDir(filepath.Join(rootDir, "runs"))
	if len(left) == 0 || len(runs) == 0 || len(mountsUnderRoot()) == 0 {
		t.Fatalf("SIGKILL left nothing to reap (sandboxes %v, runs %d, mounts %v): the test proves nothing", left, len(runs), mountsUnderRoot())
	}
	t.Logf("after SIGKILL: %d resources, %d run directories, %d mounts", len(left), len(runs), len(mountsUnderRoot()))

	c := airlock(nil, "reap")
	if c.code != 0 || !strings.Contains(c.stdout, "reaped 3 run(s)") {
		t.Errorf("reap: exit %d %s %s", c.code, c.stdout, c.stderr)
	}
	if left := sandboxes(); len(left) > 0 {
		t.Errorf("after reap: %v", left)
	}
	if runs, _ := os.ReadDir(filepath.Join(rootDir, "runs")); len(runs) > 0 {
		t.Errorf("after reap: %d run directories", len(runs))
	}
	if m := mountsUnderRoot(); len(m) > 0 {
		t.Errorf("after reap: mounts %v", m)
	}
	for _, c := range cmds {
		if procs := hostProcsIn(filepath.Base(c.Path)); len(procs) > 0 {
			t.Errorf("processes left: %v", procs)
		}
	}
	// A second reap finds nothing.
	if c := airlock(nil, "reap"); !strings.Contains(c.stdout, "reaped 0 run(s)") {
		t.Errorf("second reap: %s", c.stdout)
	}
}
