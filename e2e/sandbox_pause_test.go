//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/e2etest"
	"github.com/airlock-sandbox/airlock/runner"
)

// pauseRoot is a root of the test's own whose tools hold setup's runsc
// and this tree's exec agent (the spawner is new in it), over setup's
// store.
func pauseRoot(t *testing.T) string {
	t.Helper()
	root, err := e2etest.AgentRoot(t.TempDir(), e2etest.SysRoot(), "../cmd/airlock-agent")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for syscall.Unmount(filepath.Join(root, "oci", "runsc", "null-netns"), syscall.MNT_DETACH) == nil {
			// runsc may have bound it more than once.
		}
	})
	return root
}

// in runs the airlock binary on root.
func in(root string, args ...string) cliResult {
	cmd := exec.Command(airlockBin, append([]string{"--root", root}, args...)...)
	var so, se strings.Builder
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	r := cliResult{stdout: so.String(), stderr: se.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		r.code, r.stderr = -1, err.Error()
	}
	return r
}

func mustIn(t *testing.T, root string, args ...string) string {
	t.Helper()
	c := in(root, args...)
	if c.code != 0 {
		t.Fatalf("airlock %v: exit %d: %s", args, c.code, c.stderr)
	}
	return strings.TrimSpace(c.stdout)
}

// serve starts `airlock serve` on root's socket; stop kills it with
// SIGKILL, as a crash would.
func serve(t *testing.T, root string) (client *http.Client, stop func()) {
	t.Helper()
	sock := filepath.Join(root, "api.sock")
	os.Remove(sock)
	cmd := exec.Command(airlockBin, "--root", root, "serve", "--socket", sock)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop = func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
	client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := client.Get("http://airlock/v1/healthz"); err == nil {
			resp.Body.Close()
			return client, stop
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatal("airlock serve did not answer")
		}
	}
}

func post(t *testing.T, c *http.Client, path string) runner.SandboxInfo {
	t.Helper()
	resp, err := c.Post("http://airlock"+path, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
	}
	var si runner.SandboxInfo
	if err := json.Unmarshal(b, &si); err != nil {
		t.Fatal(err)
	}
	return si
}

// counter is the program whose state must survive: a token drawn at its
// start and a count, both in its memory, written to /tmp every 50 ms.
const counter = `
import os, time
token, n = os.urandom(8).hex(), 0
while True:
    n += 1
    with open("/tmp/counter.new", "w") as f:
        f.write("%s %d" % (token, n))
    os.rename("/tmp/counter.new", "/tmp/counter")
    time.sleep(0.05)
`

// counterStarted waits for the counter's first write to path.
func counterStarted(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the counter never started")
		}
	}
}

func readCounter(t *testing.T, path string) (string, int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var token string
	var n int
	if _, err := fmt.Sscanf(string(b), "%s %d", &token, &n); err != nil {
		t.Fatalf("counter %q: %v", b, err)
	}
	return token, n
}

// cgroupProcs lists the processes in sandbox id's memory cgroup.
func cgroupProcs(id string) string {
	for _, p := range []string{"/sys/fs/cgroup/memory/airlock/" + id + "/cgroup.procs", "/sys/fs/cgroup/airlock/" + id + "/cgroup.procs"} {
		if b, err := os.ReadFile(p); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

// pauseLeftOf lists what root still holds of sandbox id.
func pauseLeftOf(root, id string) []string {
	var left []string
	out, _ := exec.Command(filepath.Join(root, "tools", "runsc"), "--root", filepath.Join(root, "oci", "runsc"), "list", "--quiet").Output()
	for _, n := range strings.Fields(string(out)) {
		left = append(left, "runsc "+n)
	}
	for _, c := range e2etest.Cgroups() {
		if strings.HasSuffix(c, "/"+id) {
			left = append(left, "cgroup "+c)
		}
	}
	for _, d := range []string{"oci/bundles", "oci/checkpoints", "sandboxes"} {
		ents, _ := os.ReadDir(filepath.Join(root, d))
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "sb-") {
				left = append(left, d+"/"+e.Name())
			}
		}
	}
	if e2etest.MountsLeft(root) {
		left = append(left, "mounts under "+root)
	}
	return left
}

