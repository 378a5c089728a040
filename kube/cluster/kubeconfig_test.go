package cluster

import (
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

// kubeconfigFor is a kubeconfig for srv with user's settings (YAML lines
// under user:) and cluster's extra settings.
func kubeconfigFor(server, caData, cluster, user string) string {
	return `apiVersion: v1
kind: Config
current-context: c
contexts:
- name: c
  context: {cluster: k, user: u, namespace: team}
clusters:
- name: k
  cluster:
    server: ` + server + `
    certificate-authority-data: ` + caData + `
` + cluster + `
users:
- name: u
  user:
` + user
}

func TestParse(t *testing.T) {
	srv := httptest.NewTLSServer(nil)
	defer srv.Close()
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "token"), []byte("from-file\n"), 0o600)
	for _, tc := range []struct {
		name, cluster, user, context string
		token, refused               string // refused: a word the error must hold
	}{
		{name: "token", user: "    token: abc", token: "abc"},
		{name: "token file, relative to the kubeconfig", user: "    tokenFile: token", token: "from-file"},
		{name: "exec plugin", user: "    exec: {command: gke-gcloud-auth-plugin}", refused: "exec credential plugin"},
		{name: "auth provider", user: "    auth-provider: {name: oidc}", refused: "auth-provider"},
		{name: "basic auth", user: "    username: a\n    password: b", refused: "basic authentication"},
		{name: "impersonation", user: "    token: abc\n    as: admin", refused: "impersonation"},
		{name: "no credentials", user: "    {}", refused: "no credentials"},
		{name: "half a client certificate", user: "    client-certificate: nope.crt", refused: "client-certificate"},
		{name: "insecure", cluster: "    insecure-skip-tls-verify: true", user: "    token: abc", refused: "insecure-skip-tls-verify"},
		{name: "proxy", cluster: "    proxy-url: http://proxy:3128", user: "    token: abc", refused: "proxy-url"},
		{name: "no such context", user: "    token: abc", context: "other", refused: `no context "other"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kc := kubeconfigFor(srv.URL, ca, tc.cluster, tc.user)
			cfg, err := Parse([]byte(kc), dir, tc.context)
			if tc.refused != "" {
				if err == nil || !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.refused) {
					t.Fatalf("err = %v; want invalid input naming %q", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Token != tc.token || cfg.Namespace != "team" || cfg.Server != srv.URL || cfg.TLS.RootCAs == nil {
				t.Errorf("got %+v", cfg)
			}
		})
	}
}

func TestParseRefusesPlainHTTP(t *testing.T) {
	_, err := Parse([]byte(kubeconfigFor("http://127.0.0.1:8080", "", "", "    token: abc")), t.TempDir(), "")
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "https") {
		t.Errorf("err = %v", err)
	}
}

func TestLoadNeedsAKubeconfig(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	if _, err := Load("", ""); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("err = %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing"), ""); !errdefs.IsInvalidArgument(err) || errors.Unwrap(err) == nil {
		t.Errorf("err = %v", err)
	}
}

// A file a kubeconfig names must be a regular file of at most maxFile
// bytes: a FIFO would hang Load (it is opened without blocking, and
// refused), a device such as /dev/zero would fill the memory, as would a
// huge file.
func TestParseRefusesIrregularFiles(t *testing.T) {
	srv := httptest.NewTLSServer(nil)
	defer srv.Close()
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "huge"), make([]byte, maxFile+1), 0o600)
	for _, tc := range []struct{ name, cluster, user, refused string }{
		{name: "a FIFO as the CA", cluster: "    certificate-authority: fifo", user: "    token: abc", refused: "not a regular file"},
		{name: "a FIFO as tokenFile", user: "    tokenFile: fifo", refused: "not a regular file"},
		{name: "/dev/zero as the client key", user: "    token: abc\n    client-key: /dev/zero", refused: "not a regular file"},
		{name: "a huge tokenFile", user: "    tokenFile: huge", refused: "over 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kc := kubeconfigFor(srv.URL, "", tc.cluster, tc.user)
			done := make(chan error, 1)
			go func() { _, err := Parse([]byte(kc), dir, ""); done <- err }()
			select {
			case err := <-done:
				if !errdefs.IsInvalidArgument(err) || !strings.Contains(fmt.Sprint(err), tc.refused) {
					t.Errorf("err = %v; want invalid input saying %q", err, tc.refused)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Parse has not returned after 10s")
			}
		})
	}
}
