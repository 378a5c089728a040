package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// certLifetime is how long the control plane's certificates are valid; a
// control plane for tests is started anew far more often than that.
const certLifetime = 30 * 24 * time.Hour

// ca is the control plane's own certificate authority: every certificate
// it issues is written with its key to dir, 0600.
type ca struct {
	dir  string
	cert *x509.Certificate
	key  crypto.Signer
}

func newCA(dir string) (*ca, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "airlock-kube-ca"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("creating the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &ca{dir: dir, cert: cert, key: key}
	return c, c.write("ca", der, key)
}

// certSpec describes one certificate the CA issues.
type certSpec struct {
	name   string // file name: <name>.crt, <name>.key
	cn     string
	orgs   []string
	client bool
	server bool
	ips    []net.IP
	dns    []string
}

func (c *ca) issue(s certSpec) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: s.cn, Organization: s.orgs},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(certLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		IPAddresses:  s.ips,
		DNSNames:     s.dns,
	}
	if s.client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	if s.server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), c.key)
	if err != nil {
		return fmt.Errorf("issuing the %s certificate: %w", s.name, err)
	}
	return c.write(s.name, der, key)
}

func (c *ca) write(name string, der []byte, key crypto.Signer) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(c.dir, name+".crt"), "CERTIFICATE", der); err != nil {
		return err
	}
	return writePEM(filepath.Join(c.dir, name+".key"), "PRIVATE KEY", keyDER)
}

func (c *ca) crt(name string) string     { return filepath.Join(c.dir, name+".crt") }
func (c *ca) keyFile(name string) string { return filepath.Join(c.dir, name+".key") }

// writeServiceAccountKeys writes the key pair the apiserver signs
// service-account tokens with (sa.key) and checks them by (sa.pub).
func writeServiceAccountKeys(dir string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	priv, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	if err := writePEM(filepath.Join(dir, "sa.key"), "PRIVATE KEY", priv); err != nil {
		return err
	}
	return writePEM(filepath.Join(dir, "sa.pub"), "PUBLIC KEY", pub)
}

// writeKubeconfig writes a kubeconfig, 0600, for the client certificate
// <name>.crt of the CA, with the certificate and key inline.
func (c *ca) writeKubeconfig(path, server, name string) error {
	read := func(p string) (string, error) {
		b, err := os.ReadFile(p)
		return base64.StdEncoding.EncodeToString(b), err
	}
	caData, err := read(c.crt("ca"))
	if err != nil {
		return err
	}
	certData, err := read(c.crt(name))
	if err != nil {
		return err
	}
	keyData, err := read(c.keyFile(name))
	if err != nil {
		return err
	}
	// JSON is YAML: no YAML library is needed to write one.
	conf := fmt.Sprintf(`{
  "apiVersion": "v1",
  "kind": "Config",
  "clusters": [{"name": "airlock-kube", "cluster": {"server": %q, "certificate-authority-data": %q}}],
  "users": [{"name": %q, "user": {"client-certificate-data": %q, "client-key-data": %q}}],
  "contexts": [{"name": "airlock-kube", "context": {"cluster": "airlock-kube", "user": %q}}],
  "current-context": "airlock-kube"
}
`, server, caData, name, certData, keyData, name)
	return writeFile0600(path, []byte(conf))
}

func writePEM(path, typ string, der []byte) error {
	return writeFile0600(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}))
}

// writeFile0600 writes a new file readable by its owner only, whatever the
// umask, replacing any file there.
func writeFile0600(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

// loadCA reads the CA that kube up wrote to dir.
func loadCA(dir string) (*ca, error) {
	c := &ca{dir: dir}
	pemOf := func(p string) ([]byte, error) {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		blk, _ := pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("%s holds no PEM block", p)
		}
		return blk.Bytes, nil
	}
	der, err := pemOf(c.crt("ca"))
	if err != nil {
		return nil, err
	}
	if c.cert, err = x509.ParseCertificate(der); err != nil {
		return nil, err
	}
	if der, err = pemOf(c.keyFile("ca")); err != nil {
		return nil, err
	}
	key, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("the CA's key is a %T", key)
	}
	c.key = signer
	return c, nil
}

// NodeKubeconfig issues node name's credentials, the user
// system:node:<name> in the group system:nodes that the Node authorizer
// and NodeRestriction confine to that node's own objects, and writes a
// kubeconfig, 0600, at <run>/nodes/<name>.kubeconfig (gone at kube down), whose path it
// returns; beside it, <name>.crt and <name>.key serve the node's kubelet
// API on 127.0.0.1, and ca.crt is the CA of the API server's client
// certificate. The control plane must be up.
func NodeKubeconfig(l Layout, name string) (string, error) {
	cert := "node-" + name
	c, api, err := issueClient(l, certSpec{name: cert, cn: "system:node:" + name, orgs: []string{"system:nodes"}, client: true})
	if err != nil {
		return "", err
	}
	// Its serving certificate, for the kubelet API on 127.0.0.1, and the
	// CA of the API server's client certificate, beside the kubeconfig.
	dir := filepath.Join(l.Run(), "nodes")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	serving := ca{dir: dir, cert: c.cert, key: c.key}
	if err := serving.issue(certSpec{name: name, cn: "system:node:" + name, orgs: []string{"system:nodes"}, server: true,
		ips: []net.IP{net.IPv4(127, 0, 0, 1)}, dns: []string{name}}); err != nil {
		return "", err
	}
	caPEM, err := os.ReadFile(c.crt("ca"))
	if err != nil {
		return "", err
	}
	if err := writeFile0600(filepath.Join(dir, "ca.crt"), caPEM); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name+".kubeconfig")
	return path, c.writeKubeconfig(path, api, cert)
}

// issueClient issues the client certificate s with the control plane's CA,
// and returns the CA and the API server's URL.
func issueClient(l Layout, s certSpec) (*ca, string, error) {
	c, err := loadCA(l.PKI())
	if err != nil {
		return nil, "", fmt.Errorf("reading the control plane's CA (is it up? make kube-up): %w", err)
	}
	ports, err := ReadPorts(l)
	if err != nil {
		return nil, "", err
	}
	if err := c.issue(s); err != nil {
		return nil, "", err
	}
	return c, "https://127.0.0.1:" + strconv.Itoa(ports[portAPIServer]), nil
}

// UserKubeconfig issues a client certificate for the user name, in no
// group, so that only the RBAC bindings naming it give it anything, and
// writes a kubeconfig, 0600, at <run>/users/<name>.kubeconfig (gone at
// kube down), whose path it returns. The control plane must be up.
func UserKubeconfig(l Layout, name string) (string, error) {
	if strings.HasPrefix(name, "system:") {
		return "", fmt.Errorf("user %q: system: names are the control plane's and the nodes'", name)
	}
	cert := "user-" + name
	c, api, err := issueClient(l, certSpec{name: cert, cn: name, client: true})
	if err != nil {
		return "", err
	}
	dir := filepath.Join(l.Run(), "users")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name+".kubeconfig")
	return path, c.writeKubeconfig(path, api, cert)
}