// The done-when case: a Python process holding state in memory, a file
// in the workspace and one in /tmp; paused over the API, the server
// killed and started again, resumed over the new one: the same process
// goes on with its count, the files are byte-identical, and nothing of
// the sandbox ran while it was paused.
func TestSandboxPauseResume(t *testing.T) {
	onlyPair(t, "oci", "gvisor") // it names its engine and isolation
	root := pauseRoot(t)
	id := mustIn(t, root, "sandbox", "create", "--engine", "oci", "--isolation", "gvisor", "--ttl", "10m")
	defer func() {
		in(root, "sandbox", "rm", id)
		if left := pauseLeftOf(root, id); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	}()
	si, err := runner.ReadSandbox(root, id)
	if err != nil {
		t.Fatal(err)
	}
	mustIn(t, root, "exec", id, "--", "sh", "-c", "head -c 1048576 /dev/urandom > /home/user/blob && head -c 65536 /dev/urandom > /tmp/blob")
	sums := func() string {
		return mustIn(t, root, "exec", id, "--", "sha256sum", "/home/user/blob", "/tmp/blob")
	}
	before := sums()
	mustIn(t, root, "exec", "--detach", id, "--", "python3", "-c", counter)
	cpath := filepath.Join(si.Areas.Tmp, "counter")
	counterStarted(t, cpath)

	api, stop := serve(t, root)
	got := post(t, api, "/v1/sandboxes/"+id+"/pause")
	if got.State != "paused" {
		t.Fatalf("state after pause: %q", got.State)
	}
	token, n := readCounter(t, cpath)
	if procs := cgroupProcs(id); procs != "" {
		t.Errorf("processes in the paused sandbox's cgroup: %q", procs)
	}
	ck := filepath.Join(root, "oci", "checkpoints", id)
	fi, err := os.Stat(ck)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("checkpoint directory: %v %v", fi, err)
	}
	ents, _ := os.ReadDir(ck)
	for _, e := range ents {
		if fi, err := e.Info(); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("checkpoint file %s: %v %v", e.Name(), fi.Mode(), err)
		}
	}
	if ls := mustIn(t, root, "sandbox", "ls"); !strings.Contains(ls, "paused") {
		t.Errorf("sandbox ls does not show it paused:\n%s", ls)
	}
	time.Sleep(300 * time.Millisecond) // the count would move, were it running
	if tk, m := readCounter(t, cpath); tk != token || m != n {
		t.Errorf("the counter moved while paused: %s %d → %s %d", token, n, tk, m)
	}
	if pause := in(root, "sandbox", "pause", id); pause.code != 0 {
		t.Errorf("pausing a paused sandbox: exit %d %s", pause.code, pause.stderr)
	}

	stop()
	api, stop = serve(t, root)
	defer stop()
	if got := post(t, api, "/v1/sandboxes/"+id+"/resume"); got.State != "ready" {
		t.Fatalf("state after resume: %q", got.State)
	}
	if _, err := os.Stat(ck); !os.IsNotExist(err) {
		t.Errorf("the checkpoint outlived the resume: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		tk, m := readCounter(t, cpath)
		if tk != token {
			t.Fatalf("another process writes the counter after resume: token %s, was %s", tk, token)
		}
		if m > n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the counter stopped at %d after resume", m)
		}
	}
	if after := sums(); after != before {
		t.Errorf("files changed across the pause:\n%s\n%s", before, after)
	}
	// An exec into a paused sandbox resumes it first.
	mustIn(t, root, "sandbox", "pause", id)
	if out := mustIn(t, root, "exec", id, "--", "cat", "/tmp/counter"); !strings.HasPrefix(out, token+" ") {
		t.Errorf("exec into a paused sandbox: %q", out)
	}
	if st := mustIn(t, root, "sandbox", "inspect", id); !strings.Contains(st, `"state":"ready"`) && !strings.Contains(st, `"state": "ready"`) {
		t.Errorf("after an exec resumed it: %s", st)
	}
	// A command's resume returns before its used checkpoint is removed,
	// by a process of its own.
	mustIn(t, root, "sandbox", "pause", id)
	mustIn(t, root, "sandbox", "resume", id)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		used, _ := filepath.Glob(filepath.Join(root, "oci", "checkpoints", ".used-*"))
		if _, err := os.Stat(ck); len(used) == 0 && os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoints left 10s after the command's resume: %v", used)
		}
	}
}

