//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
)

// refusalProbe is the sandbox's side of TestEgressRefusals: each URL
// through the proxy, a CONNECT to 127.0.0.1:22 by hand, direct TCP to the
// proxy's other ports, UDP to one of them, and a DNS query to the
// proxy's address.
const refusalProbe = probeGets + `
s = socket.create_connection(("169.254.0.1", 3128), timeout=10)
s.sendall(b"CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n")
print("connect 22", s.recv(4096).split(b"\r\n")[0].decode())
s.close()
for port in sys.argv[2].split(","):
    try:
        socket.create_connection(("169.254.0.1", int(port)), timeout=3).close()
        print("tcp", port, "connected")
    except OSError:
        print("tcp", port, "failed")
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(2)
try:
    u.sendto(b"hello", ("169.254.0.1", 9))
    u.recvfrom(512)
    print("udp 9 answered")
except OSError:
    print("udp 9 no answer")
q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
for label in b"exfil.airlock.test".split(b"."):
    q += bytes([len(label)]) + label
q += b"\x00" + struct.pack(">HH", 1, 1)
try:
    u.sendto(q, ("169.254.0.1", 53))
    a, _ = u.recvfrom(512)
    print("dns id %#x rcode %d" % (struct.unpack(">H", a[:2])[0], a[3] & 15))
except OSError as e:
    print("dns no answer", type(e).__name__)
`

// counted is an upstream on the host's loopback that counts the requests
// it answers, and redirects /redirect to to.
func counted(t *testing.T, body, to string) (addr string, n *atomic.Int64) {
	t.Helper()
	n = new(atomic.Int64)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if r.URL.Path == "/redirect" && to != "" {
			http.Redirect(w, r, to, http.StatusFound)
			return
		}
		io.WriteString(w, body)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), n
}

// hostsFile writes an egress hosts file for the proxy's resolver and
// returns the environment that names it.
func hostsFile(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return "AIRLOCK_EGRESS_HOSTS=" + path
}

