//go:build e2e

package serve

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// fusionReply is what a test reads of a /run_code response.
type fusionReply struct {
	Status    string `json:"status"`
	Message   string `json:"message"`
	RunResult struct {
		Status         string
		Stdout, Stderr string
		ReturnCode     int      `json:"return_code"`
		ExecutionTime  *float64 `json:"execution_time"`
	} `json:"run_result"`
	Executor string `json:"executor_pod_name"`
}

// runCodeJob is what each pooled job prints, as one JSON line.
const runCodeJob = `import json, os, random, ssl, sys, tempfile, uuid
seen = [p for p in ("/tmp/marker", "/home/user/marker") if os.path.exists(p)]
run = sys.stdin.read().strip()
for p in ("/tmp/marker", "/home/user/marker"):
    open(p, "w").write(run)
# A job started outside the fork server may have no parent in the
# sandbox (an exec through the control socket): ppid 0.
server = open("/proc/%d/cmdline" % os.getppid(), "rb").read() if os.getppid() else b""
# The exec agent hands the job to the server itself: no client runs.
clients = []
for p in os.listdir("/proc"):
    try:
        if p.isdigit() and b"\0run-code\0" in open("/proc/%s/cmdline" % p, "rb").read():
            clients.append(p)
    except OSError:
        pass
print(json.dumps({
    "seen": seen, "run": run, "data": open("data.txt").read(),
    "random": repr(random.random()), "urandom": os.urandom(16).hex(),
    "uuid": str(uuid.uuid4()), "mktemp": tempfile.mktemp(), "openssl": ssl.RAND_bytes(16).hex(),
    "forked": b"airlock-run-code" in server, "preloaded": "json" in sys.modules and "decimal" in sys.modules,
    "main": __name__, "argv0": sys.argv[0], "cwd": os.getcwd(), "clients": clients,
}))
print("to stderr", file=sys.stderr)
`

