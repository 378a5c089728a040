package cluster

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/containerd/errdefs"
	"sigs.k8s.io/yaml"
)

// Config is what the client takes from a kubeconfig: one context's
// server, credentials and namespace.
type Config struct {
	// Path is the kubeconfig's absolute path; Context the context used.
	Path, Context string
	// Server is the API server's https URL.
	Server string
	// Namespace is the context's namespace, "" when it names none.
	Namespace string
	// TLS holds the CA, the server name and any client certificate.
	TLS *tls.Config
	// Token is a bearer token, "" for none.
	Token string
}

// Why a kubeconfig's setting is refused. kube/node, which reads its
// kubeconfig through client-go, refuses these settings in these words.
const (
	RefuseHTTP         = "airlock talks to an API server only over https"
	RefuseInsecure     = "insecure-skip-tls-verify: airlock always verifies the API server; give its CA as certificate-authority"
	RefuseExec         = "an exec credential plugin, which airlock does not run; use a kubeconfig with a client certificate or a token (`kubectl create token SERVICEACCOUNT` makes one)"
	RefuseAuthProvider = "auth-provider, which airlock does not support; use a client certificate or a token"
)

// NamespaceOr is ns, else the context's namespace, else "default", as
// kubectl takes one.
func (c *Config) NamespaceOr(ns string) string {
	return cmp.Or(ns, c.Namespace, "default")
}

// The kubeconfig file, as far as the client reads it. Fields it cannot
// honour are read only to be refused.
type kubeconfig struct {
	Clusters []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server                   string `json:"server"`
			CertificateAuthority     string `json:"certificate-authority"`
			CertificateAuthorityData string `json:"certificate-authority-data"`
			InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
			TLSServerName            string `json:"tls-server-name"`
			ProxyURL                 string `json:"proxy-url"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			ClientCertificate     string   `json:"client-certificate"`
			ClientCertificateData string   `json:"client-certificate-data"`
			ClientKey             string   `json:"client-key"`
			ClientKeyData         string   `json:"client-key-data"`
			Token                 string   `json:"token"`
			TokenFile             string   `json:"tokenFile"`
			Username              string   `json:"username"`
			Password              string   `json:"password"`
			As                    string   `json:"as"`
			AsGroups              []string `json:"as-groups"`
			Exec                  any      `json:"exec"`
			AuthProvider          any      `json:"auth-provider"`
		} `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster   string `json:"cluster"`
			User      string `json:"user"`
			Namespace string `json:"namespace"`
		} `json:"context"`
	} `json:"contexts"`
	CurrentContext string `json:"current-context"`
}

// Load reads the kubeconfig at path (or, for "", $KUBECONFIG's first
// file) and returns its context named context (or, for "", its current
// context). What it cannot honour is invalid input naming the setting.
func Load(path, context string) (*Config, error) {
	if path == "" {
		path, _, _ = strings.Cut(os.Getenv("KUBECONFIG"), string(os.PathListSeparator))
	}
	if path == "" {
		return nil, fmt.Errorf("%w: no kubeconfig: give --kubeconfig FILE or set KUBECONFIG (a cluster admin makes one; `kubectl config view --minify --flatten` prints yours)", errdefs.ErrInvalidArgument)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%w: kubeconfig %q: %v", errdefs.ErrInvalidArgument, path, err)
	}
	b, err := os.ReadFile(abs)
	if err != nil {
		return nil, fmt.Errorf("%w: reading kubeconfig: %v", errdefs.ErrInvalidArgument, err)
	}
	cfg, err := Parse(b, filepath.Dir(abs), context)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", abs, err)
	}
	cfg.Path = abs
	return cfg, nil
}