// Every refusal, from inside a real sandbox, in a run and a long-lived
// sandbox: a host not on the list, allowed names that resolve to
// loopback, the metadata address and a private address, an IP literal
// not on the list, CONNECT to port 22, a redirect to another host (passed
// back, not followed: the client's own follow is refused), direct TCP to
// the proxy's other ports, UDP, and a DNS query (answered REFUSED). Each
// is in the audit log with its reason; no refused upstream is reached;
// the run's Result sums the records.
func TestEgressRefusals(t *testing.T) {
	if engineName == "docker" {
		t.Skip("the docker engine refuses egress (TestEgressAllowHost)")
	}
	other, otherHits := counted(t, "never", "")
	loop, loopHits := counted(t, "never", "")
	allow, _ := counted(t, "upstream says hi", "http://"+other+"/")
	ap, op, lp := port(t, allow), port(t, other), port(t, loop)
	env := []string{hostsFile(t,
		"127.0.0.1 loop.airlock.test",
		"169.254.169.254 meta.airlock.test",
		"10.0.0.1 private.airlock.test",
	)}
	flags := []string{"--allow-host", allow, "--allow-host", fmt.Sprintf("loop.airlock.test:%d", lp),
		"--allow-host", "meta.airlock.test", "--allow-host", "private.airlock.test"}
	urls := []string{
		"http://" + allow + "/",
		"http://notlisted.airlock.test/",
		fmt.Sprintf("http://loop.airlock.test:%d/", lp),
		"http://meta.airlock.test/latest/meta-data/",
		"http://private.airlock.test/",
		fmt.Sprintf("http://127.0.0.2:%d/", ap),
		"http://" + allow + "/redirect",
	}
	argv := []string{"python3", "-c", refusalProbe, strings.Join(urls, ","), strings.Join([]string{"22", "80", strconv.Itoa(ap), "3129"}, ",")}

	// want are the probe's lines; records the audit records, by host and
	// port, with whether allowed and why.
	want := []string{
		fmt.Sprintf("get http://%s/ 200 upstream says hi", allow),
		"get http://notlisted.airlock.test/ 403 airlock egress: host_not_allowed",
		fmt.Sprintf("get http://loop.airlock.test:%d/ 403 airlock egress: address_not_allowed", lp),
		"get http://meta.airlock.test/latest/meta-data/ 403 airlock egress: address_not_allowed",
		"get http://private.airlock.test/ 403 airlock egress: address_not_allowed",
		fmt.Sprintf("get http://127.0.0.2:%d/ 403 airlock egress: host_not_allowed", ap),
		fmt.Sprintf("get http://%s/redirect 403 airlock egress: port_not_allowed", allow),
		"connect 22 HTTP/1.1 403 Forbidden",
		"tcp 22 failed", "tcp 80 failed", "tcp " + strconv.Itoa(ap) + " failed", "tcp 3129 failed",
		"udp 9 no answer",
		"dns id 0x4242 rcode 5",
	}
	type rec struct {
		kind, host string
		port       int
		allowed    bool
		reason     string
	}
	records := []rec{
		{"http", "127.0.0.1", ap, true, "closed"}, // the first GET and the redirect's
		{"http", "notlisted.airlock.test", 80, false, egress.ReasonHost},
		{"http", "loop.airlock.test", lp, false, egress.ReasonAddress},
		{"http", "meta.airlock.test", 80, false, egress.ReasonAddress},
		{"http", "private.airlock.test", 80, false, egress.ReasonAddress},
		{"http", "127.0.0.2", ap, false, egress.ReasonHost},
		{"http", "127.0.0.1", op, false, egress.ReasonPort},
		{"connect", "127.0.0.1", 22, false, egress.ReasonPort},
		{"dns", "exfil.airlock.test", 53, false, egress.ReasonDNS},
	}
	check := func(t *testing.T, id, out string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("the sandbox's output lacks %q", w)
			}
		}
		if t.Failed() {
			t.Logf("the sandbox's output:\n%s", out)
		}
		evs := egressRecords(t, id)
		seen := make([]int, len(records))
		for _, ev := range evs {
			got := rec{fmt.Sprint(ev["kind"]), fmt.Sprint(ev["host"]), int(ev["port"].(float64)), ev["allowed"] == true, fmt.Sprint(ev["reason"])}
			i := -1
			for j, r := range records {
				if r == got {
					i = j
				}
			}
			if i < 0 {
				t.Errorf("an unexpected egress record: %v", ev)
				continue
			}
			seen[i]++
		}
		for i, r := range records {
			if n := seen[i]; n != 1 && !(i == 0 && n == 2) {
				t.Errorf("%d audit records %+v; want %d", n, r, map[bool]int{true: 2, false: 1}[i == 0])
			}
		}
		if n := otherHits.Load() + loopHits.Load(); n != 0 {
			t.Errorf("a refused upstream answered %d requests", n)
		}
	}

	t.Run("run", func(t *testing.T) {
		res, c := runJSON(t, env, append(append([]string{}, flags...), append([]string{"--"}, argv...)...)...)
		if res.ExitCode != 0 {
			t.Fatalf("exit %d: %s\n%s", res.ExitCode, res.Stderr.Head, c.stderr)
		}
		check(t, res.ID, string(res.Stdout.Head))
		// The Result sums the run's records.
		var sum egress.Totals
		for _, ev := range egressRecords(t, res.ID) {
			if ev["allowed"] == true {
				sum.Allowed++
			} else {
				sum.Refused++
			}
			sum.BytesUp += int64(ev["bytes_up"].(float64))
			sum.BytesDown += int64(ev["bytes_down"].(float64))
		}
		if res.Egress == nil || *res.Egress != sum || sum.Allowed != 2 || sum.Refused != 8 || sum.BytesDown == 0 {
			t.Errorf("the Result's egress totals %+v; want the audit log's %+v: 2 allowed, 8 refused", res.Egress, sum)
		}
		if left := netnsLeft(t); len(left) > 0 {
			t.Errorf("network namespaces left after the run: %v", left)
		}
	})

	t.Run("sandbox", func(t *testing.T) {
		si := sbCreateEnv(t, env, flags...)
		t.Cleanup(func() { airlock(nil, "sandbox", "rm", si.ID) })
		res, c := sbExec(t, si.ID, nil, argv...)
		if res.ExitCode != 0 {
			t.Fatalf("exit %d: %s\n%s", res.ExitCode, res.Stderr.Head, c.stderr)
		}
		check(t, si.ID, string(res.Stdout.Head))
		if c := airlock(nil, "sandbox", "rm", si.ID); c.code != 0 {
			t.Fatalf("sandbox rm: exit %d: %s", c.code, c.stderr)
		}
		waitGone(t, si.ID, 10*time.Second)
		if left := netnsLeft(t); len(left) > 0 {
			t.Errorf("network namespaces left after destroy: %v", left)
		}
	})
	noSandboxLeft(t)
}
