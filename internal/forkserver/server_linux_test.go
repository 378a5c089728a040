package forkserver

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startServer runs Script on the host with python3, on a socket of the
// test's own, and waits for its ready file.
func startServer(t *testing.T) string {
	t.Helper()
	addr, _ := startServerPid(t)
	return addr
}

// startServerPid is startServer, and the server's pid.
func startServerPid(t *testing.T) (string, int) {
	t.Helper()
	if _, err := exec.LookPath(Interpreter); err != nil {
		t.Skip("no python3 on the host")
	}
	dir := t.TempDir()
	name := fmt.Sprintf("airlock-run-code-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, Interpreter, "-c", Script, "json")
	cmd.Env = append(os.Environ(), "AIRLOCK_READY_FILE="+filepath.Join(dir, "ready"), "AIRLOCK_RUN_CODE_SOCKET="+name)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			return "@" + name, cmd.Process.Pid
		}
		if time.Now().After(deadline) {
			t.Fatal("the fork server never became ready")
		}
	}
}

type job struct {
	code, stdout, stderr string
	exit                 int
}

func runJob(t *testing.T, addr, code string, stdin string, args ...string) job {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "main.py")
	if err := os.WriteFile(file, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	var pipes [3][2]*os.File
	for i := range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		pipes[i] = [2]*os.File{r, w}
	}
	go func() { io.WriteString(pipes[0][1], stdin); pipes[0][1].Close() }()
	outs := make([]chan string, 2)
	for i := range outs {
		outs[i] = make(chan string, 1)
		go func() {
			b, _ := io.ReadAll(pipes[i+1][0])
			pipes[i+1][0].Close()
			outs[i] <- string(b)
		}()
	}
	exit, err := Run(addr, Job{Argv: append([]string{file}, args...), Dir: dir, Env: []string{"JOBVAR=yes", "PATH=/usr/bin:/bin"}}, [3]*os.File{pipes[0][0], pipes[1][1], pipes[2][1]})
	// The job's ends. The readers read on to EOF, which comes once the
	// job's own copies are closed too: closing their ends here instead
	// would cut off what the job wrote and they had not read yet.
	pipes[0][0].Close()
	pipes[1][1].Close()
	pipes[2][1].Close()
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return job{code: code, stdout: <-outs[0], stderr: <-outs[1], exit: exit}
}

// TestServer runs jobs through the real fork server: stdio, argv, cwd
// and env arrive; exit codes, SystemExit, exceptions and signals come
// back; atexit runs, non-daemon threads are waited for and buffered
// output is flushed at the interpreter's exit; every job reseeds.
func TestServer(t *testing.T) {
	addr := startServer(t)
	for _, c := range []struct {
		code, stdin string
		args        []string
		exit        int
		stdout      string
		stderr      string
	}{
		{code: "print(1)", stdout: "1\n"},
		{code: "import sys, os\nprint(sys.argv[1:], os.environ['JOBVAR'], os.getcwd() == os.path.dirname(__file__), __name__)\nprint(input())", stdin: "in\n", args: []string{"a", "b"}, stdout: "['a', 'b'] yes True __main__\nin\n"},
		{code: "import sys\nprint('x', file=sys.stderr)\nsys.exit(3)", exit: 3, stderr: "x\n"},
		{code: "raise SystemExit('bye')", exit: 1, stderr: "bye\n"},
		{code: "import sys\nsys.exit()", exit: 0},
		{code: "def f():\n  1/0\nf()", exit: 1, stderr: "ZeroDivisionError"},
		{code: "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", exit: 137},
		{code: "import atexit\natexit.register(print, 'atexit')\nprint('main')", stdout: "main\natexit\n"},
		{code: "import json, sys\nprint('json' in sys.modules)", stdout: "True\n"},
		{code: "import threading, time\ndef f():\n  time.sleep(0.3)\n  print('thread')\nthreading.Thread(target=f).start()\nprint('main')", stdout: "main\nthread\n"},
		{code: "import sys\nsys.stdout.write('unflushed')\nsys.exit(258)", exit: 2, stdout: "unflushed"},
	} {
		got := runJob(t, addr, c.code, c.stdin, c.args...)
		if got.exit != c.exit || got.stdout != c.stdout || !strings.Contains(got.stderr, c.stderr) || (c.stderr == "" && got.stderr != "") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d, %q, %q", c.code, got.exit, got.stdout, got.stderr, c.exit, c.stdout, c.stderr)
		}
		if strings.Contains(got.stderr, "runpy") || strings.Contains(got.stderr, "<string>") {
			t.Errorf("%q: the traceback shows the server's frames: %s", c.code, got.stderr)
		}
	}
	seen := map[string]bool{}
	for range 5 {
		got := runJob(t, addr, "import random, tempfile, os\nprint(random.random(), tempfile.mktemp(), os.getpid())", "")
		if seen[got.stdout] {
			t.Errorf("two jobs printed %q", got.stdout)
		}
		seen[got.stdout] = true
	}
}

