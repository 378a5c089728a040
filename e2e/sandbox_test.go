//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/airlock-sandbox/airlock/engine/docker"
	"github.com/airlock-sandbox/airlock/runner"
)

// sbCreate creates a sandbox on the pair under test and returns its record.
func sbCreate(t *testing.T, args ...string) runner.SandboxInfo {
	t.Helper()
	return sbCreateEnv(t, nil, args...)
}

// sbCreateEnv is sbCreate with env added to airlock's own environment.
func sbCreateEnv(t *testing.T, env []string, args ...string) runner.SandboxInfo {
	t.Helper()
	si, err := sbCreateJSON(env, args...)
	if err != nil {
		t.Fatal(err)
	}
	return si
}

// sbCreateJSON runs `airlock sandbox create --json` on the pair under
// test, with env added to airlock's own environment.
func sbCreateJSON(env []string, args ...string) (runner.SandboxInfo, error) {
	c := airlock(env, append([]string{"sandbox", "create", "--json", "--engine", engineName, "--isolation", isolationName}, args...)...)
	var si runner.SandboxInfo
	if c.code != 0 {
		return si, fmt.Errorf("sandbox create: exit %d: %s", c.code, c.stderr)
	}
	if err := json.Unmarshal([]byte(c.stdout), &si); err != nil {
		return si, fmt.Errorf("sandbox create --json: %v: %q", err, c.stdout)
	}
	return si, nil
}

// sbExec runs `airlock exec --json ID -- ARGV…` and decodes its Result.
func sbExec(t *testing.T, id string, flags []string, argv ...string) (runner.Result, cliResult) {
	t.Helper()
	args := append(append([]string{"exec", "--json"}, flags...), append([]string{id, "--"}, argv...)...)
	c := airlock(nil, args...)
	var res runner.Result
	if err := json.Unmarshal([]byte(c.stdout), &res); err != nil {
		t.Fatalf("exec --json: %v: %q\nstderr: %s", err, c.stdout, c.stderr)
	}
	return res, c
}

// sbGone checks that nothing of sandbox id is left on the host: engine
// state, cgroups, bundles, its areas, mounts and supervisor.
func sbGone(id string) []string {
	left := sandboxes()
	if _, err := os.Lstat(runner.SandboxDir(rootDir, id)); err == nil {
		left = append(left, "areas "+id)
	}
	if _, err := os.Lstat(filepath.Join(rootDir, "sandboxes", id+".json")); err == nil {
		left = append(left, "record "+id)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), id) {
		left = append(left, "mount "+id)
	}
	return append(left, hostProcs(id)...)
}

