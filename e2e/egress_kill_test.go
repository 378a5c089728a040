//go:build e2e

package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/runner"
)

// downloadProbe reads its URL through the proxy to the end, and says how
// it ended, on stdout and in /tmp/download: "download complete N", or
// "download error TYPE after N" (an end before the Content-Length is an
// error, as curl and pip take it).
const downloadProbe = `
import sys, urllib.request
n = 0
try:
    with urllib.request.urlopen(sys.argv[1], timeout=60) as r:
        want = int(r.headers["Content-Length"])
        while True:
            b = r.read(65536)
            if not b:
                break
            n += len(b)
    outcome = "download complete %d" % n if n == want else "download error short after %d" % n
except Exception as e:
    outcome = "download error %s after %d" % (type(e).__name__, n)
open("/tmp/download", "w").write(outcome + "\n")
print(outcome)
`

// supervisorOf is the pid of sandbox id's supervisor, 0 when none runs.
func supervisorOf(id string) int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), "\x00sandbox\x00supervise\x00"+id+"\x00") {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			return pid
		}
	}
	return 0
}

// A long-lived sandbox's proxy lives in its supervisor. Killed (SIGKILL,
// by pid) while a program downloads through it, the program sees its
// download cut (the connection ends before its Content-Length) and its
// exec ends with its usual Result; the sandbox
// is left with no way out (a new request fails to connect); and after
// rm and reap no proxy, namespace or process of it is left.
func TestEgressProxyKilled(t *testing.T) {
	if engineName == "docker" {
		t.Skip("the docker engine refuses egress (TestEgressAllowHost)")
	}
	var sent atomic.Int64
	started := make(chan struct{}, 1)
	addr := serveOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/big" {
			fmt.Fprint(w, "small")
			return
		}
		// 100 MiB, slowly enough that the kill comes in the middle.
		w.Header().Set("Content-Length", strconv.Itoa(100<<20))
		chunk := make([]byte, 64<<10)
		for i := 0; i < 1600; i++ {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			if sent.Add(int64(len(chunk))) >= 1<<20 {
				select {
				case started <- struct{}{}:
				default:
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}), nil)

	si := sbCreate(t, "--allow-host", addr, "--timeout", "2m")
	t.Cleanup(func() { airlock(nil, "sandbox", "rm", si.ID) })
	pid := supervisorOf(si.ID)
	if pid == 0 {
		t.Fatalf("no supervisor of %s", si.ID)
	}

	type execDone struct {
		res runner.Result
		c   cliResult
	}
	done := make(chan execDone, 1)
	go func() {
		res, c := sbExec(t, si.ID, nil, "python3", "-c", downloadProbe, "http://"+addr+"/big")
		done <- execDone{res, c}
	}()
	select {
	case <-started:
	case d := <-done:
		t.Fatalf("the exec ended before the download was under way: %+v %s", d.res, d.c.stderr)
	case <-time.After(60 * time.Second):
		t.Fatal("the download did not start")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing the supervisor %d: %v", pid, err)
	}
	var d execDone
	select {
	case d = <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("the exec did not end after its proxy was killed")
	}
	out := string(d.res.Stdout.Head)
	t.Logf("the exec: reason %s, exit %d, %q; %d bytes sent", d.res.Reason, d.res.ExitCode, out, sent.Load())
	if d.res.Reason != runner.ReasonExited {
		t.Errorf("the exec after the proxy's kill: reason %s, exit %d, stderr %q; want the program's own end",
			d.res.Reason, d.res.ExitCode, d.c.stderr)
	}
	// Under gVisor the exec's stdio goes through the agent relay, which
	// is the supervisor too: killing it cuts the output of execs in
	// flight (the program exits 0, or 120 when Python cannot flush its
	// stdout), and their Results do not say so yet. The program's own
	// outcome, in its file, is checked below. Under runc the output is
	// the program's own.
	if isolationName != "gvisor" && (d.res.ExitCode != 0 || !strings.Contains(out, "download error")) {
		t.Errorf("the exec: exit %d, %q; want 0 and the program's connection error", d.res.ExitCode, out)
	}
	// What the program itself wrote, whatever its exec's Result says.
	var wrote string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		res, _ := sbExec(t, si.ID, nil, "cat", "/tmp/download")
		if wrote = string(res.Stdout.Head); wrote != "" {
			break
		}
	}
	t.Logf("the program wrote %q", wrote)
	if !strings.HasPrefix(wrote, "download error") {
		t.Errorf("the program's own outcome: %q; want a connection error", wrote)
	}
	if sent.Load() >= 100<<20 {
		t.Error("the whole download was sent: the kill came too late to test anything")
	}

	// No way out is left: nothing listens where the proxy was.
	res, _ := sbExec(t, si.ID, nil, "python3", "-c", probeGets, "http://"+addr+"/")
	if out := string(res.Stdout.Head); !strings.Contains(out, "get http://"+addr+"/ error") {
		t.Errorf("a request after the proxy's kill: %q; want a connection error", out)
	}

	if c := airlock(nil, "sandbox", "rm", si.ID); c.code != 0 {
		t.Errorf("sandbox rm: exit %d: %s", c.code, c.stderr)
	}
	if c := airlock(nil, "reap"); c.code != 0 {
		t.Errorf("reap: exit %d: %s", c.code, c.stderr)
	}
	waitGone(t, si.ID, 10*time.Second)
	if left := netnsLeft(t); len(left) > 0 {
		t.Errorf("network namespaces left: %v", left)
	}
	if links, err := net.Interfaces(); err == nil {
		for _, l := range links {
			if strings.HasPrefix(l.Name, "veth") {
				t.Errorf("an interface left on the host: %s", l.Name)
			}
		}
	}
	noSandboxLeft(t)
}
