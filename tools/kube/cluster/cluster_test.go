package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestCRDNames(t *testing.T) {
	got, err := crdNames([]string{"/m/k8s/crds/agents.x-k8s.io_sandboxes.yaml", "/m/k8s/crds/extensions.agents.x-k8s.io_sandboxclaims.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"sandboxes.agents.x-k8s.io", "sandboxclaims.extensions.agents.x-k8s.io"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("crdNames = %q, want %q", got, want)
	}
	for _, bad := range [][]string{nil, {"/m/sandboxes.yaml"}} {
		if _, err := crdNames(bad); err == nil {
			t.Errorf("crdNames(%q) = nil error", bad)
		}
	}
}

func TestMajorMinor(t *testing.T) {
	for _, c := range []struct {
		in, major, minor string
		ok               bool
	}{
		{"v1.37.2", "1", "37", true},
		{"v1.37.0-rc.1", "1", "37", true},
		{"1.37.2", "", "", false},
		{"v1.37", "", "", false},
		{"v0.0.0-master", "0", "0", true},
	} {
		major, minor, ok := majorMinor(c.in)
		if major != c.major || minor != c.minor || ok != c.ok {
			t.Errorf("majorMinor(%q) = %q, %q, %v; want %q, %q, %v", c.in, major, minor, ok, c.major, c.minor, c.ok)
		}
	}
}

// The cache key follows go.sum, and only go.sum.
func TestCacheKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("go.sum", "a v1 h1:x\n")
	k1, err := cacheKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	write("go.mod", "module x\n")
	if k, _ := cacheKey(dir); k != k1 {
		t.Errorf("key changed with go.mod alone")
	}
	write("go.sum", "a v2 h1:y\n")
	if k, _ := cacheKey(dir); k == k1 {
		t.Errorf("key did not change with go.sum")
	}
	if _, err := cacheKey(t.TempDir()); err == nil {
		t.Errorf("no go.sum: no error")
	}
}

// Every certificate chains to the CA, with the usage its role needs; every
// key and kubeconfig is 0600.
func TestPKI(t *testing.T) {
	l := Layout{Dir: t.TempDir()}
	for _, d := range []string{l.PKI(), l.Conf()} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := writePKI(l, map[string]int{portAPIServer: 6443}); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(l.PKI(), "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	for _, c := range []struct {
		name  string
		usage x509.ExtKeyUsage
		host  string
	}{
		{"apiserver", x509.ExtKeyUsageServerAuth, "127.0.0.1"},
		{"etcd-server", x509.ExtKeyUsageServerAuth, "127.0.0.1"},
		{"etcd-peer", x509.ExtKeyUsageClientAuth, ""},
		{"admin", x509.ExtKeyUsageClientAuth, ""},
		{AgentSandbox, x509.ExtKeyUsageClientAuth, ""},
	} {
		pair, err := tls.LoadX509KeyPair(filepath.Join(l.PKI(), c.name+".crt"), filepath.Join(l.PKI(), c.name+".key"))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		cert, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: c.host, KeyUsages: []x509.ExtKeyUsage{c.usage}}); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(l.PKI(), "*"))
	confs, _ := filepath.Glob(filepath.Join(l.Conf(), "*"))
	for _, f := range append(append(files, confs...), l.Kubeconfig()) {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s is %v, want 0600", f, fi.Mode().Perm())
		}
	}
	if _, err := os.Stat(filepath.Join(l.PKI(), "sa.pub")); err != nil {
		t.Error(err)
	}
}

// A pid is ours only while it runs a binary from under bin/.
func TestOurs(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if !ours(os.Getpid(), filepath.Dir(self)) {
		t.Errorf("this test's own pid is not ours under %s", filepath.Dir(self))
	}
	if ours(os.Getpid(), t.TempDir()) {
		t.Errorf("this test's pid is ours under an unrelated directory")
	}
	if alive(1<<30) || ours(1<<30, "/") {
		t.Errorf("a pid that cannot exist is alive")
	}
}

// A second Lock fails with ErrBusy until the first is released.
func TestLock(t *testing.T) {
	l := Layout{Dir: t.TempDir()}
	unlock, err := Lock(l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(l); !errors.Is(err, ErrBusy) {
		t.Fatalf("second Lock: %v, want ErrBusy", err)
	}
	unlock()
	unlock2, err := Lock(l)
	if err != nil {
		t.Fatalf("Lock after unlock: %v", err)
	}
	unlock2()
}
