//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// TestReapAfterSIGKILL starts 20 runs at once and kills every airlock
// process with SIGKILL: half once their program runs, half as their
// sandboxes are being made (the runtime, which follows airlock to its
// death, may be cut short anywhere, its state file half written). Then
// `airlock reap` must leave no container, runtime sandbox or file, cgroup,
// mount or scratch directory behind.
func TestReapAfterSIGKILL(t *testing.T) {
	const runs = 20
	byPid := map[int]*exec.Cmd{}
	for i := 0; i < runs; i++ {
		cmd := exec.Command(airlockBin, "--root", rootDir, "run", "--engine", engineName, "--isolation", isolationName,
			"--image", busybox, "--", "sh", "-c", "echo busy > /out/x.txt; sleep 600")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		byPid[cmd.Process.Pid] = cmd
	}
	// Every run must have written its owner file: a run directory with
	// none is left alone by reap for a minute (its creator may still be
	// writing it), so a run killed before it would stay.
	dirOf := map[int]string{}
	for deadline := time.Now().Add(2 * time.Minute); len(dirOf) < runs && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		owners, _ := filepath.Glob(filepath.Join(rootDir, "runs", "*", "owner.json"))
		for _, o := range owners {
			var owner struct{ Pid int }
			if b, err := os.ReadFile(o); err == nil && json.Unmarshal(b, &owner) == nil && byPid[owner.Pid] != nil {
				dirOf[owner.Pid] = filepath.Dir(o)
			}
		}
	}
	if len(dirOf) < runs {
		t.Fatalf("%d of %d runs wrote their owner file in 2 minutes", len(dirOf), runs)
	}
	pids := slices.Sorted(maps.Keys(dirOf))
	started := func(pid int) bool {
		_, err := os.Stat(filepath.Join(dirOf[pid], "out", "x.txt"))
		return err == nil
	}
	kill := func(pid int) {
		byPid[pid].Process.Kill()
		byPid[pid].Wait()
	}
	// Half at once, 25 ms apart, as their sandboxes boot.
	midStart := 0
	for _, pid := range pids[:runs/2] {
		if !started(pid) {
			midStart++
		}
		kill(pid)
		time.Sleep(25 * time.Millisecond)
	}
	t.Logf("%d of %d runs killed before their program ran", midStart, runs/2)
	// The other half once their program runs.
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if !slices.ContainsFunc(pids[runs/2:], func(pid int) bool { return !started(pid) }) {
			break
		}
	}
	for _, pid := range pids[runs/2:] {
		if !started(pid) {
			t.Errorf("run %s did not reach its program in 2 minutes", filepath.Base(dirOf[pid]))
		}
		kill(pid)
	}
	left := sandboxes()
	dirs, _ := os.ReadDir(filepath.Join(rootDir, "runs"))
	if len(left) == 0 || len(dirs) == 0 || len(mountsUnderRoot()) == 0 {
		t.Fatalf("SIGKILL left nothing to reap (sandboxes %v, runs %d, mounts %v): the test proves nothing", left, len(dirs), mountsUnderRoot())
	}
	t.Logf("after SIGKILL: %s", figures())
	var ids []string
	for _, d := range dirs {
		ids = append(ids, d.Name())
	}
	c := reapAndCheck(t, ids)
	// Every killed run is reaped (leftovers of earlier crashes on this host
	// may be reaped with them).
	for _, id := range ids {
		if !strings.Contains(c.stdout, id) {
			t.Errorf("run %s was not reaped:\n%s", id, c.stdout)
		}
	}
	// A second reap finds nothing.
	if c := airlock(nil, "reap"); !strings.Contains(c.stdout, "reaped 0 run(s)") {
		t.Errorf("second reap: %s", c.stdout)
	}
}

// TestReapLeavesOtherRoots: the host's cgroups and its dockerd are shared
// by every airlock root on it, so a reap of one root must leave another
// root's live run alone.
func TestReapLeavesOtherRoots(t *testing.T) {
	before := sandboxes()
	cmd := exec.Command(airlockBin, "--root", rootDir, "run", "--engine", engineName, "--isolation", isolationName,
		"--image", busybox, "--", "sh", "-c", "sleep 8; echo survived")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(time.Minute)
	for len(notIn(sandboxes(), before)) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if len(notIn(sandboxes(), before)) == 0 {
		t.Fatalf("the run made no container, runtime sandbox or cgroup in a minute: the test proves nothing\n%s", out.String())
	}
	other := t.TempDir()
	reap := exec.Command(airlockBin, "--root", other, "reap", "--json")
	got, err := reap.Output()
	if err != nil || !strings.Contains(string(got), `"reaped":[]`) {
		t.Errorf("a reap of another root: %v: %s", err, got)
	}
	if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), "survived") {
		t.Errorf("the run under a reap of another root: %v\n%s", err, out.String())
	}
}

// figures counts each kind of resource a run holds, for the log.
func figures() string { return held().String() }

// heldCounts counts each kind of resource that runs and sandboxes under
// the tests' root hold on the host.
type heldCounts struct {
	containers, runtimes, cgroups, bundles, mounts, scratch int
	// A long-lived sandbox also holds its areas' directory and loop
	// device, its record and state files, and its supervisor.
	areas, loops, records, states, supervisors int
}

func held() heldCounts { return heldBut(nil) }

// heldBut is held, leaving out the entries of sandboxes() in base: what
// was on the host before a test began is not the test's.
func heldBut(base []string) heldCounts {
	var h heldCounts
	for _, s := range notIn(sandboxes(), base) {
		switch kind, _, _ := strings.Cut(s, " "); kind {
		case "container":
			h.containers++
		case "runsc":
			h.runtimes++
		case "cgroup":
			h.cgroups++
		case "bundle":
			h.bundles++
		}
	}
	h.mounts = len(mountsUnderRoot())
	dirs, _ := os.ReadDir(filepath.Join(rootDir, "runs"))
	h.scratch = len(dirs)
	sb, _ := filepath.Glob(filepath.Join(rootDir, "sandboxes", "sb-*"))
	for _, p := range sb {
		if strings.HasSuffix(p, ".json") {
			h.records++
		} else {
			h.areas++
		}
	}
	states, _ := filepath.Glob(filepath.Join(rootDir, "state", "sb-*.json"))
	h.states = len(states)
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, l := range loops {
		if b, err := os.ReadFile(l); err == nil && strings.HasPrefix(string(b), rootDir+"/") {
			h.loops++
		}
	}
	for _, p := range hostProcs("\x00sandbox\x00supervise\x00") {
		if strings.Contains(p, rootDir) {
			h.supervisors++
		}
	}
	return h
}

func (h heldCounts) String() string {
	return fmt.Sprintf("containers %d, runsc/runc sandboxes %d, cgroups %d, bundles %d, mounts %d, scratch directories %d, "+
		"sandbox areas %d, loop devices %d, sandbox records %d, state files %d, supervisors %d",
		h.containers, h.runtimes, h.cgroups, h.bundles, h.mounts, h.scratch, h.areas, h.loops, h.records, h.states, h.supervisors)
}

// notIn is list without the entries of base.
func notIn(list, base []string) []string {
	var out []string
	for _, s := range list {
		if !slices.Contains(base, s) {
			out = append(out, s)
		}
	}
	return out
}