// hostProcs lists the host's processes whose command line holds s.
func hostProcs(s string) []string {
	var found []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), s) {
			found = append(found, "process "+filepath.Base(filepath.Dir(p))+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

// waitGone polls until nothing of id is left, for at most d.
func waitGone(t *testing.T, id string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		left := sbGone(id)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: left behind after %v: %v", id, d, left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestSandboxSession(t *testing.T) {
	si := sbCreate(t, "--idle-timeout", "5m", "--file-size", "2TiB", "--label", "suite=e2e")
	id := si.ID
	t.Cleanup(func() { airlock(nil, "sandbox", "rm", id) })
	if si.State != "ready" || si.Workspace != "/home/user" || si.Engine != engineName || si.Isolation != isolationName ||
		si.Labels["suite"] != "e2e" || !si.ExpiresAt.After(si.CreatedAt) || !strings.HasPrefix(si.Image, "sha256:") {
		t.Fatalf("create --json: %+v", si)
	}

	// A module written by one exec is imported by the next.
	if res, c := sbExec(t, id, nil, "python3", "-c", "open('mod42.py','w').write('ANSWER = 42\\n')"); res.Reason != "exited" || res.ExitCode != 0 || res.SandboxID != id {
		t.Fatalf("writing the module: %+v\n%s", res, c.stderr)
	}
	res, c := sbExec(t, id, nil, "python3", "-c", "import mod42; print(mod42.ANSWER)")
	if res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout.Head)) != "42" {
		t.Fatalf("importing the module: %+v\n%s", res, c.stderr)
	}
	// The exec's Result is sealed as a run's is, naming its sandbox.
	var doc map[string]any
	if err := json.Unmarshal([]byte(c.stdout), &doc); err != nil {
		t.Fatal(err)
	}
	if v := verifyFile(t, doc); v.code != 0 || !strings.Contains(v.stdout, "exec "+res.ID+" in sandbox "+id) {
		t.Fatalf("the exec's receipt: exit %d\n%s%s", v.code, v.stdout, v.stderr)
	}
	doc["sandbox_id"] = "sb-00000000000000000000"
	if v := verifyFile(t, doc); v.code != 65 || !strings.Contains(v.stderr, "sandbox_id") {
		t.Fatalf("an exec's Result moved to another sandbox still verifies: exit %d %s", v.code, v.stderr)
	}

	// A detached server on loopback, reached from a second exec.
	if res, c := sbExec(t, id, []string{"--detach"}, "python3", "-m", "http.server", "--bind", "127.0.0.1", "8123"); res.Reason != "exited" {
		t.Fatalf("detached server: %+v\n%s", res, c.stderr)
	}
	fetch := `import time, urllib.request
for i in range(150):
    try:
        print(urllib.request.urlopen("http://127.0.0.1:8123/mod42.py", timeout=2).read().decode(), end="")
        break
    except Exception:
        time.sleep(0.1)
`
	if res, c := sbExec(t, id, nil, "python3", "-c", fetch); res.ExitCode != 0 || string(res.Stdout.Head) != "ANSWER = 42\n" {
		t.Fatalf("reaching the detached server: %+v\n%s", res, c.stderr)
	}

	// A produced CSV comes out with the right sha256.
	csv := "x,y\n"
	for i := range 100 {
		csv += strings.Repeat("7", i%5+1) + "," + strings.Repeat("3", i%3+1) + "\n"
	}
	gen := `import sys
rows = ["x,y"] + ["%s,%s" % ("7" * (i % 5 + 1), "3" * (i % 3 + 1)) for i in range(100)]
open("result.csv", "w").write("\n".join(rows) + "\n")`
	if res, c := sbExec(t, id, nil, "python3", "-c", gen); res.ExitCode != 0 {
		t.Fatalf("writing the CSV: %+v\n%s", res, c.stderr)
	}
	dl := t.TempDir()
	c = airlock(nil, "cp", "--json", id+":/home/user/result.csv", dl)
	if c.code != 0 {
		t.Fatalf("cp of the CSV: exit %d: %s %s", c.code, c.stdout, c.stderr)
	}
	var tr runner.Transfer
	if err := json.Unmarshal([]byte(c.stdout), &tr); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dl, "result.csv"))
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256([]byte(csv))
	if sum := sha256.Sum256(got); sum != want || tr.SHA256 != hex.EncodeToString(want[:]) || tr.Decision != "accepted" || tr.MIME != "text/csv" {
		t.Fatalf("downloaded CSV: record %+v, sha256 %x, want %x", tr, sum, want)
	}
	// Never overwriting.
	if c := airlock(nil, "cp", id+":/home/user/result.csv", dl); c.code == 0 {
		t.Fatalf("a second download over the first succeeded")
	}

	t.Run("HostileTransfers", func(t *testing.T) { testHostileTransfers(t, id, dl) })
	t.Run("TimeoutLeavesNothing", func(t *testing.T) { testExecTimeout(t, id) })

	// rm, then exec says gone; rm again succeeds.
	if c := airlock(nil, "sandbox", "rm", id); c.code != 0 {
		t.Fatalf("sandbox rm: exit %d: %s", c.code, c.stderr)
	}
	if c := airlock(nil, "exec", id, "--", "true"); c.code != 66 || !strings.Contains(c.stderr, "gone") {
		t.Fatalf("exec after rm: exit %d, stderr %q; want 66 saying it is gone", c.code, c.stderr)
	}
	if c := airlock(nil, "sandbox", "rm", id); c.code != 0 {
		t.Fatalf("second sandbox rm: exit %d: %s", c.code, c.stderr)
	}
	if c := airlock(nil, "exec", "not-an-id", "--", "true"); c.code != 64 {
		t.Fatalf("exec into a malformed id: exit %d, want 64", c.code)
	}
	waitGone(t, id, 5*time.Second)
}

