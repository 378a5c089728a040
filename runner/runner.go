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
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/engine/docker"
	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/isolation"
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
}

// Runner runs specs on one engine.
type Runner struct {
	root   string
	engine engine.Engine
	log    *slog.Logger
}

// Option configures a Runner.
type Option func(*Runner)

// WithRoot sets airlock's state directory (default /var/lib/airlock).
func WithRoot(dir string) Option { return func(r *Runner) { r.root = dir } }

// WithEngine sets the engine; the default is Docker.
func WithEngine(e engine.Engine) Option { return func(r *Runner) { r.engine = e } }

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(r *Runner) { r.log = l } }

// New returns a Runner.
func New(opts ...Option) (*Runner, error) {
	r := &Runner{root: DefaultRoot, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(r)
	}
	if r.engine == nil {
		e, err := docker.New(docker.WithLogger(r.log))
		if err != nil {
			return nil, err
		}
		r.engine = e
	}
	return r, nil
}

// Run runs s with a default Runner.
func Run(ctx context.Context, s Spec) (Result, error) {
	r, err := New()
	if err != nil {
		return Result{}, err
	}
	return r.Run(ctx, s)
}

// Images returns the image index under the runner's root.
func (r *Runner) Images() *images.Index { return images.OpenIndex(filepath.Join(r.root, "images")) }

var (
	errTimeout     = errors.New("timeout")
	errOutputLimit = errors.New("output limit")
)

// Run converts and validates s, checks that the engine can run it, then runs
// it to the end. See the package comment for how outcomes are reported.
func (r *Runner) Run(ctx context.Context, s Spec) (Result, error) {
	job, err := r.plan(s)
	if err != nil {
		return Result{}, err
	}
	if err := r.engine.Check(ctx, job); err != nil {
		return Result{}, err
	}

	runCtx, kill := context.WithCancelCause(ctx)
	defer kill(nil)
	lim := int64(job.Policy.Limits.Output)
	stdout := newCapture(lim, s.Stdout, func() { kill(errOutputLimit) })
	stderr := newCapture(lim, s.Stderr, func() { kill(errOutputLimit) })
	job.Stdout, job.Stderr = stdout, stderr

	res := Result{
		ID:        job.ID,
		Image:     job.Image.String(),
		Engine:    r.engine.Name(),
		Isolation: string(job.Policy.Isolation),
		Limits:    limitsOf(job.Policy.Limits),
	}
	if ref, err := images.ParseRef(s.Image); err == nil && ref.Name != "" {
		res.ImageRef = ref.String()
	}
	begin := time.Now()
	exit, err := r.engine.Run(runCtx, job)
	res.Stdout, res.Stderr = stdout.stream(), stderr.stream()
	if err != nil {
		res.Reason = ReasonError
		res.Error = err.Error()
		res.ExitCode = -1
		res.DurationMS = time.Since(begin).Milliseconds()
		return res, err
	}
	res.ExitCode = exit.Code
	res.Reason = reasonOf(exit, context.Cause(runCtx))
	res.StartedAt, res.FinishedAt = exit.Started, exit.Finished
	res.DurationMS = exit.Finished.Sub(exit.Started).Milliseconds()
	r.log.Info("run ended", "sandbox_id", job.ID, "image_digest", job.Image.String(), "reason", res.Reason, "exit_code", res.ExitCode)
	return res, nil
}

// reasonOf decides why a run ended. airlock's own kills come first: a
// program killed at its timeout is a timeout even if it was also near its
// memory limit.
func reasonOf(exit engine.Exit, cause error) Reason {
	switch {
	case exit.TimedOut:
		return ReasonTimeout
	case exit.Killed && errors.Is(cause, errOutputLimit):
		return ReasonOutputLimit
	case exit.Killed:
		return ReasonKilled
	case exit.OOMKilled:
		return ReasonOOM
	}
	return ReasonExited
}

// plan converts a Spec into an engine job, refusing anything invalid.
func (r *Runner) plan(s Spec) (*engine.Job, error) {
	pol := s.Policy.WithDefaults()
	if err := pol.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	if err := checkArgv(s.Argv); err != nil {
		return nil, err
	}
	if err := checkEnv(s.Env); err != nil {
		return nil, err
	}
	var ref images.Ref
	if s.Image == "" {
		_, def, err := r.Images().Default()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errdefs.ErrNotFound, err)
		}
		ref = def
	} else {
		var err error
		if ref, err = images.ParseRef(s.Image); err != nil {
			return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
		}
	}
	id, err := newID()
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	return &engine.Job{
		ID:       id,
		Image:    ref.ID,
		Argv:     s.Argv,
		Env:      s.Env,
		Policy:   pol,
		Stdin:    s.Stdin,
		Owner:    fmt.Sprintf("%s/%d", host, os.Getpid()),
		Deadline: time.Now().Add(pol.Limits.Timeout + time.Minute),
	}, nil
}

func checkArgv(argv []string) error {
	if len(argv) == 0 || argv[0] == "" {
		return fmt.Errorf("%w: no command given: put it after `--`, for example `airlock run -- python3 -c 'print(1)'`", errdefs.ErrInvalidArgument)
	}
	for _, a := range argv {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("%w: argument %q contains a NUL byte", errdefs.ErrInvalidArgument, a)
		}
	}
	return nil
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func checkEnv(env []string) error {
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || !envName.MatchString(k) || strings.ContainsRune(kv, 0) {
			return fmt.Errorf("%w: environment entry %q must be NAME=VALUE, with NAME made of letters, digits and '_'", errdefs.ErrInvalidArgument, kv)
		}
	}
	return nil
}

// newID returns a run ID: 20 random hex digits. IDs are never reused.
func newID() (string, error) {
	var b [10]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("%w: generating a run id: %v", errdefs.ErrInternal, err)
	}
	return hex.EncodeToString(b[:]), nil
}
