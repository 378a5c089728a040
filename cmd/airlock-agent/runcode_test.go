package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/forkserver"
)

// TestRunCodeNoServer: with no fork server the client exits
// forkserver.ExitFailed with one line starting FailurePrefix, which is how
// the host tells it from the job's own status.
func TestRunCodeNoServer(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	var stderr bytes.Buffer
	code := runCode(fmt.Sprintf("@airlock-run-code-none-%d", time.Now().UnixNano()), []string{"/x.py"}, [3]*os.File{null, null, null}, &stderr)
	if code != forkserver.ExitFailed || !strings.HasPrefix(stderr.String(), forkserver.FailurePrefix) || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("runCode with no server: exit %d, stderr %q", code, stderr.String())
	}
}

// TestRunCodeJob: only the client's own argv is taken for a job.
func TestRunCodeJob(t *testing.T) {
	env := []string{"A=1"}
	job, ok := runCodeJob(&agent.SpawnArgs{Argv: []string{agent.Path, "run-code", "--", "/m.py", "x"}, Env: env, Dir: "/w"})
	if !ok || strings.Join(job.Argv, " ") != "/m.py x" || job.Dir != "/w" || len(job.Env) != 1 {
		t.Errorf("the client's argv: %+v, %v", job, ok)
	}
	for _, argv := range [][]string{
		{agent.Path, "run-code", "/m.py"},
		{agent.Path, "run-code", "--"},
		{"airlock-agent", "run-code", "--", "/m.py"},
		{agent.Path, "spawn", "--", "/m.py"},
		{"python3", "/m.py"},
	} {
		if _, ok := runCodeJob(&agent.SpawnArgs{Argv: argv}); ok {
			t.Errorf("%q taken for a run-code job", argv)
		}
	}
}

// TestStartRunCode hands a job to a real fork server (python3 on the
// host) as the agent does: the pid is the job's, its output comes
// through the exec's pipes, and with no server nothing starts.
func TestStartRunCode(t *testing.T) {
	if _, err := exec.LookPath(forkserver.Interpreter); err != nil {
		t.Skip("no python3 on the host")
	}
	if _, _, err := startRunCode(fmt.Sprintf("@airlock-run-code-none-%d", time.Now().UnixNano()), &agent.SpawnArgs{}, forkserver.Job{Argv: []string{"/x.py"}}); !errors.Is(err, forkserver.ErrNoServer) {
		t.Errorf("with no server: %v; want ErrNoServer", err)
	}
	dir := t.TempDir()
	name := fmt.Sprintf("airlock-run-code-agent-test-%d", time.Now().UnixNano())
	cmd := exec.Command(forkserver.Interpreter, "-c", forkserver.Script)
	cmd.Env = append(os.Environ(), "AIRLOCK_READY_FILE="+filepath.Join(dir, "ready"), "AIRLOCK_RUN_CODE_SOCKET="+name)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the fork server never became ready")
		}
	}
	file := filepath.Join(dir, "m.py")
	os.WriteFile(file, []byte("import os, sys\nprint(os.getpid(), os.environ['A'], sys.argv[1:])"), 0o644)
	s := &agent.SpawnArgs{Argv: forkserver.ClientArgv(file, "x"), Env: []string{"A=1"}, Dir: dir, Merged: true}
	job, _ := runCodeJob(s)
	x, pid, err := startRunCode("@"+name, s, job)
	if err != nil {
		t.Fatal(err)
	}
	defer x.close()
	out, _ := io.ReadAll(x.outs[0].r)
	if want := fmt.Sprintf("%d 1 ['x']\n", pid); string(out) != want || len(x.outs) != 1 {
		t.Errorf("the job printed %q; want %q", out, want)
	}
	if code, err := x.job.Status(); code != 0 || err != nil {
		t.Errorf("status %d, %v", code, err)
	}
}