func testHostileTransfers(t *testing.T, id, dl string) {
	// A directory is not refused: it comes out as a tree
	// (TestSandboxTreeTransfers).
	plant := `ln -s /etc evil; ln -s /etc/shadow shadow; mkfifo fifo; truncate -s 1T big`
	if res, c := sbExec(t, id, nil, "sh", "-c", plant); res.ExitCode != 0 {
		t.Fatalf("planting: %+v\n%s", res, c.stderr)
	}
	src := filepath.Join(t.TempDir(), "payload")
	if err := os.WriteFile(src, []byte("owned\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	etc, _ := os.ReadFile("/etc/passwd")
	// gVisor keeps a FIFO in its own memory: the host never sees one.
	fifo := "not_regular"
	if isolationName == "gvisor" {
		fifo = "not_found"
	}
	for _, tc := range []struct {
		name, src, dst, reason string
	}{
		{"UploadDotDot", src, id + ":../../etc/x", "invalid_path"},
		{"UploadEtcPasswd", src, id + ":/etc/passwd", "invalid_path"},
		{"UploadThroughPlantedSymlink", src, id + ":/home/user/evil/x", "symlink"},
		{"DownloadSymlinkToShadow", id + ":/home/user/shadow", filepath.Join(dl, "shadow"), "symlink"},
		{"DownloadFIFO", id + ":/home/user/fifo", filepath.Join(dl, "fifo"), fifo},
		{"DownloadSparse1TiB", id + ":/home/user/big", filepath.Join(dl, "big"), "too_large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := airlock(nil, "cp", "--json", tc.src, tc.dst)
			var tr runner.Transfer
			if err := json.Unmarshal([]byte(c.stdout), &tr); err != nil {
				t.Fatalf("cp --json: exit %d: %v: %q %s", c.code, err, c.stdout, c.stderr)
			}
			if c.code != 65 || tr.Decision != "refused" || string(tr.Reason) != tc.reason || !strings.Contains(c.stderr, "("+tc.reason+")") {
				t.Fatalf("exit %d, record %+v, stderr %q; want 65 refused (%s)", c.code, tr, c.stderr, tc.reason)
			}
			if !strings.HasPrefix(tc.src, id) {
				return
			}
			if _, err := os.Lstat(tc.dst); err == nil {
				t.Fatalf("a refused download left %s", tc.dst)
			}
		})
	}
	if now, _ := os.ReadFile("/etc/passwd"); string(now) != string(etc) {
		t.Fatal("/etc/passwd changed")
	}
	for _, p := range []string{"/etc/x", "/x"} {
		if _, err := os.Lstat(p); err == nil {
			t.Fatalf("an upload wrote %s", p)
		}
	}
	if res, _ := sbExec(t, id, nil, "sh", "-c", "test ! -e /etc/x && ! grep -q owned /etc/passwd && test ! -e evil/x"); res.ExitCode != 0 {
		t.Fatalf("an upload reached the sandbox's /etc: %+v", res)
	}
	if res, _ := sbExec(t, id, nil, "rm", "-f", "big"); res.ExitCode != 0 {
		t.Fatalf("removing the sparse file: %+v", res)
	}
}

// psSleeps lists the sandbox's processes whose command line holds "sleep".
const psSleeps = `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^sleep' || true`

func testExecTimeout(t *testing.T, id string) {
	start := time.Now()
	res, c := sbExec(t, id, []string{"--timeout", "1s"}, "sh", "-c", "sleep 100 & sleep 100")
	if res.Reason != "timeout" || c.code != 124 || time.Since(start) > 30*time.Second {
		t.Fatalf("exec --timeout 1s: exit %d, %+v\n%s", c.code, res, c.stderr)
	}
	res, c = sbExec(t, id, nil, "sh", "-c", psSleeps)
	if res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout.Head)) != "0" {
		t.Fatalf("after the timeout: exit %d, sleeps %q\n%s", res.ExitCode, string(res.Stdout.Head), c.stderr)
	}
	if res, _ := sbExec(t, id, nil, "python3", "-c", "import mod42; print(mod42.ANSWER)"); res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout.Head)) != "42" {
		t.Fatalf("the exec after the timeout: %+v", res)
	}
}

