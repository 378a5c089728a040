//go:build e2e

package e2e

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/pkitest"
)

// credentialProbe is the sandbox's side of TestEgressCredential: plain
// HTTP to the route's host, then a search for the secret (given
// reversed, so that its argv does not hold it) in its environment, every
// process's environ, and every file of up to 1 MiB outside /proc, /sys,
// /dev and /usr (the image's, pinned by digest before any credential
// existed). It prints whether an answer held the secret, never the
// secret.
const credentialProbe = `
import os, sys, urllib.request, urllib.error
secret = sys.argv[2][::-1].encode()
for url in sys.argv[1].split(","):
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            b = r.read()
            print("get", url, r.status, "holds the secret" if secret in b else b.decode())
    except urllib.error.HTTPError as e:
        print("get", url, e.code, e.read().decode().strip())
    except Exception as e:
        print("get", url, "error", type(e).__name__)
print("env holds it:", any(secret in v.encode() for v in os.environ.values()))
found = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            if secret in open("/proc/%s/environ" % pid, "rb").read():
                found.append("/proc/%s/environ" % pid)
        except OSError:
            pass
files = 0
for top in os.listdir("/"):
    if top in ("proc", "sys", "dev", "usr"):
        continue
    for d, _, names in os.walk("/" + top):
        for n in names:
            p = os.path.join(d, n)
            try:
                if os.path.islink(p) or not os.path.isfile(p) or os.path.getsize(p) > 1 << 20:
                    continue
                files += 1
                with open(p, "rb") as f:
                    if secret in f.read():
                        found.append(p)
            except OSError:
                pass
print("scanned", files, "files; found", found)
`

// seen records the Authorization header of each request an upstream
// answered.
type seen struct {
	mu   sync.Mutex
	auth []string
}

func (s *seen) add(r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.auth = append(s.auth, r.Header.Get("Authorization"))
}

func (s *seen) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

