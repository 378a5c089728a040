//go:build e2e

package e2e

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/netnstest"
	"github.com/airlock-sandbox/airlock/internal/pkitest"
)

// pipRecipe is docs/egress.md's recipe for a lab's mirror: pip installs
// NAME from the index at $1, trusting the CA at $2, into /tmp/site, and
// Python imports it from there.
const pipRecipe = `python3 -m pip install --quiet --no-cache-dir --disable-pip-version-check --target /tmp/site \
  --index-url "$1" --cert "$2" "$3" &&
PYTHONPATH=/tmp/site python3 -c "import $3; print($3.hello())"`

// index is a PEP 503 simple index of wheels, with the paths it was asked
// for: /simple/NAME/ links to /packages/FILE#sha256=DIGEST.
type index struct {
	wheels map[string][]byte // by file name
	digest map[string]string // the link's digest, by project name
	mu     sync.Mutex
	asked  []string
}

func (x *index) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x.mu.Lock()
	x.asked = append(x.asked, r.URL.Path)
	x.mu.Unlock()
	if name, ok := strings.CutPrefix(r.URL.Path, "/simple/"); ok {
		name = strings.TrimSuffix(name, "/")
		digest, found := x.digest[name]
		if !found {
			http.NotFound(w, r)
			return
		}
		file := name + "-1.0-py3-none-any.whl"
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<!DOCTYPE html>\n<html><body>\n<a href=\"/packages/%s#sha256=%s\">%s</a>\n</body></html>\n", file, digest, file)
		return
	}
	if whl, ok := x.wheels[strings.TrimPrefix(r.URL.Path, "/packages/")]; ok {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(whl)
		return
	}
	http.NotFound(w, r)
}

// took returns the paths asked since its last call.
func (x *index) took() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	defer func() { x.asked = nil }()
	return x.asked
}

// pip installs from a package index over HTTPS through the proxy, as
// from a lab's mirror: the index is in a stand-in internet (a network
// namespace of the test's own, at an address that is not public), under
// a name pinned with AIRLOCK_EGRESS_HOSTS, its certificate from a test CA
// given to pip (TLS is end to end through CONNECT), both name and
// address on the allowlist. The wheel, built here, installs into /tmp
// and imports; one whose digest is not the index's is refused by pip.
func TestEgressPip(t *testing.T) {
	if engineName == "docker" {
		t.Skip("the docker engine refuses egress (TestEgressAllowHost)")
	}
	const name = "pypi.airlock.test"
	internet := netnstest.New(t)
	pki := pkitest.New(t, name)
	ca := filepath.Join(t.TempDir(), "lab-ca.pem")
	if err := os.WriteFile(ca, pki.CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	good, bad := wheel(t, "airlockdemo"), wheel(t, "airlockbad")
	sum := sha256.Sum256(good)
	x := &index{
		wheels: map[string][]byte{"airlockdemo-1.0-py3-none-any.whl": good, "airlockbad-1.0-py3-none-any.whl": bad},
		// airlockbad's link gives airlockdemo's digest.
		digest: map[string]string{"airlockdemo": hex.EncodeToString(sum[:]), "airlockbad": hex.EncodeToString(sum[:])},
	}
	srv := &http.Server{Handler: x, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(tls.NewListener(internet.Listen(t, 443), &tls.Config{Certificates: []tls.Certificate{pki.Cert}}))
	t.Cleanup(func() { srv.Close() })

	env := []string{hostsFile(t, netnstest.Addr+" "+name)}
	// pip runs the recipe for pkg and checks the run's audit records:
	// CONNECTs to the index's name and address, nothing else.
	pip := func(t *testing.T, pkg string) (stdout, stderr string) {
		t.Helper()
		res, c := runJSON(t, env, "--timeout", "2m",
			"--allow-host", name, "--allow-host", netnstest.Addr+":443", "--input", ca+":/work/lab-ca.pem",
			"--", "sh", "-c", pipRecipe, "sh", "https://"+name+"/simple/", "/work/lab-ca.pem", pkg)
		var connects int
		for _, ev := range egressRecords(t, res.ID) {
			if ev["kind"] == egress.KindConnect && ev["host"] == name && ev["port"] == float64(443) && ev["addr"] == netnstest.Addr && ev["allowed"] == true {
				connects++
			} else {
				t.Errorf("an unexpected egress record: %v", ev)
			}
		}
		if connects == 0 {
			t.Errorf("no CONNECT to %s:443 in the audit log (airlock: %s)", name, c.stderr)
		}
		return string(res.Stdout.Head), string(res.Stderr.Head)
	}

	t.Run("install", func(t *testing.T) {
		out, errOut := pip(t, "airlockdemo")
		if out != "hello from airlockdemo\n" {
			t.Errorf("pip install and import: %q, %q", out, errOut)
		}
		want := []string{"/simple/airlockdemo/", "/packages/airlockdemo-1.0-py3-none-any.whl"}
		if got := x.took(); !slices.Equal(got, want) {
			t.Errorf("the index was asked %q; want %q", got, want)
		}
	})

	t.Run("digest mismatch", func(t *testing.T) {
		out, errOut := pip(t, "airlockbad")
		if out != "" || !strings.Contains(errOut, "DO NOT MATCH THE HASHES") {
			t.Errorf("a wheel whose digest is not the index's: %q, %q", out, errOut)
		}
		if got := x.took(); !slices.Contains(got, "/packages/airlockbad-1.0-py3-none-any.whl") {
			t.Errorf("the index was asked %q; want the wheel fetched", got)
		}
	})

	// In a long-lived sandbox, a package installed by one exec into the
	// workspace is there for the next.
	t.Run("sandbox", func(t *testing.T) {
		si := sbCreateEnv(t, env, "--allow-host", name, "--allow-host", netnstest.Addr+":443")
		t.Cleanup(func() { airlock(nil, "sandbox", "rm", si.ID) })
		if c := airlock(nil, "cp", ca, si.ID+":/home/user/lab-ca.pem"); c.code != 0 {
			t.Fatalf("cp: exit %d: %s", c.code, c.stderr)
		}
		res, c := sbExec(t, si.ID, nil, "python3", "-m", "pip", "install", "--quiet", "--no-cache-dir", "--disable-pip-version-check",
			"--target", "/home/user/site", "--index-url", "https://"+name+"/simple/", "--cert", "/home/user/lab-ca.pem", "airlockdemo")
		if res.ExitCode != 0 {
			t.Fatalf("pip install: exit %d: %s\n%s", res.ExitCode, res.Stderr.Head, c.stderr)
		}
		res, c = sbExec(t, si.ID, nil, "env", "PYTHONPATH=/home/user/site", "python3", "-c", "import airlockdemo; print(airlockdemo.hello())")
		if res.ExitCode != 0 || string(res.Stdout.Head) != "hello from airlockdemo\n" {
			t.Errorf("import: exit %d: %q, %q, %s", res.ExitCode, res.Stdout.Head, res.Stderr.Head, c.stderr)
		}
		want := []string{"/simple/airlockdemo/", "/packages/airlockdemo-1.0-py3-none-any.whl"}
		if got := x.took(); !slices.Equal(got, want) {
			t.Errorf("the index was asked %q; want %q", got, want)
		}
		if c := airlock(nil, "sandbox", "rm", si.ID); c.code != 0 {
			t.Fatalf("sandbox rm: exit %d: %s", c.code, c.stderr)
		}
		waitGone(t, si.ID, 10*time.Second)
	})

	if left := netnsLeft(t); len(left) > 0 {
		t.Errorf("network namespaces left: %v", left)
	}
	noSandboxLeft(t)
}
