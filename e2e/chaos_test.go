//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/proc"
	"github.com/airlock-sandbox/airlock/runner"
)

// chaosRun is one `airlock run --json` started in the background.
type chaosRun struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

func startRuns(t *testing.T, n int, script string) []*chaosRun {
	t.Helper()
	var runs []*chaosRun
	for i := 0; i < n; i++ {
		r := &chaosRun{}
		r.cmd = exec.Command(airlockBin, "--root", rootDir, "run", "--json", "--engine", engineName, "--isolation", isolationName,
			"--image", busybox, "--", "sh", "-c", script)
		r.cmd.Stdout = &r.out
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	t.Cleanup(func() {
		for _, r := range runs {
			if r.cmd.ProcessState == nil {
				r.cmd.Process.Kill()
				r.cmd.Wait()
			}
		}
	})
	return runs
}

// runningIDs lists the runs the state store has as running.
func runningIDs() []string {
	var ids []string
	files, _ := filepath.Glob(filepath.Join(rootDir, "state", "*.json"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		var rec struct{ ID, State string }
		if json.Unmarshal(b, &rec) == nil && rec.State == "running" {
			ids = append(ids, rec.ID)
		}
	}
	return ids
}

// waitRunning waits until n runs are running and have had time to reach
// their program.
func waitRunning(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if ids := runningIDs(); len(ids) >= n {
			time.Sleep(time.Second)
			return ids
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%d runs never got to running (state: %v)", n, runningIDs())
	return nil
}

// finish waits for a run's airlock process and decodes its result.
func (r *chaosRun) finish(t *testing.T) (runner.Result, int) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		r.cmd.Process.Kill()
		<-done
		t.Fatalf("airlock did not return 90 s after the chaos")
	}
	var res runner.Result
	if err := json.Unmarshal(r.out.Bytes(), &res); err != nil {
		t.Fatalf("result is not JSON (%v): %q", err, r.out.String())
	}
	return res, r.cmd.ProcessState.ExitCode()
}

// failedInAudit reports whether the audit log has run id moving to failed
// with an error.
func failedInAudit(t *testing.T, id string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(rootDir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev map[string]any
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev["run_id"] == id && ev["event"] == "transition" && ev["to"] == "failed" {
			e, _ := ev["error"].(string)
			return e
		}
	}
	return ""
}

// sandboxLogDirs lists the per-sandbox runsc logs that dockerd's runtime
// writes for airlock: each must be gone once its run is.
func sandboxLogDirs(t *testing.T) []string {
	info, err := dockerCli.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range info.Runtimes["airlock-runsc"].Args {
		if v, ok := strings.CutPrefix(a, "--debug-log="); ok && strings.Contains(v, "%ID%") {
			dirs, _ := filepath.Glob(strings.ReplaceAll(filepath.Clean(v), "%ID%", "*"))
			return dirs
		}
	}
	return nil
}

// reapAndCheck runs `airlock reap`, then checks every kind of resource
// the runs ids held, listing each figure.
func reapAndCheck(t *testing.T, ids []string) cliResult {
	t.Helper()
	t.Logf("before reap: %s", figures())
	c := airlock(nil, "reap")
	if c.code != 0 {
		t.Errorf("reap: exit %d %s %s", c.code, c.stdout, c.stderr)
	}
	t.Logf("after reap: %s, sandbox logs %d", figures(), len(sandboxLogDirs(t)))
	if left := sandboxes(); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	if dirs, _ := os.ReadDir(filepath.Join(rootDir, "runs")); len(dirs) > 0 {
		t.Errorf("%d run directories left", len(dirs))
	}
	if m := mountsUnderRoot(); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	if d := sandboxLogDirs(t); len(d) > 0 {
		t.Errorf("sandbox logs left: %v", d)
	}
	for _, id := range ids {
		if procs := liveProcsIn(id); len(procs) > 0 {
			t.Errorf("processes of %s left: %v", id, procs)
		}
	}
	return c
}

// liveProcsIn is hostProcsIn without zombies, after a moment for the dying:
// a sandbox process whose runtime parent was killed is reparented to the
// host's init, which reaps it in its own time; a zombie holds nothing.
func liveProcsIn(id string) []string {
	var live []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		live = live[:0]
		for _, p := range hostProcsIn(id) {
			stat, err := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
			if err != nil {
				continue // gone
			}
			if st, err := proc.ParseStat(stat); err == nil && st.Alive() {
				live = append(live, fmt.Sprintf("%s (%d (%s) %c)", p, st.Pid, st.Comm, st.State))
			}
		}
		if len(live) == 0 || time.Now().After(deadline) {
			return live
		}
	}
}