// startedAfter is a job that prints how many seconds after the server its
// process started.
const startedAfter = `import os
def start(p):
    s = open("/proc/%s/stat" % p).read()
    return int(s[s.rindex(")") + 2:].split()[19])
print((start("self") - start(os.getppid())) / os.sysconf("SC_CLK_TCK"))
`

// TestServerSpare: the first job runs in the child forked once the
// modules were imported (before a snapshot would be taken), the next in a
// child forked when it came. Each job prints how long after the server
// its process started.
func TestServerSpare(t *testing.T) {
	addr := startServer(t)
	time.Sleep(1500 * time.Millisecond)
	var after [2]float64
	for i := range after {
		got := runJob(t, addr, startedAfter, "")
		if _, err := fmt.Sscan(got.stdout, &after[i]); err != nil || got.exit != 0 {
			t.Fatalf("job %d: %+v", i, got)
		}
	}
	if after[0] >= 1 || after[1] < 1.5 {
		t.Errorf("the jobs' processes started %vs and %vs after the server; want the first before the jobs came (the spare), the second after", after[0], after[1])
	}
}

// TestServerKillsAbandonedJob closes a client's connection while its job
// runs: the server kills the job (and its process group) and serves the
// next one.
func TestServerKillsAbandonedJob(t *testing.T) {
	addr := startServer(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	file := filepath.Join(dir, "main.py")
	os.WriteFile(file, []byte(fmt.Sprintf("import os, time\nopen(%q, 'w').write(str(os.getpid()))\ntime.sleep(60)", pidFile)), 0o644)
	null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer null.Close()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"argv":[%q],"dir":%q,"env":[]}`, file, dir)
	msg := append([]byte{0, 0, 0, byte(len(body))}, body...)
	fd := int(null.Fd())
	if _, _, err := c.WriteMsgUnix(msg, unixRights(fd, fd, fd), nil); err != nil {
		t.Fatal(err)
	}
	var pid int
	for deadline := time.Now().Add(10 * time.Second); pid == 0; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile(pidFile)
		fmt.Sscan(string(b), &pid)
		if time.Now().After(deadline) {
			t.Fatal("the job never started")
		}
	}
	c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err != nil || strings.Contains(string(b), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the abandoned job still runs")
		}
	}
	if got := runJob(t, addr, "print('next')", ""); got.stdout != "next\n" {
		t.Errorf("the next job: %+v", got)
	}
}

func unixRights(fds ...int) []byte { return syscall.UnixRights(fds...) }

// TestRunNoServer: a socket nobody listens on is an error after DialWait,
// not a hang, and no job is handed over.
func TestRunNoServer(t *testing.T) {
	null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer null.Close()
	begin := time.Now()
	_, err := Run(fmt.Sprintf("@airlock-run-code-none-%d", time.Now().UnixNano()), Job{Argv: []string{"/x.py"}}, [3]*os.File{null, null, null})
	if err == nil || !strings.Contains(err.Error(), "connecting to the fork server") || !strings.Contains(err.Error(), "no socket listens on @airlock-run-code-none-") ||
		time.Since(begin) < DialWait || time.Since(begin) > DialWait+time.Second {
		t.Errorf("Run with no server: %v after %v", err, time.Since(begin))
	}
}

// TestDiagnose: a failed dial's error tells a listener from none, and
// names the fork server processes that live.
func TestDiagnose(t *testing.T) {
	addr := startServer(t)
	if d := diagnose(addr); !strings.Contains(d, "a socket listens on "+addr) || !strings.Contains(d, "fork server processes (pid state): ") {
		t.Errorf("with a server: %q", d)
	}
	none := addr + "-none"
	if d := diagnose(none); !strings.Contains(d, "no socket listens on "+none) {
		t.Errorf("with none: %q", d)
	}
	// A bound socket that does not listen is not a listener.
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: none, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if d := diagnose(none); !strings.Contains(d, "no socket listens on "+none) {
		t.Errorf("with a datagram socket bound: %q", d)
	}
}

// TestServerReapsAfterClient: Start returns the job's own pid, and the
// job stays a zombie, waitable, after its status has come back, until its
// client closes the connection: the exec agent's host waits for that pid.
func TestServerReapsAfterClient(t *testing.T) {
	addr := startServer(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "main.py")
	os.WriteFile(file, []byte("import os\nprint(os.getpid())\nraise SystemExit(5)"), 0o644)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer null.Close()
	c, pid, err := Start(addr, DialWait, Job{Argv: []string{file}, Dir: dir}, [3]int{int(null.Fd()), int(w.Fd()), int(null.Fd())})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	if strings.TrimSpace(string(out)) != fmt.Sprint(pid) {
		t.Errorf("Start gave pid %d; the job printed %q", pid, out)
	}
	if code, err := c.Status(); code != 5 || err != nil {
		t.Fatalf("Status = %d, %v; want 5", code, err)
	}
	stat := fmt.Sprintf("/proc/%d/stat", pid)
	if b, err := os.ReadFile(stat); err != nil || !strings.Contains(string(b), ") Z ") {
		t.Errorf("with its client still connected, the job is %q (%v); want a zombie", b, err)
	}
	c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(stat); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the job was not reaped once its client closed")
		}
	}
}

// TestServerPrime: a prime before any job has the spare touch what it
// holds and answers once it is done; the first job still runs in the
// spare, and a prime with no spare left fails.
func TestServerPrime(t *testing.T) {
	addr, server := startServerPid(t)
	time.Sleep(1500 * time.Millisecond)
	null, _ := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	defer null.Close()
	stdio := [3]*os.File{null, null, null}
	// The spare is the server's one child; what it has written since the
	// fork is its private memory.
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", server, server))
	var spare int
	if _, serr := fmt.Sscan(string(kids), &spare); err != nil || serr != nil {
		t.Fatalf("the server's children: %q, %v", kids, err)
	}
	dirty := func() int {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", spare))
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			var kb int
			if _, err := fmt.Sscanf(line, "Private_Dirty: %d kB", &kb); err == nil {
				return kb
			}
		}
		t.Fatalf("no Private_Dirty in %s", b)
		return 0
	}
	before := dirty()
	if err := Prime(addr, stdio); err != nil {
		t.Fatalf("Prime: %v", err)
	}
	if after := dirty(); after < before+2048 {
		t.Errorf("the spare's private memory went from %d to %d kB over the prime; want the objects it holds copied", before, after)
	}
	got := runJob(t, addr, startedAfter, "")
	var after float64
	if _, err := fmt.Sscan(got.stdout, &after); err != nil || got.exit != 0 || after >= 1 {
		t.Errorf("the first job after a prime: %+v; want it in the spare, started before the jobs came", got)
	}
	if err := Prime(addr, stdio); err == nil || !strings.Contains(err.Error(), "no spare") {
		t.Errorf("Prime after the spare took a job: %v; want an error saying there is no spare", err)
	}
	if got := runJob(t, addr, "print('next')", ""); got.stdout != "next\n" {
		t.Errorf("a job after a refused prime: %+v", got)
	}
}

// TestServerJobEnd: a job ends without the teardown of the server's
// imports (end in python.py), yet as python3 FILE would for what it
// made: files it left open are flushed, a gzip stream it left open is
// finished, a file held only by a cycle with its globals is flushed, C's
// buffered stdout is written, atexit functions run once, and the job's
// objects are finalized after them.
func TestServerJobEnd(t *testing.T) {
	addr := startServer(t)
	dir := t.TempDir()
	for _, c := range []struct {
		name, code, stdout, file, content string
		exit                              int
	}{
		{name: "open file", code: "f = open(OUT, 'w')\nf.write('plain')", file: "plain.txt", content: "plain"},
		{name: "after sys.exit", code: "import sys\nf = open(OUT, 'w')\nf.write('exited')\nsys.exit(4)", file: "exit.txt", content: "exited", exit: 4},
		{name: "a local at sys.exit", code: "import sys\ndef f():\n  g = open(OUT, 'w')\n  g.write('local')\n  sys.exit(5)\nf()", file: "local.txt", content: "local", exit: 5},
		{name: "in a cycle", code: "def keep():\n  return f\nf = open(OUT, 'w')\nf.write('cycle')", file: "cycle.txt", content: "cycle"},
		{name: "gzip", code: "import gzip\nz = gzip.open(OUT, 'wt')\nz.write('zipped')", file: "z.gz", content: "zipped"},
		{name: "C stdio", code: "import ctypes\nctypes.CDLL(None).printf(b'from C\\n')", stdout: "from C\n"},
		{name: "stdout closed", code: "import sys\nprint('gone')\nsys.stdout.close()\nsys.stdout = None", stdout: "gone\n"},
		{name: "finalizers after atexit", code: "import atexit\nclass D:\n  def __del__(self):\n    print('del')\nd = D()\natexit.register(print, 'atexit')", stdout: "atexit\ndel\n"},
	} {
		out := filepath.Join(dir, c.file)
		got := runJob(t, addr, fmt.Sprintf("OUT = %q\n%s\n", out, c.code), "")
		if got.exit != c.exit || got.stdout != c.stdout || got.stderr != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d, stdout %q", c.name, got.exit, got.stdout, got.stderr, c.exit, c.stdout)
		}
		if c.file == "" {
			continue
		}
		b, err := os.ReadFile(out)
		if err == nil && strings.HasSuffix(c.file, ".gz") {
			b, err = gunzip(b)
		}
		if err != nil || string(b) != c.content {
			t.Errorf("%s: the job's file holds %q (%v); want %q", c.name, b, err, c.content)
		}
	}
}

func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}
