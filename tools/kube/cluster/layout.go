package cluster

import (
	"os"
	"path/filepath"
)

// DefaultRoot is airlock's root unless AIRLOCK_ROOT says otherwise; it is
// runner.DefaultRoot of the main module, which this module does not import.
const DefaultRoot = "/var/lib/airlock"

// Layout names the files of one control plane under <root>/kube.
type Layout struct {
	// Dir is <root>/kube.
	Dir string
}

// NewLayout returns the layout under root, or under $AIRLOCK_ROOT (else
// DefaultRoot) when root is empty.
func NewLayout(root string) Layout {
	if root == "" {
		root = os.Getenv("AIRLOCK_ROOT")
	}
	if root == "" {
		root = DefaultRoot
	}
	return Layout{Dir: filepath.Join(root, "kube")}
}

// Kubeconfig is the admin kubeconfig.
func (l Layout) Kubeconfig() string { return filepath.Join(l.Dir, "kubeconfig") }

// KubectlDir holds kubectl, a link to the one built with the control
// plane, for a PATH; Down removes it.
func (l Layout) KubectlDir() string { return filepath.Join(l.Run(), "bin") }

// Kubectl is the kubectl of the control plane's own release.
func (l Layout) Kubectl() string { return filepath.Join(l.KubectlDir(), "kubectl") }

// ExportLine is the shell line that points kubectl at the control plane:
// its admin kubeconfig, and its own kubectl first on PATH.
func (l Layout) ExportLine() string {
	return "export KUBECONFIG=" + l.Kubeconfig() + " PATH=" + l.KubectlDir() + ":$PATH"
}

// Bin is where the built binaries are kept, one directory per module and
// go.sum hash.
func (l Layout) Bin() string { return filepath.Join(l.Dir, "bin") }

// Run holds the runtime state that Down removes.
func (l Layout) Run() string { return filepath.Join(l.Dir, "run") }

// PKI holds the CA, the certificates and the service-account key pair.
func (l Layout) PKI() string { return filepath.Join(l.Run(), "pki") }

// Conf holds the components' kubeconfigs.
func (l Layout) Conf() string { return filepath.Join(l.Run(), "conf") }

// LogDir holds the components' logs.
func (l Layout) LogDir() string { return filepath.Join(l.Run(), "log") }

// Log is the log file of the named component.
func (l Layout) Log(name string) string { return filepath.Join(l.LogDir(), name+".log") }

// PidDir holds the components' pid files.
func (l Layout) PidDir() string { return filepath.Join(l.Run(), "pid") }

// PidFile holds the pid of the named component.
func (l Layout) PidFile(name string) string { return filepath.Join(l.PidDir(), name+".pid") }

// PortsFile records the ports the control plane listens on, one
// "name port" per line.
func (l Layout) PortsFile() string { return filepath.Join(l.Run(), "ports") }

// BinariesFile records the binaries the running control plane was started
// from, one path a line.
func (l Layout) BinariesFile() string { return filepath.Join(l.Run(), "binaries") }