func TestSandboxIdleTimeout(t *testing.T) {
	si := sbCreate(t, "--idle-timeout", "3s")
	t.Cleanup(func() { airlock(nil, "sandbox", "rm", si.ID) })
	if res, _ := sbExec(t, si.ID, nil, "true"); res.ExitCode != 0 {
		t.Fatalf("exec: %+v", res)
	}
	start := time.Now()
	// No airlock command runs from here on: only the host is looked at.
	waitGone(t, si.ID, 10*time.Second)
	t.Logf("gone %v after its last exec", time.Since(start).Round(100*time.Millisecond))
	if c := airlock(nil, "sandbox", "ls", "--json"); c.code != 0 || strings.Contains(c.stdout, si.ID) {
		t.Fatalf("sandbox ls still lists it: %s", c.stdout)
	}
	if c := airlock(nil, "exec", si.ID, "--", "true"); c.code != 66 {
		t.Fatalf("exec into the expired sandbox: exit %d, want 66", c.code)
	}
	ents, _ := os.ReadDir(filepath.Join(rootDir, "sandboxes"))
	for _, e := range ents {
		if e.Name() != ".lock" {
			t.Errorf("left in sandboxes/: %s", e.Name())
		}
	}
}

func TestSandboxTTL(t *testing.T) {
	si := sbCreate(t, "--ttl", "3s", "--idle-timeout", "1h")
	t.Cleanup(func() { airlock(nil, "sandbox", "rm", si.ID) })
	if d := si.ExpiresAt.Sub(si.CreatedAt); d != 3*time.Second {
		t.Fatalf("expires_at - created_at = %v, want 3s", d)
	}
	// Activity does not extend a TTL.
	if res, _ := sbExec(t, si.ID, nil, "true"); res.ExitCode != 0 {
		t.Fatalf("exec: %+v", res)
	}
	waitGone(t, si.ID, 10*time.Second)
	if c := airlock(nil, "exec", si.ID, "--", "true"); c.code != 66 {
		t.Fatalf("exec into the expired sandbox: exit %d, want 66", c.code)
	}
}

