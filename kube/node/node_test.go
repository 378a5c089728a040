package node

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/airlock-sandbox/airlock/internal/pkitest"
	"github.com/airlock-sandbox/airlock/kube/cluster"
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

// A kubeconfig is read by client-go here, which would honour what package
// cluster refuses: a server without TLS or unverified (the credentials,
// which may change pods' status, go to whoever answers), an exec
// credential plugin (a program run) and an auth provider. Each is refused
// in cluster's words, before any request is made or program run.
func TestClientRefusesWhatClusterRefuses(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	defer srv.Close()
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	dir := t.TempDir()
	marker := filepath.Join(dir, "plugin-ran")
	plugin := filepath.Join(dir, "plugin.sh")
	os.WriteFile(plugin, []byte("#!/bin/sh\ntouch "+marker+"\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\"}}'\n"), 0o700)
	kubeconfig := func(cluster, user string) string {
		return "apiVersion: v1\ncurrent-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n" +
			"clusters: [{name: k, cluster: {" + cluster + "}}]\nusers: [{name: u, user: {" + user + "}}]\n"
	}
	verified := "server: " + srv.URL + ", certificate-authority-data: " + ca
	for _, tc := range []struct{ name, kubeconfig, says string }{
		{"http", kubeconfig("server: "+strings.Replace(srv.URL, "https:", "http:", 1), "token: secret"), cluster.RefuseHTTP},
		{"insecure-skip-tls-verify", kubeconfig("server: "+srv.URL+", insecure-skip-tls-verify: true", "token: secret"), cluster.RefuseInsecure},
		{"exec plugin", kubeconfig(verified, "exec: {apiVersion: client.authentication.k8s.io/v1, command: "+plugin+", interactiveMode: Never}"), cluster.RefuseExec},
		{"auth provider", kubeconfig(verified, "auth-provider: {name: oidc, config: {id-token: x, idp-issuer-url: 'https://127.0.0.1:1'}}"), cluster.RefuseAuthProvider},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "kubeconfig")
			os.WriteFile(p, []byte(tc.kubeconfig), 0o600)
			cs, err := ClientAs(p, "airlock-test")
			if err == nil {
				cs.CoreV1().Nodes().Get(t.Context(), "x", metav1.GetOptions{})
			}
			if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("err = %v; want invalid input saying %q", err, tc.says)
			}
		})
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the exec credential plugin ran")
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the server was asked %d times", n)
	}
	// A verified server with a token is taken.
	p := filepath.Join(dir, "kubeconfig")
	os.WriteFile(p, []byte(kubeconfig(verified, "token: secret")), 0o600)
	if _, err := ClientAs(p, "airlock-test"); err != nil {
		t.Errorf("a verified https server with a token: %v", err)
	}
}
