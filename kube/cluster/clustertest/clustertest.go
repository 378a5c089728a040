// Package clustertest serves a fake Kubernetes API server to the tests of
// the cluster client's users: a TLS server on loopback that answers with
// the test's handler, and a kubeconfig for it.
package clustertest

import (
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/kube/cluster"
)

// Token is the bearer token the kubeconfig gives.
const Token = "tok"

// Serve serves h over TLS on 127.0.0.1 until the test ends, and returns
// the config loaded from a kubeconfig for it (context "x", token Token,
// no namespace) and that kubeconfig's path.
func Serve(t testing.TB, h http.Handler) (*cluster.Config, string) {
	t.Helper()
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	kc := fmt.Sprintf(`apiVersion: v1
clusters: [{name: c, cluster: {server: %q, certificate-authority-data: %s}}]
users: [{name: u, user: {token: %s}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, srv.URL, base64.StdEncoding.EncodeToString(ca), Token)
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := cluster.Load(p, "")
	if err != nil {
		t.Fatal(err)
	}
	return cfg, p
}

// RenderedSpec is a pod spec as `airlock kube render` writes it, of the
// active deadline given, in seconds.
func RenderedSpec(activeDeadline int) string {
	return fmt.Sprintf(`{"runtimeClassName":"gvisor","automountServiceAccountToken":false,"enableServiceLinks":false,
 "hostNetwork":false,"hostPID":false,"hostIPC":false,"restartPolicy":"Never","activeDeadlineSeconds":%d,
 "securityContext":{"runAsNonRoot":true,"runAsUser":65534,"runAsGroup":65534,"seccompProfile":{"type":"Localhost","localhostProfile":"airlock/x.json"}},
 "containers":[{"name":"sandbox","image":"x","command":["sleep","infinity"],
   "securityContext":{"runAsNonRoot":true,"runAsUser":65534,"runAsGroup":65534,"seccompProfile":{"type":"Localhost","localhostProfile":"airlock/x.json"},
     "privileged":false,"allowPrivilegeEscalation":false,"readOnlyRootFilesystem":true,"capabilities":{"drop":["ALL"]}},
   "volumeMounts":[{"name":"tmp","mountPath":"/tmp"},{"name":"workspace","mountPath":"/home/user"}]}],
 "volumes":[{"name":"tmp","emptyDir":{"medium":"Memory","sizeLimit":"1"}},{"name":"workspace","emptyDir":{"sizeLimit":"1"}}]}`, activeDeadline)
}