// A creator SIGKILLed mid-create leaves a sandbox its supervisor frees.
func TestSandboxCreatorKilled(t *testing.T) {
	cmd := exec.Command(airlockBin, "--root", rootDir, "sandbox", "create", "--engine", engineName, "--isolation", isolationName, "--idle-timeout", "1h")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The areas' directory appears once the supervisor runs, before the
	// engine's sandbox is made.
	var id string
	deadline := time.Now().Add(30 * time.Second)
	for id == "" {
		dirs, _ := filepath.Glob(filepath.Join(rootDir, "sandboxes", "sb-*"))
		for _, d := range dirs {
			if fi, err := os.Stat(d); err == nil && fi.IsDir() {
				id = filepath.Base(d)
			}
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("no sandbox directory appeared")
		}
		time.Sleep(time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	t.Cleanup(func() { airlock(nil, "sandbox", "rm", id) })
	waitGone(t, id, 10*time.Second)
}

// runtimeProcess is the host process of sandbox id's runtime: runsc's
// sandbox, or the container's init.
func runtimeProcess(t *testing.T, id string) int {
	t.Helper()
	if isolationName == "gvisor" {
		return sandboxProcess(t, id)
	}
	if engineName == "docker" {
		c, err := dockerCli.ContainerList(context.Background(), container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", docker.LabelID+"="+id))})
		if err != nil || len(c) != 1 {
			t.Fatalf("finding the container of %s: %v, %d", id, err, len(c))
		}
		ci, err := dockerCli.ContainerInspect(context.Background(), c[0].ID)
		if err != nil || ci.State == nil || ci.State.Pid <= 0 {
			t.Fatalf("inspecting the container of %s: %v", id, err)
		}
		return ci.State.Pid
	}
	b, err := os.ReadFile(filepath.Join(rootDir, "oci", "bundles", id, "sandbox.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ Pid int }
	if err := json.Unmarshal(b, &st); err != nil || st.Pid <= 0 {
		t.Fatalf("the sandbox's state: %v: %s", err, b)
	}
	return st.Pid
}

// Killing the runtime from outside: the next exec says sandbox_lost, the
// state is failed, and reap leaves nothing.
func TestSandboxRuntimeKilled(t *testing.T) {
	si := sbCreate(t)
	t.Cleanup(func() { airlock(nil, "sandbox", "rm", si.ID) })
	if res, _ := sbExec(t, si.ID, nil, "true"); res.ExitCode != 0 {
		t.Fatalf("exec: %+v", res)
	}
	if err := syscall.Kill(runtimeProcess(t, si.ID), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		res, c := sbExec(t, si.ID, nil, "true")
		if c.code != 69 || res.ErrorKind != "sandbox_lost" {
			t.Fatalf("exec %d after the kill: exit %d, %+v\n%s", i, c.code, res, c.stderr)
		}
	}
	c := airlock(nil, "sandbox", "inspect", si.ID)
	var got runner.SandboxInfo
	if err := json.Unmarshal([]byte(c.stdout), &got); err != nil || got.State != "failed" {
		t.Fatalf("inspect: exit %d, %v, %s", c.code, err, c.stdout)
	}
	if c := airlock(nil, "reap"); c.code != 0 {
		t.Fatalf("reap: exit %d: %s", c.code, c.stderr)
	}
	waitGone(t, si.ID, 10*time.Second)
}

// TestRuntimeEnvironmentClean: airlock's own environment, where a
// credential route's value lives, reaches no process of a sandbox on the
// host: not runsc's sandbox or gofer, not runc's container, as it reaches
// no program in it.
func TestRuntimeEnvironmentClean(t *testing.T) {
	onlyPair(t, "oci", "")
	const marker = "AIRLOCK_E2E_NOT_FOR_THE_SANDBOX"
	c := airlock([]string{marker + "=1"}, "sandbox", "create", "--engine", "oci", "--isolation", isolationName, "--ttl", "5m")
	if c.code != 0 {
		t.Fatalf("sandbox create: exit %d: %s", c.code, c.stderr)
	}
	id := strings.TrimSpace(c.stdout)
	defer airlock(nil, "sandbox", "rm", id)
	if x := airlock([]string{marker + "=1"}, "exec", id, "--", "true"); x.code != 0 {
		t.Fatalf("exec: exit %d: %s", x.code, x.stderr)
	}
	var pids []string
	for _, dir := range []string{"/sys/fs/cgroup/pids/airlock/" + id, "/sys/fs/cgroup/airlock/" + id} {
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Name() == "cgroup.procs" {
				b, _ := os.ReadFile(p)
				pids = append(pids, strings.Fields(string(b))...)
			}
			return nil
		})
	}
	if len(pids) == 0 {
		t.Fatalf("no process in sandbox %s's cgroup", id)
	}
	for _, pid := range pids {
		env, err := os.ReadFile("/proc/" + pid + "/environ")
		if err != nil {
			continue // ended since
		}
		if bytes.Contains(env, []byte(marker)) {
			comm, _ := os.ReadFile("/proc/" + pid + "/comm")
			t.Errorf("process %s (%s) of sandbox %s holds airlock's environment", pid, bytes.TrimSpace(comm), id)
		}
	}
	t.Logf("%d processes of sandbox %s checked", len(pids), id)
}

// A sandbox's id is no secret (its supervisor's command line shows it),
// so its areas are kept from other users by the directory above them:
// neither another user nor one with the sandbox's own uid reads or writes
// a sandbox's workspace, /tmp or uploads from the host.
func TestSandboxAreasPrivate(t *testing.T) {
	si := sbCreate(t)
	defer airlock(nil, "sandbox", "rm", si.ID)
	if res, c := sbExec(t, si.ID, nil, "sh", "-c", "echo secret > /home/user/s && echo secret > /tmp/s"); res.ExitCode != 0 {
		t.Fatalf("writing the files: %+v %s", res, c.stderr)
	}
	dir := runner.SandboxDir(rootDir, si.ID)
	// The tests' root lies in private directories: let others through
	// them for now, as /var/lib/airlock lets them through.
	for d := rootDir; d != "/tmp" && d != "/"; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			os.Chmod(d, fi.Mode().Perm()|0o001)
			defer os.Chmod(d, fi.Mode().Perm())
		}
	}
	for _, p := range []string{"workspace/s", "tmp/s"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Fatalf("root does not see %s: %v", p, err)
		}
	}
	for _, uid := range []uint32{4242, 65534} {
		for _, c := range [][]string{
			{"cat", filepath.Join(dir, "workspace/s")},
			{"cat", filepath.Join(dir, "tmp/s")},
			{"touch", filepath.Join(dir, "workspace/planted")},
		} {
			cmd := exec.Command(c[0], c[1:]...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
			if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "Permission denied") {
				t.Errorf("uid %d: %v: %v %q; want permission denied", uid, c, err, out)
			}
		}
	}
	if fi, err := os.Stat(filepath.Dir(dir)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("%s: %v %v; want 0700", filepath.Dir(dir), fi.Mode(), err)
	}
}
