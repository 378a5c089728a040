// Package e2etest holds what airlock's end-to-end suites share: the binary
// under test, a root of the tests' own beside setup's, and the checks that
// nothing is left under it. It is for tests and benchmarks only.
package e2etest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/internal/imagetest"
	"github.com/airlock-sandbox/airlock/runner"
)

// SysRoot is setup's root: $AIRLOCK_ROOT, else the default.
func SysRoot() string {
	if r := os.Getenv("AIRLOCK_ROOT"); r != "" {
		return r
	}
	return runner.DefaultRoot
}

// Pair is the engine and isolation mode under test, from
// AIRLOCK_E2E_ENGINE and AIRLOCK_E2E_ISOLATION; the isolation defaults to
// gvisor.
func Pair(defaultEngine string) (engineName, isolationName string) {
	engineName, isolationName = os.Getenv("AIRLOCK_E2E_ENGINE"), os.Getenv("AIRLOCK_E2E_ISOLATION")
	if engineName == "" {
		engineName = defaultEngine
	}
	if isolationName == "" {
		isolationName = "gvisor"
	}
	return engineName, isolationName
}

// Build builds the airlock command at pkg (a path to cmd/airlock) into dir
// and returns the binary's path.
func Build(dir, pkg string) (string, error) { return BuildAs(dir, pkg, "airlock") }

// BuildAs builds the command at pkg into dir under name and returns the
// binary's path.
func BuildAs(dir, pkg, name string) (string, error) {
	bin := filepath.Join(dir, name)
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building %s: %w", name, err)
	}
	return bin, nil
}

// Root makes a root of the tests' own under dir. It shares setup's store
// (content-addressed, locked) and runsc, so the default image need not be
// unpacked again, and names setup's default image; everything else the
// tests make stays out of the user's root.
func Root(dir, sysRoot string) (string, error) {
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(filepath.Join(root, "images"), 0o755); err != nil {
		return "", err
	}
	for _, d := range []string{"store", "tools"} {
		if err := os.Symlink(filepath.Join(sysRoot, d), filepath.Join(root, d)); err != nil {
			return "", err
		}
	}
	lock, err := os.ReadFile(filepath.Join(sysRoot, "images", "default.lock"))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(root, "images", "default.lock"), lock, 0o644); err != nil {
		return "", err
	}
	return root, nil
}

// AgentRoot is Root whose tools hold setup's runsc and this tree's exec
// agent, built from agentPkg (the path of cmd/airlock-agent from the
// caller's directory): the spawner in it is what keeps a detached program
// across a checkpoint.
func AgentRoot(dir, sysRoot, agentPkg string) (string, error) {
	root, err := Root(dir, sysRoot)
	if err != nil {
		return "", err
	}
	tools := filepath.Join(root, "tools")
	if err := os.Remove(tools); err != nil {
		return "", err
	}
	if err := os.Mkdir(tools, 0o755); err != nil {
		return "", err
	}
	if err := os.Symlink(filepath.Join(sysRoot, "tools", "runsc"), filepath.Join(tools, "runsc")); err != nil {
		return "", err
	}
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(tools, "airlock-agent"), agentPkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the agent: %v\n%s", err, out)
	}
	return root, nil
}

// MountsLeft reports whether anything is still mounted under root.
// runsc keeps one empty network namespace per state root for
// --network=none, bound at <state>/null-netns: that one is expected, and
// unmounted first.
func MountsLeft(root string) bool {
	netns := filepath.Join(root, "oci", "runsc", "null-netns")
	for syscall.Unmount(netns, syscall.MNT_DETACH) == nil {
		// runsc may have bound it more than once.
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	return bytes.Contains(mi, []byte(root))
}

// ImportBusybox imports the test busybox image into root under name with
// bin (an airlock binary), its layout written under dir, and returns its
// reference.
func ImportBusybox(bin, root, dir, name string) (images.Ref, error) {
	layout := filepath.Join(dir, "busybox")
	if err := imagetest.BusyboxLayout(layout); err != nil {
		return images.Ref{}, fmt.Errorf("building the busybox image: %w", err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "--root", root, "image", "import", "--name", name, layout)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return images.Ref{}, fmt.Errorf("importing the busybox image: %w: %s", err, stderr.String())
	}
	return images.ParseRef(strings.TrimSpace(string(out)))
}

// Cgroups lists airlock's cgroups in every hierarchy, as HIERARCHY/ID
// ("pids/3f2a…", "memory/sb-…"; "unified/…" under cgroup v2): a leak in
// one controller's hierarchy alone is a leak too.
func Cgroups() []string {
	var out []string
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/airlock")
	dirs = append(dirs, "/sys/fs/cgroup/airlock")
	for _, dir := range dirs {
		hier := filepath.Base(filepath.Dir(dir))
		if dir == "/sys/fs/cgroup/airlock" {
			hier = "unified"
		}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() {
				out = append(out, hier+"/"+e.Name())
			}
		}
	}
	return out
}