// TestServeRunCodePool serves /run_code's python from a pool of a
// run-code template: 20 calls, each in a sandbox of its own restored
// with the fork server (its job a child of the server, handed over by the
// exec agent: no run-code client process runs), each seeing a
// fresh /tmp and workspace (no call sees another's marker), its own
// files and stdin, and distinct ids and random values (random, urandom,
// uuid4, tempfile names, OpenSSL's RAND_bytes); exit codes, SystemExit, signals and stderr come
// back; a timeout kills the job. Nothing is left behind (TestMain).
func TestServeRunCodePool(t *testing.T) {
	if engineName != "oci" || isolationName != "gvisor" {
		out, err := exec.Command(airlockBin, "--root", rootDir, "template", "create", "e2e-rc-refused", "--engine", engineName, "--isolation", isolationName, "--run-code", "python").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "gvisor") && !strings.Contains(string(out), "oci") {
			t.Fatalf("template create --run-code on %s/%s: %v: %s; want a refusal naming what has snapshots", engineName, isolationName, err, out)
		}
		return
	}
	// ssl is imported ahead, so that OpenSSL's generator is in the snapshot.
	poolTemplate(t, "e2e-rc", "--run-code", "python", "--import", "json", "--import", "decimal", "--import", "ssl", "--timeout", "20s")
	s := startServer(t, "--run-code-template", "python=e2e-rc", "--pool-sandboxes", "e2e-rc=2")
	a := s.apis()[0]
	data := base64.StdEncoding.EncodeToString([]byte("request data\n"))
	seen := map[string]map[string]bool{}
	for i := range 20 {
		a.waitPooled(t, "refilled", atLeast(1))
		var r fusionReply
		in := fmt.Sprintf("run-%d\n", i)
		a.call(t, "POST", "/run_code", map[string]any{"code": runCodeJob, "language": "python", "stdin": in, "files": map[string]string{"data.txt": data}}, http.StatusOK, &r)
		if r.Status != "Success" || r.RunResult.ReturnCode != 0 || r.RunResult.Stderr != "to stderr\n" {
			t.Fatalf("call %d: %+v", i, r)
		}
		var got struct {
			Seen                             []string
			Run, Data, Random, Urandom, UUID string
			Mktemp, Main, Argv0, Cwd         string
			OpenSSL                          string `json:"openssl"`
			Forked, Preloaded                bool
			Clients                          []string
		}
		if err := json.Unmarshal([]byte(r.RunResult.Stdout), &got); err != nil {
			t.Fatalf("call %d printed %q: %v", i, r.RunResult.Stdout, err)
		}
		if len(got.Seen) > 0 || got.Run != fmt.Sprintf("run-%d", i) || got.Data != "request data\n" || !got.Forked || !got.Preloaded || len(got.Clients) > 0 ||
			got.Main != "__main__" || got.Argv0 != "/home/user/.airlock_main.py" || got.Cwd != "/home/user" {
			t.Fatalf("call %d: %+v", i, got)
		}
		for k, v := range map[string]string{"sandbox": r.Executor, "random": got.Random, "urandom": got.Urandom, "uuid": got.UUID, "mktemp": got.Mktemp, "openssl": got.OpenSSL} {
			if seen[k] == nil {
				seen[k] = map[string]bool{}
			}
			if v == "" || seen[k][v] {
				t.Fatalf("call %d: %s %q is empty or seen before", i, k, v)
			}
			seen[k][v] = true
		}
	}
	if st, _, b := a.do(t, "GET", "/metrics", nil); st != 200 || !strings.Contains(string(b), `airlock_pool_claims_total{template="sandboxes/e2e-rc"} 20`) {
		t.Errorf("/metrics does not count 20 claims: %s", grepLines(string(b), "airlock_pool_"))
	}

	for _, c := range []struct {
		code    string
		timeout float64
		status  string
		run     string
		exit    int
		stdout  string
		stderr  string
	}{
		{"import sys\nprint('out')\nsys.exit(3)", 10, "Failed", "Finished", 3, "out\n", ""},
		{"raise SystemExit('bye')", 10, "Failed", "Finished", 1, "", "bye\n"},
		{"def f():\n    1/0\nf()", 10, "Failed", "Finished", 1, "", "ZeroDivisionError: division by zero"},
		{"import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", 10, "Failed", "Finished", 137, "", ""},
		{"import time\nprint('started', flush=True)\ntime.sleep(60)", 1, "Failed", "TimeLimitExceeded", -1, "", ""},
	} {
		a.waitPooled(t, "refilled", atLeast(1))
		var r fusionReply
		begin := time.Now()
		a.call(t, "POST", "/run_code", map[string]any{"code": c.code, "language": "python", "run_timeout": c.timeout}, http.StatusOK, &r)
		took := time.Since(begin)
		if r.Status != c.status || r.RunResult.Status != c.run || (c.exit >= 0 && r.RunResult.ReturnCode != c.exit) ||
			(c.stdout != "" && r.RunResult.Stdout != c.stdout) || !strings.Contains(r.RunResult.Stderr, c.stderr) || strings.Contains(r.RunResult.Stderr, "runpy") {
			t.Errorf("%q: %+v", c.code, r)
		}
		if c.run == "TimeLimitExceeded" && took > 15*time.Second {
			t.Errorf("the timed-out job held its request for %v", took)
		}
	}

	// A request asking more than the template gives starts cold, with
	// the same answer.
	var r fusionReply
	a.call(t, "POST", "/run_code", map[string]any{"code": "import sys; print('json' in sys.modules and 'decimal' in sys.modules)", "language": "python", "run_timeout": 30}, http.StatusOK, &r)
	if r.Status != "Success" || r.RunResult.Stdout != "False\n" {
		t.Errorf("a request over the template's timeout: %+v; want it served cold", r)
	}
}

// TestServeRunCodeRefusals: serve refuses to start with a
// --run-code-template that cannot serve, naming the problem and the fix.
func TestServeRunCodeRefusals(t *testing.T) {
	poolTemplate(t, "e2e-rc-plain")
	for _, c := range []struct {
		flag, want string
	}{
		{"python=e2e-rc-none", `no template "e2e-rc-none"`},
		{"python=e2e-rc-plain", `has no snapshot`},
		{"bash=e2e-rc-plain", `only python has a fork server`},
	} {
		out, err := exec.Command(airlockBin, "--root", rootDir, "serve", "--socket", t.TempDir()+"/s.sock", "--run-code-template", c.flag).CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() == 0 || !strings.Contains(string(out), c.want) {
			t.Errorf("serve --run-code-template %s: %v: %s; want a refusal saying %q", c.flag, err, out, c.want)
		}
	}
}

