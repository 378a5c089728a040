// Package runner is airlock's embeddable API: describe a run with a Spec,
// call Run, and get back a Result that says exactly how it ended.
//
// Three outcome families stay apart:
//   - invalid input (a tag-only image, a bad limit) is an error wrapping
//     errdefs.ErrInvalidArgument or errdefs.ErrNotFound, returned before
//     anything is created;
//   - an engine failure is an error wrapping errdefs.ErrUnavailable or
//     errdefs.ErrInternal, with a Result whose Reason is ReasonError when a
//     sandbox had been created;
//   - the program's own outcome (exit code, timeout, OOM, output limit) is
//     the Result, with a nil error.
package runner

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/lifecycle"
	"github.com/airlock-sandbox/airlock/units"
	"github.com/airlock-sandbox/airlock/wire"
)

// DefaultRoot is where airlock keeps its state unless told otherwise.
const DefaultRoot = "/var/lib/airlock"

// Spec describes one run. Zero fields take the defaults of
// isolation.Default(); no field can widen the sandbox.
type Spec struct {
	// Image is a digest-pinned reference ("name@sha256:…" or "sha256:…").
	// Empty means the default image recorded by setup.
	Image string
	// Argv is the program and its arguments. It is never passed to a shell.
	Argv []string
	// Env holds "K=V" entries. Only these (and the image's own) reach the
	// program; airlock's environment never does.
	Env []string
	// Stdin feeds the program; nil means its stdin is closed.
	Stdin io.Reader
	// Policy narrows the sandbox. Zero fields take the defaults.
	Policy isolation.Policy
	// Stdout and Stderr, when set, receive the program's output live, up to
	// the output cap.
	Stdout, Stderr io.Writer
	// Inputs are copied in read-only; InputLimit caps their total size
	// (default 256MiB).
	Inputs     []Input
	InputLimit units.Bytes
	// Workdir is the program's working directory (default: the image's).
	Workdir string
	// Output is the writable output directory and what may leave it.
	Output Output
	// SeccompProfile is a profile file (Docker/OCI JSON) to use instead of
	// airlock's default; ignored when Policy.Seccomp is set.
	SeccompProfile string
	// JobID and ExpectedStdout are a batch job's: the receipt binds the
	// job id and the verdict (see BatchResult.Pass).
	JobID          string
	ExpectedStdout *string
	// DeliverByRun puts the run's delivered and quarantined files in a
	// directory of its own beneath Output.Artifacts and Output.Quarantine,
	// named by the run's ID (DIR/<id>/), so that runs sharing those
	// directories (a batch's jobs) cannot take or plant each other's
	// names. A batch result's ArtifactsDir and QuarantineDir name them.
	DeliverByRun bool
}

// Input puts a host file or directory into the sandbox, read-only.
type Input struct {
	// Host is the path on this machine. Symlinks below it are not followed.
	Host string
	// Beneath, when set, confines Host: a relative path resolved beneath
	// this directory, through no symlink (batch inputs).
	Beneath string
	// Sandbox is where it appears; default /work/<base name of Host>.
	Sandbox string

	// private are the files this input may not hold, at any depth: a
	// batch's jobs and results files (BatchOptions.JobsFile).
	private []privateFile
}

// Output is the sandbox's one writable directory besides /tmp. Zero fields
// take the defaults (wire.Output.WithDefaults): /out, 64MiB, 1000 files,
// the default type allowlist, and check-and-report without delivery.
type Output = wire.Output

// Runner runs specs on one engine.
type Runner struct {
	lcOnce sync.Once
	lc     *lifecycle.Store
	lcErr  error

	root    string
	engine  engine.Engine
	log     *slog.Logger
	version string
	// lockWait bounds each wait for a run's own lock (default lockTimeout).
	lockWait time.Duration
	// supervisor is the command that enforces a sandbox's deadlines.
	supervisor func(id string) []string
	// ceil bounds what any spec may ask for.
	ceil Ceilings

	keyOnce sync.Once
	key     ed25519.PrivateKey
	keyErr  error
}

// Option configures a Runner.
type Option func(*Runner)

// WithRoot sets airlock's state directory (default /var/lib/airlock). New
// makes it absolute and resolves its symlinks (ResolveRoot).
func WithRoot(dir string) Option { return func(r *Runner) { r.root = dir } }