// runc cannot checkpoint: its refusal says so and changes nothing.
func TestSandboxPauseRefusedUnderRunc(t *testing.T) {
	onlyPair(t, "oci", "seccomp") // it names its engine and isolation
	root := pauseRoot(t)
	id := mustIn(t, root, "sandbox", "create", "--engine", "oci", "--isolation", "seccomp")
	defer in(root, "sandbox", "rm", id)
	c := in(root, "sandbox", "pause", id)
	if c.code != 64 || !strings.Contains(c.stderr, "runc") || !strings.Contains(c.stderr, "gVisor") {
		t.Fatalf("pause under runc: exit %d: %s", c.code, c.stderr)
	}
	if out := mustIn(t, root, "exec", id, "--", "echo", "ok"); out != "ok" {
		t.Errorf("after a refused pause: %q", out)
	}
}

// A pause and a resume whose airlock process is SIGKILLed part-way leave
// a sandbox that a later resume brings back, and rm then reap leave
// nothing of it: runtime sandbox, cgroups, mounts, checkpoint.
func TestSandboxPauseKilled(t *testing.T) {
	onlyPair(t, "oci", "gvisor") // it names its engine and isolation
	root := pauseRoot(t)
	id := mustIn(t, root, "sandbox", "create", "--engine", "oci", "--isolation", "gvisor", "--ttl", "10m")
	defer func() {
		in(root, "sandbox", "rm", id)
		in(root, "reap")
		if left := pauseLeftOf(root, id); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	}()
	si, err := runner.ReadSandbox(root, id)
	if err != nil {
		t.Fatal(err)
	}
	mustIn(t, root, "exec", "--detach", id, "--", "python3", "-c", counter)
	// The counter's first write comes before any pause: one checkpointed
	// while python starts writes it only some time after its restore.
	counterStarted(t, filepath.Join(si.Areas.Tmp, "counter"))
	killAfter := func(d time.Duration, args ...string) {
		cmd := exec.Command(airlockBin, append([]string{"--root", root}, args...)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(d)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	}
	for _, d := range []time.Duration{30 * time.Millisecond, 60 * time.Millisecond, 120 * time.Millisecond} {
		killAfter(d, "sandbox", "pause", id)
		killAfter(d, "sandbox", "resume", id)
		// Whatever was cut short, a resume finishes it and the sandbox runs.
		mustIn(t, root, "sandbox", "resume", id)
		if out := mustIn(t, root, "exec", id, "--", "cat", "/tmp/counter"); out == "" {
			t.Errorf("no counter after a killed pause and resume (%v)", d)
		}
	}
	// Killed mid-pause, then removed: nothing of it is left.
	killAfter(60*time.Millisecond, "sandbox", "pause", id)
}

// A paused sandbox's TTL still counts: its supervisor ends it there, and
// its checkpoint with it.
func TestSandboxPausedTTL(t *testing.T) {
	onlyPair(t, "oci", "gvisor") // it names its engine and isolation
	root := pauseRoot(t)
	id := mustIn(t, root, "sandbox", "create", "--engine", "oci", "--isolation", "gvisor", "--ttl", "4s")
	defer in(root, "sandbox", "rm", id)
	mustIn(t, root, "sandbox", "pause", id)
	if _, err := os.Stat(filepath.Join(root, "oci", "checkpoints", id)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		left := pauseLeftOf(root, id)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("past its TTL, the paused sandbox left: %v", left)
		}
	}
	if c := in(root, "sandbox", "resume", id); c.code != 66 {
		t.Errorf("resuming an expired sandbox: exit %d %s", c.code, c.stderr)
	}
}