// TestServeMCPRunCodePool: under --run-code-template, MCP's run_code of
// python is served from the run-code template's pool as /run_code is:
// each call's job is a child of the fork server, the template's modules
// loaded, in a sandbox of its own (a claim each, no call sees another's
// marker), with its stdin, exit code and timeout; one asking a longer
// timeout than the template's starts cold. run_code's result keeps its
// shape (no sandbox_id: the sandbox is gone with its job).
func TestServeMCPRunCodePool(t *testing.T) {
	gvisorOnly(t)
	poolTemplate(t, "e2e-rc-mcp", "--run-code", "python", "--import", "decimal", "--timeout", "20s")
	s := startServer(t, "--run-code-template", "python=e2e-rc-mcp", "--pool-sandboxes", "e2e-rc-mcp=2")
	a := s.apis()[0]
	cs := s.mcpClient(t)
	const job = `import os, sys
seen = os.path.exists("/tmp/marker")
open("/tmp/marker", "w").write("x")
# A job started outside the fork server may have no parent in the
# sandbox (an exec through the control socket): ppid 0.
server = open("/proc/%d/cmdline" % os.getppid(), "rb").read() if os.getppid() else b""
print(b"airlock-run-code" in server, "decimal" in sys.modules, seen, sys.stdin.read().strip())
`
	claims := func(want int) {
		t.Helper()
		if st, _, b := a.do(t, "GET", "/metrics", nil); st != 200 || !strings.Contains(string(b), fmt.Sprintf(`airlock_pool_claims_total{template="sandboxes/e2e-rc-mcp"} %d`, want)) {
			t.Fatalf("/metrics does not count %d claims: %s", want, grepLines(string(b), "airlock_pool_"))
		}
	}
	call := func(args map[string]any) map[string]any {
		t.Helper()
		begin := time.Now()
		res, text := tool(t, cs, "run_code", args)
		out, _ := res.StructuredContent.(map[string]any)
		if res.IsError || out == nil {
			t.Fatalf("run_code %v: %s", args, text)
		}
		if _, ok := out["sandbox_id"]; ok {
			t.Errorf("run_code names the sandbox it ran in: %v", out)
		}
		t.Logf("run_code took %v", time.Since(begin))
		return out
	}
	for i := range 3 {
		a.waitPooled(t, "refilled", atLeast(1))
		out := call(map[string]any{"language": "python", "code": job, "stdin": fmt.Sprintf("call-%d\n", i)})
		if out["reason"] != "exited" || out["exit_code"] != 0.0 || out["stdout"] != fmt.Sprintf("True True False call-%d\n", i) || out["stderr"] != "" {
			t.Fatalf("call %d: %v; want it forked by the fork server, decimal loaded, no marker seen", i, out)
		}
	}
	claims(3)
	a.waitPooled(t, "refilled", atLeast(1))
	if out := call(map[string]any{"language": "python", "code": "import sys\nprint('out')\nsys.exit(3)"}); out["reason"] != "exited" || out["exit_code"] != 3.0 || out["stdout"] != "out\n" {
		t.Errorf("an exit code from the pool: %v", out)
	}
	a.waitPooled(t, "refilled", atLeast(1))
	begin := time.Now()
	if out := call(map[string]any{"language": "python", "code": "import time\ntime.sleep(60)", "timeout_s": 1}); out["reason"] != "timeout" || time.Since(begin) > 15*time.Second {
		t.Errorf("a timeout from the pool: %v after %v", out, time.Since(begin))
	}
	claims(5)
	// Over the template's 20s: cold, in the default policy, the same shape.
	if out := call(map[string]any{"language": "python", "code": job, "stdin": "cold\n", "timeout_s": 30}); out["reason"] != "exited" || out["stdout"] != "False False False cold\n" {
		t.Errorf("a call over the template's timeout: %v; want it served cold", out)
	}
	claims(5)
}
