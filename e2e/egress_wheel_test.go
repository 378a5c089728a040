//go:build e2e

package e2e

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// wheel is a pure-Python wheel of package name, version 1.0, whose
// module says hello: a zip with the package, and METADATA, WHEEL and
// RECORD in its .dist-info.
func wheel(t *testing.T, name string) []byte {
	t.Helper()
	dist := name + "-1.0.dist-info/"
	files := []struct{ path, body string }{
		{name + "/__init__.py", "def hello():\n    return \"hello from " + name + "\"\n"},
		{dist + "METADATA", "Metadata-Version: 2.1\nName: " + name + "\nVersion: 1.0\n"},
		{dist + "WHEEL", "Wheel-Version: 1.0\nGenerator: airlock-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.path)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f.body))
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.path, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString(dist + "RECORD,,\n")
	w, err := zw.Create(dist + "RECORD")
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// The recipe docs/egress.md gives for an image without pip: a
// pure-Python wheel fetched through the proxy, its digest checked,
// imported from /tmp. The wheel is built here and served
// on the host's loopback, named exactly on the allowlist.
func TestEgressWheelWithoutPip(t *testing.T) {
	if engineName == "docker" {
		t.Skip("the docker engine refuses egress (TestEgressAllowHost)")
	}
	whl := wheel(t, "airlockdemo")
	sum := sha256.Sum256(whl)
	addr := serveOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/airlockdemo-1.0-py3-none-any.whl" {
			http.NotFound(w, r)
			return
		}
		w.Write(whl)
	}), nil)
	const recipe = `
import hashlib, sys, urllib.request
url, digest = sys.argv[1], sys.argv[2]
body = urllib.request.urlopen(url, timeout=60).read()
assert hashlib.sha256(body).hexdigest() == digest, "digest mismatch"
open("/tmp/pkg.whl", "wb").write(body)
sys.path.insert(0, "/tmp/pkg.whl")
import airlockdemo
print(airlockdemo.hello())
`
	url := "http://" + addr + "/airlockdemo-1.0-py3-none-any.whl"
	res, c := runJSON(t, nil, "--allow-host", addr, "--", "python3", "-c", recipe, url, hex.EncodeToString(sum[:]))
	if res.ExitCode != 0 || string(res.Stdout.Head) != "hello from airlockdemo\n" {
		t.Errorf("the recipe: exit %d, %q, %q, %s", res.ExitCode, res.Stdout.Head, res.Stderr.Head, c.stderr)
	}
	// A wheel that is not the one whose digest was given is refused.
	res, _ = runJSON(t, nil, "--allow-host", addr, "--", "python3", "-c", recipe, url, strings.Repeat("0", 64))
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr.Head), "digest mismatch") {
		t.Errorf("a wrong digest: exit %d, %q", res.ExitCode, res.Stderr.Head)
	}
	if left := netnsLeft(t); len(left) > 0 {
		t.Errorf("network namespaces left: %v", left)
	}
	noSandboxLeft(t)
}