// serveOn serves h on a new listener of the host's loopback, with TLS
// when cert is given, until the test ends.
func serveOn(t *testing.T, h http.Handler, cert *tls.Certificate) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	if cert != nil {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{*cert}})
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// A credential route end to end: the sandbox speaks plain HTTP to
// http://api.airlock.test/; the proxy opens TLS to the upstream (a test
// CA's certificate, trusted through AIRLOCK_EGRESS_CA), verifies it and
// adds the header, which reaches the upstream. The value is nowhere in
// the sandbox (its environment, any process's environ, its files), the
// Result with its receipt, airlock's output or the audit log; a redirect
// is passed back, and the client's follow reaches the other host without
// it; only an upstream that echoes it hands it over. Without the CA the
// proxy refuses the upstream's certificate (tls_failed) and sends
// nothing.
func TestEgressCredential(t *testing.T) {
	if engineName == "docker" {
		t.Skip("the docker engine refuses egress (TestEgressAllowHost)")
	}
	const name = "api.airlock.test"
	b := make([]byte, 16)
	rand.Read(b)
	secret := "airlock-e2e-" + hex.EncodeToString(b)
	pki := pkitest.New(t, name)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pki.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}

	var up, other seen
	otherAddr := serveOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		other.add(r)
		io.WriteString(w, "the other host")
	}), nil)
	upAddr := serveOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up.add(r)
		switch r.URL.Path {
		case "/echo":
			io.WriteString(w, r.Header.Get("Authorization"))
		case "/redirect":
			http.Redirect(w, r, "http://"+otherAddr+"/", http.StatusFound)
		default:
			if r.Header.Get("Authorization") == "Bearer "+secret {
				io.WriteString(w, "authorized")
			} else {
				io.WriteString(w, "unauthorized")
			}
		}
	}), &pki.Cert)
	upPort := port(t, upAddr)
	env := []string{hostsFile(t, "127.0.0.1 "+name), "AIRLOCK_E2E_TOKEN=Bearer " + secret}
	flags := []string{
		"--timeout", "2m", "--allow-host", upAddr, "--allow-host", otherAddr,
		fmt.Sprintf("--credential=%s:%d=Authorization:AIRLOCK_E2E_TOKEN", name, upPort),
	}
	urls := "http://" + name + "/,http://" + name + "/echo,http://" + name + "/redirect"
	reversed := []rune(secret)
	for i, j := 0, len(reversed)-1; i < j; i, j = i+1, j-1 {
		reversed[i], reversed[j] = reversed[j], reversed[i]
	}
	argv := []string{"python3", "-c", credentialProbe, urls, string(reversed)}

	check := func(t *testing.T, id, out string, raw ...string) {
		t.Helper()
		for _, w := range []string{
			"get http://" + name + "/ 200 authorized",
			"get http://" + name + "/echo 200 holds the secret",
			"get http://" + name + "/redirect 200 the other host",
			"env holds it: False",
			"; found []",
		} {
			if !strings.Contains(out, w) {
				t.Errorf("the sandbox's output lacks %q:\n%s", w, out)
			}
		}
		if strings.Contains(out, "scanned 0 files") {
			t.Errorf("the scan read no file:\n%s", out)
		}
		if got := up.list(); len(got) != 3 || got[0] != "Bearer "+secret || got[1] != got[0] || got[2] != got[0] {
			t.Errorf("the upstream saw %d requests, or not the header on each", len(got))
		}
		if got := other.list(); len(got) != 1 || got[0] != "" {
			t.Errorf("the redirect's host saw %q; want one request without the header", got)
		}
		audit, err := os.ReadFile(filepath.Join(rootDir, "audit.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		for what, s := range map[string]string{"the audit log": string(audit), "the output": strings.Join(raw, "\n")} {
			if strings.Contains(s, secret) {
				t.Errorf("%s holds the credential's value", what)
			}
		}
		var creds int
		for _, ev := range egressRecords(t, id) {
			if ev["kind"] == egress.KindCredential && ev["host"] == name && ev["allowed"] == true && ev["status"] != nil {
				creds++
			}
		}
		if creds != 3 {
			t.Errorf("%d credential records; want 3: %v", creds, egressRecords(t, id))
		}
	}

	t.Run("run", func(t *testing.T) {
		up.auth, other.auth = nil, nil
		res, c := runJSON(t, append(env, "AIRLOCK_EGRESS_CA="+caFile), append(append([]string{}, flags...), append([]string{"--"}, argv...)...)...)
		if res.ExitCode != 0 {
			t.Fatalf("exit %d: %s\n%s", res.ExitCode, res.Stderr.Head, c.stderr)
		}
		if res.Receipt == nil {
			t.Error("the Result has no receipt")
		}
		check(t, res.ID, string(res.Stdout.Head), c.stdout, c.stderr)
	})

	t.Run("sandbox", func(t *testing.T) {
		up.auth, other.auth = nil, nil
		si := sbCreateEnv(t, append(env, "AIRLOCK_EGRESS_CA="+caFile), flags...)
		t.Cleanup(func() { airlock(nil, "sandbox", "rm", si.ID) })
		res, c := sbExec(t, si.ID, nil, argv...)
		if res.ExitCode != 0 {
			t.Fatalf("exit %d: %s\n%s", res.ExitCode, res.Stderr.Head, c.stderr)
		}
		state, _ := os.ReadFile(filepath.Join(rootDir, "sandboxes", si.ID+".json"))
		check(t, si.ID, string(res.Stdout.Head), c.stdout, c.stderr, string(state))
		if c := airlock(nil, "sandbox", "rm", si.ID); c.code != 0 {
			t.Fatalf("sandbox rm: exit %d: %s", c.code, c.stderr)
		}
		waitGone(t, si.ID, 10*time.Second)
	})

	t.Run("untrusted", func(t *testing.T) {
		up.auth = nil
		res, c := runJSON(t, env, append(append([]string{}, flags...), "--", "python3", "-c", probeGets, "http://"+name+"/")...)
		if out := string(res.Stdout.Head); res.ExitCode != 0 || !strings.Contains(out, "get http://"+name+"/ 502 airlock egress: tls_failed") {
			t.Errorf("without the CA: exit %d, %q, %s; want 502 tls_failed", res.ExitCode, out, c.stderr)
		}
		if got := up.list(); len(got) != 0 {
			t.Errorf("the upstream answered %d requests over a certificate the proxy does not trust", len(got))
		}
	})
	if left := netnsLeft(t); len(left) > 0 {
		t.Errorf("network namespaces left: %v", left)
	}
	noSandboxLeft(t)
}
