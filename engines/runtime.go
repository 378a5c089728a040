package engines

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/doctor"
	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/engine/docker"
	"github.com/airlock-sandbox/airlock/engine/oci"
	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/internal/rootonly"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
)

// The docker engine runs gVisor under a runtime registered with dockerd
// for its root: DefaultRuntime for the default root, a name of its own
// recorded in <root>/RuntimeRecord for any other that registered one.
const (
	DaemonJSON    = docker.DaemonJSON
	RuntimeRecord = "docker-runtime"
)

// DefaultRuntime is the default root's runtime name.
var DefaultRuntime = docker.DefaultRuntime

// RuntimeName is the name root's runsc is registered under: the recorded
// one, else DefaultRuntime for the default root and a name derived from
// the path for any other.
func RuntimeName(root string) (string, error) {
	name, ok, err := recordedRuntime(root)
	if err != nil || ok {
		return name, err
	}
	root = filepath.Clean(root)
	if isDefaultRoot(root) {
		return DefaultRuntime, nil
	}
	sum := sha256.Sum256([]byte(root))
	return DefaultRuntime + "-" + hex.EncodeToString(sum[:])[:10], nil
}

// RuntimeArgs are the runsc flags dockerd passes for root's sandboxes:
// airlock's isolation flags and a log per sandbox under
// <root>/sandbox-logs, which the engine reads to tell a sandbox killed
// from the host apart from the program's own exit.
func RuntimeArgs(root string) []string {
	return append(isolation.RunscFlags(),
		engine.GVisorLogFlags(filepath.Join(root, "sandbox-logs", "%ID%"), "boot")...)
}

// Install says what InstallRuntime registers.
type Install struct {
	// Runsc is the runsc binary's path.
	Runsc string
	// Name is the runtime's name; "" for RuntimeName's.
	Name string
	// Args are runsc's flags; nil for RuntimeArgs'.
	Args []string
	// DaemonJSON is dockerd's configuration file; "" for DaemonJSON.
	DaemonJSON string
	// Replace re-points an entry of that name that runs another runsc.
	Replace bool
	// Check only says whether the registration would change the file, or
	// refuses as it would: nothing is written, in root or dockerd's
	// configuration.
	Check bool
}

// Installed is what InstallRuntime did.
type Installed struct {
	Name, Runsc string
	Changed     bool
	// Backup is where the configuration file was copied before it was
	// changed, if it existed.
	Backup string
}

// InstallRuntime registers root's runsc with dockerd, keeping every other
// setting in its configuration, and records the name in root for its
// docker engine.
func InstallRuntime(root string, in Install) (Installed, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return Installed{}, fmt.Errorf("%w: root %q: %w", errdefs.ErrInvalidArgument, root, err)
	}
	abs, err := filepath.Abs(in.Runsc)
	if err != nil {
		return Installed{}, fmt.Errorf("%w: runsc %q: %w", errdefs.ErrInvalidArgument, in.Runsc, err)
	}
	fi, err := os.Stat(abs)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return Installed{}, fmt.Errorf("%w: runsc %q is not an executable file; build it with `make setup`", errdefs.ErrNotFound, in.Runsc)
	}
	// dockerd runs it as root for every container.
	if err := rootonly.Check(abs); err != nil {
		var e *rootonly.Error
		if errors.As(err, &e) {
			return Installed{}, fmt.Errorf("%w: runsc %s: %v, and dockerd would run what they put there as root; %s", errdefs.ErrInvalidArgument, abs, e, e.Fix())
		}
		return Installed{}, fmt.Errorf("checking runsc %s: %w", abs, err)
	}
	if in.Args == nil {
		in.Args = RuntimeArgs(root)
	}
	if in.DaemonJSON == "" {
		in.DaemonJSON = DaemonJSON
	}
	if in.Name == "" {
		if in.Name, err = RuntimeName(root); err != nil {
			return Installed{}, err
		}
	} else if err := CheckRuntimeName(in.Name); err != nil {
		return Installed{}, err
	}
	rt := docker.Runtime{Path: abs, RuntimeArgs: in.Args}
	if in.Check {
		changed, err := docker.CheckRuntime(in.DaemonJSON, in.Name, rt, in.Replace)
		return Installed{Name: in.Name, Runsc: abs, Changed: changed}, err
	}
	if err := privateDir(filepath.Join(root, "sandbox-logs")); err != nil {
		return Installed{}, err
	}
	changed, backup, err := docker.RegisterRuntime(in.DaemonJSON, in.Name, rt, in.Replace)
	if err != nil {
		return Installed{}, err
	}
	p := filepath.Join(root, RuntimeRecord)
	if err := atomicfile.WriteFile(p, []byte(in.Name+"\n"), 0o600); err != nil {
		return Installed{}, fmt.Errorf("recording the runtime name in %s: %w", p, err)
	}
	return Installed{Name: in.Name, Runsc: abs, Changed: changed, Backup: backup}, nil
}

var runtimeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// CheckRuntimeName refuses a name dockerd's configuration should not hold.
func CheckRuntimeName(name string) error {
	if !runtimeNameRE.MatchString(name) {
		return fmt.Errorf("%w: runtime name %q: use up to 64 letters, digits, '_', '.' or '-', starting with a letter or digit", errdefs.ErrInvalidArgument, name)
	}
	return nil
}

// recordedRuntime is the name recorded in root, if any.
func recordedRuntime(root string) (string, bool, error) {
	p := filepath.Join(root, RuntimeRecord)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("reading %s: %w", p, err)
	}
	name := strings.TrimSpace(string(b))
	if err := CheckRuntimeName(name); err != nil {
		return "", false, fmt.Errorf("%s: %w; register the root's runsc again with `airlock host install-runtime --name NAME`", p, err)
	}
	return name, true, nil
}

// isDefaultRoot reports whether root is the default root, as given or
// through a symlink.
func isDefaultRoot(root string) bool {
	return filepath.Clean(root) == runner.DefaultRoot || runner.ResolveRoot(root) == runner.ResolveRoot(runner.DefaultRoot)
}

// engineRuntime is the runtime root's docker engine runs gVisor under: the
// recorded name, else DefaultRuntime (a root that registered nothing of
// its own uses the default root's).
func engineRuntime(root string) (string, error) {
	name, ok, err := recordedRuntime(root)
	if err != nil || ok {
		return name, err
	}
	return DefaultRuntime, nil
}

// privateDir makes dir, or narrows it, to mode 0700.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("making %s private: %w", dir, err)
	}
	return nil
}

// DockerImages is dockerd's image store, as image commands use it.
type DockerImages interface {
	images.Loader
	ImageInUse(ctx context.Context, id digest.Digest) (bool, error)
	Close() error
}

// DockerImages returns dockerd's image store, through the root's docker
// engine. It may not be reachable: Ping says.
func (h *Host) DockerImages() (DockerImages, error) { return h.docker() }

// Doctor fills in what o's checks need to know of the engines: where
// setup installs runsc and the exec agent, dockerd's runtime checks, and
// whose registration the root's docker engine runs under (a record it
// cannot read is the docker runtime check's to report). done closes the
// engine those checks use.
func (h *Host) Doctor(o *doctor.Options) (done func(), err error) {
	root, err := filepath.Abs(h.root)
	if err != nil {
		return nil, fmt.Errorf("%w: root %q: %w", errdefs.ErrInvalidArgument, h.root, err)
	}
	o.Root, o.Runsc, o.Agent = root, oci.RunscPath(root), oci.AgentPath(root)
	o.RuntimeOwner, o.RuntimeRunsc = root, o.Runsc
	_, recorded, err := recordedRuntime(root)
	if err != nil {
		o.RuntimeRecordErr = err
		return func() {}, nil // no docker engine runs on this root
	}
	if !recorded && !isDefaultRoot(root) {
		// It shares the default root's registration.
		o.RuntimeOwner, o.RuntimeRunsc = runner.DefaultRoot, oci.RunscPath(runner.DefaultRoot)
	}
	o.RuntimeArgs = RuntimeArgs(o.RuntimeOwner)
	eng, err := h.docker()
	if err != nil {
		return func() {}, nil
	}
	o.DockerRuntime = eng.CheckRuntime
	o.DockerRegistered = func(ctx context.Context) (doctor.RuntimeEntry, error) {
		r, err := eng.Registered(ctx)
		return doctor.RuntimeEntry{Name: r.Name, Found: r.Found, Path: r.Path, Args: r.Args}, err
	}
	return func() { eng.Close() }, nil
}
