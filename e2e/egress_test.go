//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/e2etest"
	"github.com/airlock-sandbox/airlock/internal/netns"
	"github.com/airlock-sandbox/airlock/runner"
)

// probeGets is the start of a probe: a request to each URL of its first
// argument through the proxy the environment names (redirects followed,
// as clients do), printing the status and body, or the error.
const probeGets = `
import os, socket, struct, sys, urllib.request, urllib.error
for url in sys.argv[1].split(","):
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            print("get", url, r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        print("get", url, e.code, e.read().decode().strip())
    except Exception as e:
        print("get", url, "error", type(e).__name__)
`

// egressProbe is the sandbox's side: a request to each URL through the
// proxy the environment names (the status, or the error), then a direct
// connection to each address, which must fail. Only IP literals: nothing
// is resolved.
const egressProbe = probeGets + `
print("proxy", os.environ.get("HTTP_PROXY"), os.environ.get("HTTPS_PROXY"), repr(os.environ.get("NO_PROXY")))
for addr in sys.argv[2].split(","):
    host, port = addr.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        print("dial", addr, "connected")
    except OSError as e:
        print("dial", addr, "failed")
`

func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Fatalf("address %q", addr)
	}
	return n
}

// egressRecords are the audit log's egress events of sandbox id.
func egressRecords(t *testing.T, id string) []map[string]any {
	t.Helper()
	f, err := os.Open(filepath.Join(rootDir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev map[string]any
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev["event"] == "egress" && ev["sandbox_id"] == id {
			out = append(out, ev)
		}
	}
	return out
}

// checkEgress checks a probe's output and its sandbox's audit records:
// the allowed upstream answered through the proxy, the other was refused
// with 403, every direct connection failed, and each request is one
// record.
func checkEgress(t *testing.T, id, out string, allowed, other int) {
	t.Helper()
	proxy := "http://" + net.JoinHostPort(netns.ProxyAddr, "3128")
	for _, want := range []string{
		fmt.Sprintf("proxy %s %s ''", proxy, proxy),
		fmt.Sprintf("get http://127.0.0.1:%d/ 200 upstream says hi", allowed),
		fmt.Sprintf("get http://127.0.0.1:%d/ 403 airlock egress:", other),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the sandbox's output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "connected") {
		t.Errorf("a direct connection from the sandbox succeeded:\n%s", out)
	}
	var ok, refused bool
	for _, ev := range egressRecords(t, id) {
		port := int(ev["port"].(float64))
		switch {
		case port == allowed && ev["allowed"] == true && ev["host"] == "127.0.0.1" && ev["status"] == float64(200):
			ok = true
		case port == other && ev["allowed"] == false:
			refused = true
		default:
			t.Errorf("an unexpected egress record: %v", ev)
		}
	}
	if !ok || !refused {
		t.Errorf("the audit log lacks a record (allowed %v, refused %v): %v", ok, refused, egressRecords(t, id))
	}
}

// netnsLeft lists the egress namespaces under the root, and their mounts.
func netnsLeft(t *testing.T) []string {
	t.Helper()
	dir := filepath.Join(rootDir, "oci", "netns")
	left, err := netns.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), dir+"/") {
		left = append(left, "a mount under "+dir)
	}
	return left
}