// Parse reads a kubeconfig's context (its current one for ""); relative
// file names in it are taken from dir.
func Parse(b []byte, dir, context string) (*Config, error) {
	var kc kubeconfig
	if err := yaml.Unmarshal(b, &kc); err != nil {
		return nil, fmt.Errorf("%w: not a kubeconfig: %v", errdefs.ErrInvalidArgument, err)
	}
	if context == "" {
		context = kc.CurrentContext
	}
	if context == "" {
		return nil, fmt.Errorf("%w: no current-context; give --context NAME, or set one with `kubectl config use-context NAME`", errdefs.ErrInvalidArgument)
	}
	cfg := &Config{Context: context, TLS: &tls.Config{MinVersion: tls.VersionTLS12}}
	var clusterName, userName string
	found := false
	for _, c := range kc.Contexts {
		if c.Name == context {
			clusterName, userName, cfg.Namespace, found = c.Context.Cluster, c.Context.User, c.Context.Namespace, true
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: no context %q (`kubectl config get-contexts` lists them)", errdefs.ErrInvalidArgument, context)
	}
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: context %q: %s", errdefs.ErrInvalidArgument, context, fmt.Sprintf(format, args...))
	}
	found = false
	for _, c := range kc.Clusters {
		if c.Name != clusterName {
			continue
		}
		found = true
		cl := c.Cluster
		u, err := url.Parse(cl.Server)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return nil, invalid("cluster %q: server %q: %s", clusterName, cl.Server, RefuseHTTP)
		}
		cfg.Server = strings.TrimSuffix(cl.Server, "/")
		if cl.InsecureSkipTLSVerify {
			return nil, invalid("cluster %q: %s", clusterName, RefuseInsecure)
		}
		if cl.ProxyURL != "" {
			return nil, invalid("cluster %q: proxy-url: airlock connects to the API server directly; remove it or use a kubeconfig without a proxy", clusterName)
		}
		ca, err := data(cl.CertificateAuthorityData, cl.CertificateAuthority, dir)
		if err != nil {
			return nil, invalid("cluster %q: certificate-authority: %v", clusterName, err)
		}
		if ca != nil {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(ca) {
				return nil, invalid("cluster %q: certificate-authority holds no PEM certificate", clusterName)
			}
			cfg.TLS.RootCAs = pool
		}
		cfg.TLS.ServerName = cl.TLSServerName
	}
	if !found {
		return nil, invalid("no cluster %q", clusterName)
	}
	found = false
	for _, us := range kc.Users {
		if us.Name != userName {
			continue
		}
		found = true
		u := us.User
		switch {
		case u.Exec != nil:
			return nil, invalid("user %q: %s", userName, RefuseExec)
		case u.AuthProvider != nil:
			return nil, invalid("user %q: %s", userName, RefuseAuthProvider)
		case u.Username != "" || u.Password != "":
			return nil, invalid("user %q: basic authentication (username, password), which Kubernetes removed; use a client certificate or a token", userName)
		case u.As != "" || len(u.AsGroups) > 0:
			return nil, invalid("user %q: impersonation (as, as-groups), which airlock does not do; use the identity's own credentials", userName)
		}
		cert, err := data(u.ClientCertificateData, u.ClientCertificate, dir)
		if err != nil {
			return nil, invalid("user %q: client-certificate: %v", userName, err)
		}
		key, err := data(u.ClientKeyData, u.ClientKey, dir)
		if err != nil {
			return nil, invalid("user %q: client-key: %v", userName, err)
		}
		switch {
		case cert != nil && key != nil:
			pair, err := tls.X509KeyPair(cert, key)
			if err != nil {
				return nil, invalid("user %q: client certificate and key: %v", userName, err)
			}
			cfg.TLS.Certificates = []tls.Certificate{pair}
		case cert != nil || key != nil:
			return nil, invalid("user %q: a client certificate needs both client-certificate and client-key", userName)
		}
		cfg.Token = u.Token
		if u.TokenFile != "" && cfg.Token == "" {
			t, err := readFile(rel(dir, u.TokenFile))
			if err != nil {
				return nil, invalid("user %q: tokenFile: %v", userName, err)
			}
			cfg.Token = strings.TrimSpace(string(t))
		}
		if cfg.Token == "" && cert == nil {
			return nil, invalid("user %q has no credentials airlock can use: give a client certificate and key, or a token", userName)
		}
	}
	if !found {
		return nil, invalid("no user %q", userName)
	}
	return cfg, nil
}

// data is a kubeconfig's inline base64 value, else its file's content
// (relative to dir), else nil.
func data(inline, file, dir string) ([]byte, error) {
	if inline != "" {
		b, err := base64.StdEncoding.DecodeString(inline)
		if err != nil {
			return nil, errors.New("the -data value is not base64")
		}
		return b, nil
	}
	if file == "" {
		return nil, nil
	}
	return readFile(rel(dir, file))
}

// maxFile caps a file a kubeconfig names (a CA, a certificate, a key, a
// token): each is a few KiB.
const maxFile = 1 << 20

// readFile reads name, a file a kubeconfig names, which must be a
// regular file of at most maxFile bytes: a FIFO or a device (/dev/zero)
// would hang Load or fill the memory.
func readFile(name string) ([]byte, error) {
	// O_NONBLOCK: a FIFO opens at once, and the check below refuses it.
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", name, fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFile {
		return nil, fmt.Errorf("%s is over %d bytes, more than a kubeconfig's file holds", name, maxFile)
	}
	return b, nil
}

func rel(dir, name string) string {
	if filepath.IsAbs(name) {
		return name
	}
	return filepath.Join(dir, name)
}