// restartDockerd stops the dockerd that `make setup` started (by the pid in
// its pid file) and starts it again the same way, waiting until it answers.
func restartDockerd(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile("/var/run/docker.pid")
	if err != nil {
		t.Fatalf("no dockerd pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("stopping dockerd %d: %v", pid, err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("dockerd %d did not stop in 60 s", pid)
		}
		time.Sleep(100 * time.Millisecond)
	}
	logf, err := os.OpenFile("/var/log/airlock-dockerd.log", os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	// dockerd outlives the test: it keeps none of the test's inherited
	// descriptors (a lock the test runs under).
	if err := proc.CloseInherited(); err != nil {
		t.Fatal(err)
	}
	d := exec.Command("dockerd")
	d.Stdout, d.Stderr = logf, logf
	d.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := d.Start(); err != nil {
		t.Fatalf("starting dockerd: %v", err)
	}
	go d.Wait() // it outlives the test; reap it if it ever exits
	for deadline = time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if _, err := dockerCli.Ping(context.Background()); err == nil {
			return
		}
	}
	t.Fatal("dockerd did not answer 60 s after its restart")
}

// TestDockerdRestartMidRun restarts dockerd while three runs are in their
// program. On the docker engine each run ends failed, with an error that
// names dockerd; the daemonless oci engine does not notice. Either way,
// nothing is left after a reap.
func TestDockerdRestartMidRun(t *testing.T) {
	const n = 3
	runs := startRuns(t, n, "echo started; sleep 5; echo finished")
	ids := waitRunning(t, n)
	restartDockerd(t)
	for _, r := range runs {
		res, code := r.finish(t)
		if engineName == "oci" {
			if res.Reason != runner.ReasonExited || code != 0 || string(res.Stdout.Head) != "started\nfinished\n" {
				t.Errorf("oci run %s: reason %s exit %d stdout %q error %q: a dockerd restart must not touch it", res.ID, res.Reason, code, res.Stdout.Head, res.Error)
			}
			continue
		}
		if code != 69 || res.Reason != runner.ReasonError || res.ErrorKind != "sandbox_lost" || !strings.Contains(res.Error, "dockerd") {
			t.Errorf("run %s: exit %d reason %s kind %q error %q; want 69, error, sandbox_lost, naming dockerd", res.ID, code, res.Reason, res.ErrorKind, res.Error)
		}
		if e := failedInAudit(t, res.ID); !strings.Contains(e, "sandbox lost") {
			t.Errorf("run %s: the audit log has no failed transition with the error (got %q)", res.ID, e)
		}
	}
	reapAndCheck(t, ids)
}

// sandboxProcess finds the process that holds the run's sandbox: under
// gVisor the runsc sandbox (the Sentry), in the run's cgroup; under runc,
// which has no sandbox process, the runtime process that supervises the
// program (runc run, or dockerd's containerd shim).
func sandboxProcess(t *testing.T, id string) int {
	t.Helper()
	cmdline := func(pid int) string {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		return string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
	}
	if isolationName == "gvisor" {
		var found int
		for _, dir := range []string{"/sys/fs/cgroup/pids/airlock/" + id, "/sys/fs/cgroup/airlock/" + id} {
			filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
				if err != nil || e.Name() != "cgroup.procs" {
					return nil
				}
				b, _ := os.ReadFile(p)
				for _, f := range strings.Fields(string(b)) {
					if pid, _ := strconv.Atoi(f); pid > 0 && strings.HasPrefix(cmdline(pid), "runsc-sandbox ") {
						found = pid
					}
				}
				return nil
			})
		}
		if found == 0 {
			t.Fatalf("no runsc sandbox process in run %s's cgroup", id)
		}
		return found
	}
	want := "airlock-" + id
	if engineName == "docker" {
		c, err := dockerCli.ContainerInspect(context.Background(), want)
		if err != nil {
			t.Fatal(err)
		}
		want = "containerd-shim-runc-v2 -namespace moby -id " + c.ID
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if cl := cmdline(pid); strings.Contains(cl, want) && (engineName == "docker" || strings.Contains(cl, " run ")) {
			return pid
		}
	}
	t.Fatalf("no runtime process for run %s", id)
	return 0
}

