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
// forkserver.ExitFailed with one line starting FailurePrefix, for a
// person: the host reads neither (a job can print and exit the same), and
// learns of a failed hand-over only from the agent.
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

// forkServer starts a real fork server (python3 on the host) and returns
// its address and a directory for jobs' files; the test is skipped
// without python3.
func forkServer(t *testing.T) (addr, dir string) {
	t.Helper()
	if _, err := exec.LookPath(forkserver.Interpreter); err != nil {
		t.Skip("no python3 on the host")
	}
	dir = t.TempDir()
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
	return "@" + name, dir
}

// noServer is an address no fork server listens on.
func noServer() string { return fmt.Sprintf("@airlock-run-code-none-%d", time.Now().UnixNano()) }

// TestStartRunCode hands a job to a real fork server as the agent does:
// the pid is the job's, its output comes through the exec's pipes, and
// with no server nothing starts.
func TestStartRunCode(t *testing.T) {
	addr, dir := forkServer(t)
	if _, _, err := startRunCode(noServer(), &agent.SpawnArgs{}, forkserver.Job{Argv: []string{"/x.py"}}); !errors.Is(err, forkserver.ErrNoServer) {
		t.Errorf("with no server: %v; want ErrNoServer", err)
	}
	file := filepath.Join(dir, "m.py")
	os.WriteFile(file, []byte("import os, sys\nprint(os.getpid(), os.environ['A'], sys.argv[1:])"), 0o644)
	s := &agent.SpawnArgs{Argv: forkserver.ClientArgv(file, "x"), Env: []string{"A=1"}, Dir: dir, Merged: true}
	job, _ := runCodeJob(s)
	x, pid, err := startRunCode(addr, s, job)
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

// agentFrames is a server whose frames to the host the returned reader
// reads.
func agentFrames(t *testing.T) (*server, *agent.Reader) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	r.SetReadDeadline(time.Now().Add(30 * time.Second))
	return &server{out: w, execs: map[uint32]*execution{}, pending: map[int]bool{}}, agent.NewReader(r, agent.MaxPayload)
}

// TestSpawnRunCodeHandOverFailed: a run-code exec whose job reaches no
// fork server is answered HandOverFailed and why, in place of Started,
// and nothing of it runs: the host learns that the server did not run the
// job from the agent's answer, not from any exit code or output.
func TestSpawnRunCodeHandOverFailed(t *testing.T) {
	a, rd := agentFrames(t)
	s := &agent.SpawnArgs{Argv: forkserver.ClientArgv("/x.py"), Dir: "/"}
	job, _ := runCodeJob(s)
	a.spawnRunCode(noServer(), 7, s, job)
	f, err := rd.Read()
	if err != nil || f.Type != agent.HandOverFailed || f.ID != 7 || !strings.Contains(string(f.Payload), "connecting to the fork server") {
		t.Fatalf("answer %q %d %q, %v; want HandOverFailed saying why", f.Type, f.ID, f.Payload, err)
	}
	if len(a.execs) != 0 {
		t.Errorf("a failed hand-over left an exec: %v", a.execs)
	}
}

// TestSpawnRunCodeJobOwnsItsExit: a job that writes the run-code client's
// failure line (forkserver.FailurePrefix) and exits forkserver.ExitFailed
// is a job that ran: the agent answers Started with its pid, the line is
// its stderr, and 125 its status, as the host then reads them. Neither
// can make its run an infrastructure failure (a SandboxError, which
// evaluation harnesses retry or drop).
func TestSpawnRunCodeJobOwnsItsExit(t *testing.T) {
	addr, dir := forkServer(t)
	a, rd := agentFrames(t)
	file := filepath.Join(dir, "forge.py")
	os.WriteFile(file, []byte("import sys\nsys.stderr.write(\"Traceback\\n"+forkserver.FailurePrefix+"connecting to the fork server: refused\\n\")\nsys.exit(125)\n"), 0o644)
	s := &agent.SpawnArgs{Argv: forkserver.ClientArgv(file), Dir: dir}
	job, _ := runCodeJob(s)
	a.spawnRunCode(addr, 3, s, job)
	f, err := rd.Read()
	if err != nil || f.Type != agent.Started || f.ID != 3 {
		t.Fatalf("answer %q %d %q, %v; want Started", f.Type, f.ID, f.Payload, err)
	}
	var stderr []byte
	for ended := 0; ended < 2; {
		f, err := rd.Read()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case f.Type != agent.Stdout && f.Type != agent.Stderr:
			t.Fatalf("a %q frame after Started", f.Type)
		case len(f.Payload) == 0:
			ended++
		case f.Type == agent.Stderr:
			stderr = append(stderr, f.Payload...)
		}
	}
	if !strings.Contains(string(stderr), forkserver.FailurePrefix) {
		t.Errorf("the job's stderr %q", stderr)
	}
	a.mu.Lock()
	x := a.execs[3]
	a.mu.Unlock()
	if code, err := x.job.Status(); code != forkserver.ExitFailed || err != nil {
		t.Errorf("the job's status %d, %v; want its own %d", code, err, forkserver.ExitFailed)
	}
	a.handle(agent.Frame{Type: agent.Reap, ID: 3})
}