// --allow-host gives a sandbox one way out, its egress proxy, in a
// one-shot run and in a long-lived sandbox: a host on the list answers
// through it, one that is not gets 403, nothing else is reachable (the
// proxy's other ports, the host's loopback, any other address), every
// connection is in the audit log, and nothing of the network is left at
// the end. The docker engine refuses it, naming the engine that can.
func TestEgressAllowHost(t *testing.T) {
	allow := e2etest.Upstream(t, "upstream says hi")
	allowed, other := port(t, allow), port(t, e2etest.Upstream(t, "never"))
	urls := fmt.Sprintf("http://127.0.0.1:%d/,http://127.0.0.1:%d/", allowed, other)
	dials := strings.Join([]string{
		net.JoinHostPort(netns.ProxyAddr, "22"), net.JoinHostPort(netns.ProxyAddr, strconv.Itoa(allowed)),
		"127.0.0.1:" + strconv.Itoa(allowed), "169.254.169.254:80", "10.0.0.1:80",
	}, ",")
	argv := []string{"python3", "-c", egressProbe, urls, dials}

	if engineName == "docker" {
		c := airlock(nil, append([]string{"run", "--allow-host", allow, "--"}, argv...)...)
		if c.code != 64 || !strings.Contains(c.stderr, "--engine oci") {
			t.Errorf("docker with --allow-host: exit %d, %s; want 64 naming --engine oci", c.code, c.stderr)
		}
		return
	}

	t.Run("run", func(t *testing.T) {
		res, c := runJSON(t, nil, append([]string{"--allow-host", allow, "--"}, argv...)...)
		if res.ExitCode != 0 {
			t.Fatalf("exit %d: %s\n%s", res.ExitCode, res.Stderr.Head, c.stderr)
		}
		checkEgress(t, res.ID, string(res.Stdout.Head), allowed, other)
		t.Logf("the sandbox's output:\n%s", res.Stdout.Head)
		if left := netnsLeft(t); len(left) > 0 {
			t.Errorf("network namespaces left after the run: %v", left)
		}
		if res.Policy == nil || res.Policy.Egress == nil || res.Policy.Runtime.Name == "runsc" && !strings.Contains(strings.Join(res.Policy.Runtime.Flags, " "), "--network=sandbox") {
			t.Errorf("the policy's record does not show egress: %+v", res.Policy)
		}
	})

	// A credential whose value cannot be read is refused before anything
	// is made, in a run and at create.
	t.Run("credential unread", func(t *testing.T) {
		// Refused before any lookup: no name is resolved.
		cred := "--credential=api.example.com=Authorization:AIRLOCK_E2E_NO_SUCH_VARIABLE"
		for name, c := range map[string]cliResult{
			"run":    airlock(nil, append([]string{"run", cred, "--"}, argv...)...),
			"create": airlock(nil, "sandbox", "create", "--engine", engineName, "--isolation", isolationName, cred),
		} {
			if c.code != 64 || !strings.Contains(c.stderr, "environment has no AIRLOCK_E2E_NO_SUCH_VARIABLE") {
				t.Errorf("%s: exit %d, %s; want 64 naming the missing variable", name, c.code, c.stderr)
			}
		}
		if left := netnsLeft(t); len(left) > 0 {
			t.Errorf("network namespaces left: %v", left)
		}
	})

	t.Run("sandbox", func(t *testing.T) {
		si := sbCreate(t, "--allow-host", allow)
		destroyed := false
		t.Cleanup(func() {
			if !destroyed {
				airlock(nil, "sandbox", "rm", si.ID)
			}
		})
		res, c := sbExec(t, si.ID, nil, argv...)
		if res.ExitCode != 0 {
			t.Fatalf("exit %d: %s\n%s", res.ExitCode, res.Stderr.Head, c.stderr)
		}
		checkEgress(t, si.ID, string(res.Stdout.Head), allowed, other)
		if live, err := netns.List(filepath.Join(rootDir, "oci", "netns")); err != nil || len(live) != 1 || live[0] != si.ID {
			t.Errorf("network namespaces while the sandbox lives: %v, %v", live, err)
		}
		// Paused and resumed, it keeps its one way out: its namespaces
		// and its proxy stay while it is paused, and the restored
		// netstack takes the same interface. Under runc no sandbox
		// pauses, and the sandbox goes on.
		if isolationName == "seccomp" {
			if c := airlock(nil, "sandbox", "pause", si.ID); c.code != 64 || !strings.Contains(c.stderr, "--isolation gvisor") {
				t.Errorf("sandbox pause under runc: exit %d, %s; want 64 naming --isolation gvisor", c.code, c.stderr)
			}
			if res, _ := sbExec(t, si.ID, nil, "true"); res.ExitCode != 0 {
				t.Errorf("the sandbox after the refused pause: exit %d", res.ExitCode)
			}
		} else {
			for _, verb := range []string{"pause", "resume"} {
				if c := airlock(nil, "sandbox", verb, si.ID); c.code != 0 {
					t.Fatalf("sandbox %s with egress: exit %d, %s", verb, c.code, c.stderr)
				}
				if live, err := netns.List(filepath.Join(rootDir, "oci", "netns")); err != nil || len(live) != 1 || live[0] != si.ID {
					t.Errorf("network namespaces after %s: %v, %v", verb, live, err)
				}
			}
			res, c := sbExec(t, si.ID, nil, argv...)
			if res.ExitCode != 0 {
				t.Fatalf("after resume: exit %d: %s\n%s", res.ExitCode, res.Stderr.Head, c.stderr)
			}
			checkEgress(t, si.ID, string(res.Stdout.Head), allowed, other)
		}
		if c := airlock(nil, "sandbox", "rm", si.ID); c.code != 0 {
			t.Fatalf("sandbox rm: exit %d: %s", c.code, c.stderr)
		}
		destroyed = true
		waitGone(t, si.ID, 10*time.Second)
		if left := netnsLeft(t); len(left) > 0 {
			t.Errorf("network namespaces left after destroy: %v", left)
		}
	})

	// A snapshot template keeps its egress: the warm program reaches the
	// allowed host through the warming sandbox's proxy before it is ready,
	// and each sandbox restored from the snapshot gets namespaces and a
	// proxy of its own, whose interface its restored network stack takes.
	// The template allows both upstreams; each sandbox narrows its list
	// to one, which its own proxy enforces.
	t.Run("snapshot", func(t *testing.T) {
		onlyPair(t, "oci", "gvisor") // snapshots are gVisor's
		const name = "egress-snap"
		both := []string{"--allow-host", allow, "--allow-host", "127.0.0.1:" + strconv.Itoa(other)}
		c := airlock(nil, append(append([]string{"template", "create", name, "--engine", "oci", "--isolation", "gvisor"}, both...), "--warm", "--",
			"python3", "-c", warmFetch, "http://"+allow+"/")...)
		if c.code != 0 {
			t.Fatalf("template create --warm --allow-host: exit %d: %s", c.code, c.stderr)
		}
		t.Cleanup(func() { airlock(nil, "template", "rm", name) })
		// A run may not add a host to the template's list.
		if c := airlock(nil, "sandbox", "create", "--template", name, "--allow-host", "127.0.0.1:1"); c.code != 64 {
			t.Errorf("a host added to the template's list: exit %d, %s; want 64", c.code, c.stderr)
		}
		var ids []string
		for i := 0; i < 2; i++ {
			c := airlock(nil, "sandbox", "create", "--template", name, "--allow-host", allow, "--json")
			var si runner.SandboxInfo
			if c.code != 0 || json.Unmarshal([]byte(c.stdout), &si) != nil || si.Snapshot == "" {
				t.Fatalf("sandbox create --template %s: exit %d, %s %s; want a sandbox restored from its snapshot", name, c.code, c.stdout, c.stderr)
			}
			ids = append(ids, si.ID)
			t.Cleanup(func() { airlock(nil, "sandbox", "rm", si.ID) })
		}
		if live, err := netns.List(filepath.Join(rootDir, "oci", "netns")); err != nil || len(live) != 2 {
			t.Errorf("network namespaces of two restored sandboxes: %v, %v", live, err)
		}
		for _, id := range ids {
			res, c := sbExec(t, id, nil, argv...)
			if res.ExitCode != 0 {
				t.Fatalf("%s: exit %d: %s\n%s", id, res.ExitCode, res.Stderr.Head, c.stderr)
			}
			checkEgress(t, id, string(res.Stdout.Head), allowed, other)
		}
		if c := airlock(nil, append([]string{"sandbox", "rm"}, ids...)...); c.code != 0 {
			t.Fatalf("sandbox rm: exit %d: %s", c.code, c.stderr)
		}
		for _, id := range ids {
			waitGone(t, id, 10*time.Second)
		}
		if left := netnsLeft(t); len(left) > 0 {
			t.Errorf("network namespaces left after destroy: %v", left)
		}
	})
	noSandboxLeft(t)
}

// warmFetch is a warm program that fetches its argument through the
// proxy before it says it is ready: it fails, and its template is not
// made, unless the warming sandbox has its egress.
const warmFetch = `
import os, sys, time, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=20).read()
open(os.environ["AIRLOCK_READY_FILE"], "w").close()
while True:
    time.sleep(3600)
`