// TestSandboxKilledFromHost kills a running sandbox's process with SIGKILL
// from the host. The run ends failed with an error that says so, not as
// the program's exit 137, and nothing is left after a reap.
func TestSandboxKilledFromHost(t *testing.T) {
	runs := startRuns(t, 1, "echo started; sleep 600")
	ids := waitRunning(t, 1)
	pid := sandboxProcess(t, ids[0])
	t.Logf("killing pid %d: %s", pid, func() string {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		return strings.TrimSpace(string(b))
	}())
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	res, code := runs[0].finish(t)
	if engineName == "docker" && isolationName == "seccomp" {
		// containerd reports the program of a killed shim as exit 137 and
		// leaves no trace of why: airlock cannot tell it from the program's
		// own SIGKILL (SECURITY.md). It must not be reported as success.
		if code == 0 || res.Reason == runner.ReasonExited && res.ExitCode != 137 {
			t.Errorf("exit %d reason %s code %d", code, res.Reason, res.ExitCode)
		}
	} else {
		if code != 69 || res.Reason != runner.ReasonError || res.ErrorKind != "sandbox_lost" || !strings.Contains(res.Error, "from outside airlock") {
			t.Errorf("exit %d reason %s kind %q error %q; want 69, error, sandbox_lost, killed from outside airlock", code, res.Reason, res.ErrorKind, res.Error)
		}
		if e := failedInAudit(t, res.ID); !strings.Contains(e, "sandbox lost") {
			t.Errorf("the audit log has no failed transition with the error (got %q)", e)
		}
	}
	if string(res.Stdout.Head) != "started\n" {
		t.Errorf("output before the kill was lost: %q", res.Stdout.Head)
	}
	reapAndCheck(t, ids)
}

// TestKillTwiceAtOnce destroys a running sandbox from two shells at once:
// both succeed, its resources are freed once (one destroy event), the
// owner reports reason destroyed, and nothing is left.
func TestKillTwiceAtOnce(t *testing.T) {
	runs := startRuns(t, 1, "echo started; sleep 600")
	ids := waitRunning(t, 1)
	kills := make(chan cliResult, 2)
	for i := 0; i < 2; i++ {
		go func() { kills <- airlock(nil, "kill", ids[0]) }()
	}
	for i := 0; i < 2; i++ {
		if c := <-kills; c.code != 0 || !strings.Contains(c.stdout, ids[0]) {
			t.Errorf("kill: exit %d stdout %q stderr %q", c.code, c.stdout, c.stderr)
		}
	}
	res, code := runs[0].finish(t)
	if code != 130 || res.Reason != runner.ReasonDestroyed || string(res.Stdout.Head) != "started\n" {
		t.Errorf("owner: exit %d reason %s stdout %q error %q; want 130, destroyed, the output so far", code, res.Reason, res.Stdout.Head, res.Error)
	}
	destroys := 0
	f, _ := os.ReadFile(filepath.Join(rootDir, "audit.jsonl"))
	for _, line := range bytes.Split(f, []byte("\n")) {
		var ev map[string]any
		if json.Unmarshal(line, &ev) == nil && ev["run_id"] == ids[0] && ev["event"] == "destroy" {
			destroys++
		}
	}
	if destroys != 1 {
		t.Errorf("%d destroy events for %s; want exactly 1", destroys, ids[0])
	}
	if c := airlock(nil, "kill", ids[0]); c.code != 0 || !strings.Contains(c.stdout, "already gone") {
		t.Errorf("third kill: exit %d stdout %q stderr %q", c.code, c.stdout, c.stderr)
	}
	reapAndCheck(t, ids)
}
