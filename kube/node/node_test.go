package node

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	"k8s.io/apiserver/pkg/authentication/user"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/airlock-sandbox/airlock/internal/pkitest"
)

// TestExecIsCreate: whatever its method, a request that runs something in
// a pod is authorized as create; the rest keep the method's verb.
func TestExecIsCreate(t *testing.T) {
	a := execIsCreate{nodeutil.NoAuth()}
	for _, c := range []struct{ method, path, verb string }{
		{"GET", "/exec/ns/p/c?command=id&output=1", "create"},
		{"POST", "/exec/ns/p/c?command=id", "create"},
		{"GET", "/attach/ns/p/c", "create"},
		{"GET", "/run/ns/p/c", "create"},
		{"GET", "/portForward/ns/p", "create"},
		{"GET", "/containerLogs/ns/p/c", "get"},
		{"GET", "/executor", "get"},
		{"GET", "/pods", "get"},
	} {
		r := httptest.NewRequest(c.method, c.path, nil)
		attrs := a.GetRequestAttributes(&user.DefaultInfo{Name: "metrics"}, r)
		if attrs.GetVerb() != c.verb || attrs.GetResource() != "nodes" || attrs.GetUser().GetName() != "metrics" {
			t.Errorf("%s %s: verb %q on %q for %q, want %q on nodes", c.method, c.path, attrs.GetVerb(), attrs.GetResource(), attrs.GetUser().GetName(), c.verb)
		}
	}
}

// TestKubeletAPIBounds: the node's API bounds what a client may hold, as
// airlock serve's does, whoever it is (these clients have no credentials
// at all): a request's headers are capped (431 past the cap), and a
// connection idle between requests is closed. The idle timeout is checked
// as configured: a test that waits it out would take minutes.
func TestKubeletAPIBounds(t *testing.T) {
	pki := pkitest.New(t, "node")
	dir := t.TempDir()
	keyDER, err := x509.MarshalECPrivateKey(pki.Cert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	cert, key, ca := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem"), filepath.Join(dir, "ca.pem")
	for f, b := range map[string][]byte{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: pki.Cert.Certificate[0]}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		ca:   pki.CAPEM,
	} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	srv, err := kubeletAPI(k8sfake.NewSimpleClientset(), Config{Name: "n", Port: 1, TLSCert: cert, TLSKey: key, ClientCA: ca}, &Provider{pods: map[string]*pod{}})
	if err != nil {
		t.Fatal(err)
	}
	if srv.IdleTimeout <= 0 || srv.IdleTimeout > 5*time.Minute {
		t.Errorf("IdleTimeout %v: an idle connection is held that long (0: forever)", srv.IdleTimeout)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeTLS(ln, "", "")
	defer srv.Close()

	ask := func(header string) int {
		t.Helper()
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pki.Pool})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := fmt.Fprintf(conn, "GET /pods HTTP/1.1\r\nHost: n\r\n%s\r\n", header); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	if code := ask(""); code != http.StatusUnauthorized {
		t.Fatalf("no credentials: %d, want 401", code)
	}
	if code := ask("X-Pad: " + strings.Repeat("x", 128<<10) + "\r\n"); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("128KiB of headers: %d, want 431", code)
	}
}