// WithEngine sets the engine; it is required (the library picks none).
func WithEngine(e engine.Engine) Option { return func(r *Runner) { r.engine = e } }

// WithVersion sets the airlock version recorded in receipts.
func WithVersion(v string) Option { return func(r *Runner) { r.version = v } }

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(r *Runner) { r.log = l } }

// Ceilings are an operator's upper bounds on the limits any run, sandbox
// or exec may ask for (airlock serve's --max-memory, --max-output-limit,
// --max-egress-limit, --max-timeout and --max-ttl). A request over one is
// invalid input, never cut down. Zero fields bound nothing.
type Ceilings struct {
	// Memory bounds /tmp's size too: a tmpfs is memory, and an upload's
	// pages there are charged to the airlock process, not the sandbox.
	Memory    units.Bytes
	Output    units.Bytes
	Egress    units.Bytes
	Workspace units.Bytes
	Timeout   time.Duration
	TTL       time.Duration
	// Command is the command whose flags set them, named in a refusal:
	// "airlock serve" when empty, or "airlock node".
	Command string
}

// WithCeilings bounds every spec the runner takes, whichever face made
// it: runs (pooled or cold), sandboxes and execs.
func WithCeilings(c Ceilings) Option { return func(r *Runner) { r.ceil = c } }

// asked are a spec's values that ceilings bound.
type asked struct {
	Memory, Tmp, Output, Egress, Workspace units.Bytes
	Timeout, TTL                           time.Duration
}

// check refuses the values asked (zero ones are not checked) that are over
// a ceiling, naming the field, the ceiling and the flag that sets it.
func (c Ceilings) check(asked asked) error {
	var errs []error
	cmd, holder := c.Command, "server"
	if cmd == "" {
		cmd = "airlock serve"
	} else if cmd == "airlock node" {
		holder = "node"
	}
	over := func(field string, v, max any, flag string) {
		errs = append(errs, fmt.Errorf("%s %v is above this %s's ceiling of %v (%s --%s): ask for at most %v", field, v, holder, max, cmd, flag, max))
	}
	if c.Timeout > 0 && asked.Timeout > c.Timeout {
		over("timeout", asked.Timeout, c.Timeout, "max-timeout")
	}
	if c.TTL > 0 && asked.TTL > c.TTL {
		over("ttl", asked.TTL, c.TTL, "max-ttl")
	}
	if c.Memory > 0 && asked.Memory > c.Memory {
		over("memory", asked.Memory, c.Memory, "max-memory")
	}
	if c.Memory > 0 && asked.Tmp > c.Memory {
		over("tmp size", asked.Tmp, c.Memory, "max-memory")
	}
	if c.Workspace > 0 && asked.Workspace > c.Workspace {
		over("workspace size", asked.Workspace, c.Workspace, "max-workspace-size")
	}
	if c.Output > 0 && asked.Output > c.Output {
		over("output limit", asked.Output, c.Output, "max-output-limit")
	}
	if c.Egress > 0 && asked.Egress > c.Egress {
		over("egress limit", asked.Egress, c.Egress, "max-egress-limit")
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	return nil
}

// withLockWait shortens the run lock's bound, for tests.
func withLockWait(d time.Duration) Option { return func(r *Runner) { r.lockWait = d } }

// New returns a Runner.
func New(opts ...Option) (*Runner, error) {
	r := &Runner{root: DefaultRoot, log: slog.New(slog.DiscardHandler), version: "dev", lockWait: lockTimeout}
	for _, o := range opts {
		o(r)
	}
	r.root = ResolveRoot(r.root)
	if r.engine == nil {
		return nil, fmt.Errorf("%w: no engine: pass runner.WithEngine with one of engine/oci or engine/docker", errdefs.ErrInvalidArgument)
	}
	return r, nil
}

// EngineName is the name of the runner's engine ("oci", "docker").
func (r *Runner) EngineName() string { return r.engine.Name() }

// Images returns the image index under the runner's root.
func (r *Runner) Images() *images.Index { return images.OpenIndex(filepath.Join(r.root, "images")) }

// lifecycle opens the state store and audit log under the root, once.
func (r *Runner) lifecycle() (*lifecycle.Store, error) {
	r.lcOnce.Do(func() { r.lc, r.lcErr = lifecycle.Open(r.root) })
	if r.lcErr != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, r.lcErr)
	}
	return r.lc, nil
}
