//go:build linux && cgo && amd64

package seccomp

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// probeEnv makes the test binary load the default profile and exec the
// probe (internal/probe) named by it, instead of running tests.
const probeEnv = "AIRLOCK_SECCOMP_PROBE"

// init, not TestMain, so that filter_test.go's helper stays as it is.
func init() {
	if bin := os.Getenv(probeEnv); bin != "" {
		fmt.Println("setup:", execUnderDefault(bin))
		os.Exit(2)
	}
}

// execUnderDefault execs bin under the default profile; it returns only on
// failure.
func execUnderDefault(bin string) error {
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	p, err := Load("default")
	if err != nil {
		return err
	}
	f, err := Compile(p)
	if err != nil {
		return err
	}
	if err := f.Load(); err != nil {
		return err
	}
	return unix.Exec(bin, []string{bin}, os.Environ())
}

// TestDefaultKillsX32 runs the probe under the default profile. The profile
// names no x32 architecture, so every x32 call meets the filter's
// bad-architecture action, SIGSYS, whether or not the kernel has an x32
// entry at all.
func TestDefaultKillsX32(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "probe")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "../internal/probe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the probe: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0])
	cmd.Env = append(os.Environ(), probeEnv+"="+bin)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "\ndone\n") {
		t.Fatalf("probe under the filter: %v\n%s", err, out)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && strings.HasPrefix(f[0], "x32_") {
			n++
			if f[1] != "-31" {
				t.Errorf("%s: %s %s, want -31 SIGSYS", f[0], f[1], f[2])
			}
		}
	}
	if n == 0 {
		t.Errorf("no x32 attempt:\n%s", out)
	}
}
