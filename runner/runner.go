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
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/internal/safeopen"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/lifecycle"
	"github.com/airlock-sandbox/airlock/seccomp"
	"github.com/airlock-sandbox/airlock/units"
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
}

// Output is the sandbox's one writable directory besides /tmp. Zero fields
// take the defaults: /out, 64MiB, 1000 files, the default type allowlist,
// and check-and-report without delivery.
type Output struct {
	// Disabled turns the output directory off.
	Disabled bool
	// Dir is the path inside the sandbox.
	Dir string
	// Size caps the directory's bytes (kernel-enforced) and the total of
	// accepted artifacts.
	Size units.Bytes
	// Files caps the number of files.
	Files int
	// MaxFileSize caps one artifact; default Size.
	MaxFileSize units.Bytes
	// Types is the MIME allowlist; nil means artifacts.DefaultTypes.
	Types []string
	// Artifacts receives accepted files; empty means report only.
	Artifacts string
	// Quarantine, when set, keeps readable rejected files for inspection.
	Quarantine string
	// AllowDotfiles delivers paths with a component starting with '.'.
	AllowDotfiles bool
}

func (o Output) withDefaults() Output {
	if o.Dir == "" {
		o.Dir = "/out"
	}
	if o.Size == 0 {
		o.Size = 64 << 20
	}
	if o.Files == 0 {
		o.Files = 1000
	}
	if o.MaxFileSize == 0 {
		o.MaxFileSize = o.Size
	}
	return o
}

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

	keyOnce sync.Once
	key     ed25519.PrivateKey
	keyErr  error
}

// Option configures a Runner.
type Option func(*Runner)

// WithRoot sets airlock's state directory (default /var/lib/airlock).
func WithRoot(dir string) Option { return func(r *Runner) { r.root = dir } }

// WithEngine sets the engine; the default is Docker.
func WithEngine(e engine.Engine) Option { return func(r *Runner) { r.engine = e } }

// WithVersion sets the airlock version recorded in receipts.
func WithVersion(v string) Option { return func(r *Runner) { r.version = v } }

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(r *Runner) { r.log = l } }

// withLockWait shortens the run lock's bound, for tests.
func withLockWait(d time.Duration) Option { return func(r *Runner) { r.lockWait = d } }

// New returns a Runner.
func New(opts ...Option) (*Runner, error) {
	r := &Runner{root: DefaultRoot, log: slog.New(slog.DiscardHandler), version: "dev", lockWait: lockTimeout}
	for _, o := range opts {
		o(r)
	}
	if r.engine == nil {
		return nil, fmt.Errorf("%w: no engine: pass runner.WithEngine with one of engine/oci or engine/docker", errdefs.ErrInvalidArgument)
	}
	return r, nil
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
	s.Output = s.Output.withDefaults()
	if s.InputLimit == 0 {
		s.InputLimit = 256 << 20
	}
	for i := range s.Inputs {
		if s.Inputs[i].Sandbox == "" {
			s.Inputs[i].Sandbox = path.Join("/work", filepath.Base(filepath.Clean(s.Inputs[i].Host)))
		}
	}
	job, err := r.plan(s)
	if err != nil {
		return Result{}, err
	}
	if err := checkDestinations(s.Output); err != nil {
		return Result{}, err
	}
	if err := r.engine.Check(ctx, job); err != nil {
		return Result{}, err
	}
	// Receipts name the runtime's version: a runtime that cannot say fails
	// the run before anything is created.
	if _, err := r.engine.Runtime(ctx, job.Policy.Isolation); err != nil {
		return Result{}, err
	}
	lc, err := r.lifecycle()
	if err != nil {
		return Result{}, err
	}
	// Each wait for the run lock has a bound of its own: a run that lasts
	// longer than one must still wait for a destroyer at its teardown.
	lockCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), r.lockWait)
	}
	// The run lock is held while the sandbox is created and while it is
	// torn down, so a destroy that lands then waits (see lifecycle). Begin
	// refuses an audit log it cannot write before anything starts.
	bctx, cancel := lockCtx()
	held, err := lc.Begin(bctx, job.ID, map[string]any{
		"image": job.Image.String(), "engine": r.engine.Name(), "isolation": string(job.Policy.Isolation),
		"seccomp_profile_sha256": job.Policy.Seccomp.SHA256, "limits": limitsOf(job.Policy.Limits), "owner": job.Owner,
	})
	cancel()
	if err != nil {
		return Result{}, fmt.Errorf("%w: recording the run: %w", errdefs.ErrUnavailable, err)
	}
	release := func() {
		if held != nil {
			held.Release()
			held = nil
		}
	}
	defer release()
	// auditErr is the first audit event that could not be written: the
	// run then fails, whatever the program did.
	var auditErr error
	record := func(st lifecycle.State, errMsg string, extra map[string]any) {
		merr := lc.Move(job.ID, st, errMsg, extra)
		var ae *lifecycle.AuditError
		switch {
		case errors.As(merr, &ae):
			auditErr = cmp.Or(auditErr, merr)
		case merr != nil:
			r.log.Warn("recording state", "sandbox_id", job.ID, "state", st, "err", merr)
		}
	}
	// destroyed is set when, by the time this process comes to tear the run
	// down, another has destroyed it (airlock kill, or a reap past its
	// deadline). stateErr is set when teardown could not find out: the run
	// lock stayed held past its bound, or the state is unreadable.
	var destroyed, tornDown bool
	var stateErr error
	teardown := func() {
		if held != nil || tornDown {
			return
		}
		tornDown = true
		tctx, cancel := lockCtx()
		defer cancel()
		var lerr error
		if held, lerr = lc.Lock(tctx, job.ID); lerr != nil {
			stateErr = fmt.Errorf("%w: tearing the run down: %v; another airlock process (`airlock kill` or `airlock reap`) held its lock for more than %v", errdefs.ErrUnavailable, lerr, r.lockWait)
			return
		}
		rec, gerr := lc.Get(job.ID)
		if gerr != nil {
			stateErr = fmt.Errorf("%w: tearing the run down: %v; `airlock reap` removes what the run left", errdefs.ErrInternal, gerr)
			return
		}
		destroyed = rec.State == "" || rec.State == lifecycle.Terminating
	}
	state := func(st lifecycle.State) {
		if st == lifecycle.Terminating {
			teardown()
			if destroyed {
				return // the destroyer recorded it
			}
		}
		record(st, "", nil)
		if st == lifecycle.Created {
			release()
		}
	}
	res, err := r.execute(ctx, s, job, state, teardown)
	// A destroyer may hold the run lock now: wait for it to say.
	teardown()
	if destroyed {
		res.Reason, res.Error, res.ErrorKind = ReasonDestroyed, "another airlock process destroyed the run: `airlock kill`, or `airlock reap` after its deadline passed", ""
		res.Receipt = nil
		// The destroyer recorded the transitions; the summary is this
		// process's to give.
		ev := auditSummary(res, nil)
		ev["event"], ev["run_id"] = "result", job.ID
		if aerr := lc.Audit().Append(ev); aerr != nil {
			err = fmt.Errorf("another airlock process destroyed the run, and its result was not recorded: %w", aerr)
			res.Reason, res.Error = ReasonError, err.Error()
			return res, err
		}
		return res, nil
	}
	if stateErr != nil {
		// The engine's error, if any, stays first.
		err = also(err, stateErr)
		res.Reason, res.Error, res.Receipt = ReasonError, err.Error(), nil
	}
	if err != nil {
		// The state and the audit log keep why: a lost sandbox, a daemon
		// that went away, a runtime that failed.
		record(lifecycle.Failed, err.Error(), nil)
	}
	state(lifecycle.Terminating)
	record(lifecycle.Terminated, "", auditSummary(res, err))
	if auditErr != nil {
		err = also(err, fmt.Errorf("recording the run: %w", auditErr))
		res.Reason, res.Error, res.Receipt = ReasonError, err.Error(), nil
	}
	return res, err
}

// also adds more to err, keeping err first; either may be nil.
func also(err, more error) error {
	if err == nil {
		return more
	}
	return fmt.Errorf("%w; and %w", err, more)
}

// lockTimeout bounds the wait for a run's own lock: a destroy in progress
// holds it while it kills and removes the sandbox.
const lockTimeout = 2 * time.Minute

// execute runs a planned, checked job: scratch, then a one-shot sandbox
// created, waited for and destroyed, then artifacts and the receipt. state
// hears the sandbox become created, ready, running and terminating. When
// the run fails, teardown runs before the run directory goes, so a
// destroyer at work on it finishes first.
func (r *Runner) execute(ctx context.Context, s Spec, job *engine.SandboxSpec, state func(lifecycle.State), teardown func()) (res Result, err error) {
	sc, err := prepareScratch(ctx, r.root, job.ID, &s, job.Policy.UID, job.Policy.GID, job.Deadline)
	if err != nil {
		return Result{}, err
	}
	defer func() {
		if err != nil {
			teardown()
		}
		if err := sc.cleanup(); err != nil {
			r.log.Warn("cleaning up run directory", "sandbox_id", job.ID, "err", err)
		}
	}()
	job.Mounts = sc.mounts

	runCtx, kill := context.WithCancelCause(ctx)
	defer kill(nil)
	lim := int64(job.Policy.Limits.Output)
	stdout := newCapture(lim, s.Stdout, func() { kill(errOutputLimit) })
	stderr := newCapture(lim, s.Stderr, func() { kill(errOutputLimit) })
	job.Init.Stdout, job.Init.Stderr = stdout, stderr

	res = Result{
		ID:        job.ID,
		Image:     job.Image.String(),
		Engine:    r.engine.Name(),
		Isolation: string(job.Policy.Isolation),
		Seccomp:   job.Policy.Seccomp.SHA256,
		Limits:    limitsOf(job.Policy.Limits),
	}
	if ref, err := images.ParseRef(s.Image); err == nil && ref.Name != "" {
		res.ImageRef = ref.String()
	}
	begin := time.Now()
	exit, err := r.runOnce(ctx, runCtx, job, state)
	res.Stdout, res.Stderr = stdout.stream(), stderr.stream()
	if err == nil {
		// A failed run goes through failed first; Run records it.
		state(lifecycle.Terminating)
	}
	if err != nil {
		res.Reason = ReasonError
		res.Error = err.Error()
		res.ExitCode = -1
		res.DurationMS = time.Since(begin).Milliseconds()
		return res, err
	}
	res.ExitCode = exit.Code
	res.Reason = reasonOf(exit, context.Cause(runCtx))
	res.Usage = Usage{CPUMS: exit.Usage.CPU.Milliseconds(), MemoryPeakBytes: exit.Usage.MemoryPeak, PidsPeak: exit.Usage.PidsPeak}
	if sc.out != "" {
		// The engine has removed the sandbox: no process is left to race
		// the scan.
		o := s.Output
		rep, err := artifacts.Collect(context.WithoutCancel(ctx), sc.out, artifacts.Options{
			Dest: o.Artifacts, Quarantine: o.Quarantine,
			MaxFileBytes: int64(o.MaxFileSize), MaxTotalBytes: int64(o.Size), MaxFiles: o.Files,
			Types: o.Types, AllowDotfiles: o.AllowDotfiles,
		})
		res.Artifacts, res.Rejected = rep.Artifacts, rep.Rejected
		if err != nil {
			res.Reason, res.Error = ReasonError, err.Error()
			return res, fmt.Errorf("%w: collecting artifacts: %v", errdefs.ErrInternal, err)
		}
	}
	res.StartedAt, res.FinishedAt = exit.Started, exit.Finished
	res.DurationMS = exit.Finished.Sub(exit.Started).Milliseconds()
	if err = r.sign(ctx, job, s, &res, sc.inputs); err != nil {
		res.Reason, res.Error = ReasonError, err.Error()
		return res, err
	}
	r.log.Info("run ended", "sandbox_id", job.ID, "image_digest", job.Image.String(), "reason", res.Reason, "exit_code", res.ExitCode)
	return res, nil
}

// runOnce runs job on the engine as a one-shot sandbox: create (with the
// program as its only process), wait, destroy. ctx bounds nothing but the
// destroy's parent; runCtx's end kills the program.
func (r *Runner) runOnce(ctx, runCtx context.Context, job *engine.SandboxSpec, state func(lifecycle.State)) (engine.Exit, error) {
	sb, err := r.engine.Create(runCtx, job)
	if err != nil {
		return engine.Exit{}, err
	}
	// The program runs from here: a destroyer may now come in (state
	// releases the run lock at created).
	for _, st := range []lifecycle.State{lifecycle.Created, lifecycle.Ready, lifecycle.Running} {
		state(st)
	}
	exit, err := sb.Wait(runCtx)
	// The sandbox goes before anything reads what it wrote.
	if derr := sb.Destroy(context.WithoutCancel(ctx)); derr != nil {
		err = also(err, derr)
	}
	return exit, err
}

// reasonOf decides why a run ended. airlock's own kills come first: a
// program killed at its timeout is a timeout even if it was also near its
// memory limit. Then the kernel's: OOM, then a refused fork.
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
	case exit.PidsLimited && exit.Code != 0:
		return ReasonPidsLimit
	}
	return ReasonExited
}

// plan converts a Spec into a one-shot sandbox's spec, refusing anything
// invalid.
func (r *Runner) plan(s Spec) (*engine.SandboxSpec, error) {
	pol := s.Policy.WithDefaults()
	if pol.Seccomp == nil {
		prof, err := r.loadSeccomp(s.SeccompProfile, pol.Isolation)
		if err != nil {
			return nil, err
		}
		pol.Seccomp = prof
	}
	if err := pol.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	if err := checkArgv(s.Argv); err != nil {
		return nil, err
	}
	if err := checkEnv(s.Env); err != nil {
		return nil, err
	}
	if err := checkFiles(s); err != nil {
		return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
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
	return &engine.SandboxSpec{
		ID:       id,
		Image:    ref.ID,
		Init:     &engine.Process{Argv: s.Argv, Stdin: s.Stdin},
		Env:      s.Env,
		Policy:   pol,
		Workdir:  s.Workdir,
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

// checkFiles validates inputs, the working directory and the output
// directory: sandbox paths must be absolute, clean, off the system's
// directories, and distinct.
func checkFiles(s Spec) error {
	seen := map[string]string{}
	claim := func(p, what string) error {
		if err := checkSandboxPath(p); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		for q, other := range seen {
			if p == q || strings.HasPrefix(p, q+"/") || strings.HasPrefix(q, p+"/") {
				return fmt.Errorf("%s at %s overlaps %s at %s", what, p, other, q)
			}
		}
		seen[p] = what
		return nil
	}
	if !s.Output.Disabled {
		if err := claim(s.Output.Dir, "the output directory"); err != nil {
			return err
		}
		if s.Output.Size < 1<<20 || s.Output.Files < 1 || s.Output.MaxFileSize < 1 {
			return fmt.Errorf("the output directory needs at least 1MiB and 1 file")
		}
	}
	for _, in := range s.Inputs {
		if in.Host == "" {
			return fmt.Errorf("an input needs a host path")
		}
		if err := claim(in.Sandbox, "input "+in.Host); err != nil {
			return err
		}
	}
	if s.Workdir != "" && (!path.IsAbs(s.Workdir) || path.Clean(s.Workdir) != s.Workdir) {
		return fmt.Errorf("workdir %q must be an absolute, clean path", s.Workdir)
	}
	if s.InputLimit < 0 {
		return fmt.Errorf("input limit must be positive")
	}
	return nil
}

// loadSeccomp reads and compiles the named profile file, or airlock's
// default. A profile that cannot be applied is an error, never skipped.
func (r *Runner) loadSeccomp(file string, mode isolation.Mode) (*isolation.SeccompProfile, error) {
	var p *seccomp.Profile
	var err error
	var raw []byte
	if file != "" {
		if raw, err = os.ReadFile(file); err != nil {
			return nil, fmt.Errorf("%w: seccomp profile: %v", errdefs.ErrNotFound, err)
		}
	}
	cache := r.seccompCacheFile(raw, mode)
	if prof := readCachedProfile(cache); prof != nil {
		return prof, nil
	}
	if file == "" {
		p, err = seccomp.Load("default")
	} else {
		p, err = seccomp.ParseCustom(raw) // only narrows the default
	}
	if err == nil && mode == isolation.GVisor {
		p, err = seccomp.ForGVisor(p)
	}
	if err == nil {
		err = seccomp.Validate(p)
	}
	switch {
	case errors.Is(err, seccomp.ErrNotSupported):
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	case err != nil:
		return nil, fmt.Errorf("%w: seccomp profile %s: %v", errdefs.ErrInvalidArgument, cmpOr(file, "default"), err)
	}
	prof := &isolation.SeccompProfile{JSON: p.Bytes(), Spec: p.Spec(), SHA256: p.SHA256()}
	writeCachedProfile(cache, prof)
	return prof, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// lifecycle opens the state store and audit log under the root, once.
func (r *Runner) lifecycle() (*lifecycle.Store, error) {
	r.lcOnce.Do(func() { r.lc, r.lcErr = lifecycle.Open(r.root) })
	if r.lcErr != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, r.lcErr)
	}
	return r.lc, nil
}

// auditSummary is what the audit log keeps of a finished run: never the
// output itself, only its size and hash.
func auditSummary(res Result, err error) map[string]any {
	ev := map[string]any{
		"reason": string(res.Reason), "exit_code": res.ExitCode, "duration_ms": res.DurationMS, "usage": res.Usage,
		"stdout": map[string]any{"bytes": res.Stdout.Bytes, "sha256": res.Stdout.SHA256},
		"stderr": map[string]any{"bytes": res.Stderr.Bytes, "sha256": res.Stderr.SHA256},
	}
	if res.Receipt != nil {
		ev["policy_sha256"] = res.Receipt.Receipt.PolicySHA256
		ev["argv_sha256"] = res.Receipt.Receipt.ArgvSHA256
	}
	var arts, rej []map[string]any
	for _, a := range res.Artifacts {
		arts = append(arts, map[string]any{"path": a.Path, "size": a.Size, "sha256": a.SHA256, "mime": a.MIME})
	}
	for _, x := range res.Rejected {
		rej = append(rej, map[string]any{"path": x.Path, "reason": string(x.Reason)})
	}
	ev["artifacts"], ev["rejected"] = arts, rej
	if err != nil {
		ev["error"] = err.Error()
	}
	return ev
}

// checkDestinations opens the artifact and quarantine directories before
// anything runs, so an unsafe one (a planted symlink, another user's
// directory) is refused as input, not found after the program ran.
func checkDestinations(o Output) error {
	for _, d := range []struct{ flag, path string }{{"--artifacts", o.Artifacts}, {"--quarantine", o.Quarantine}} {
		if d.path == "" || o.Disabled {
			continue
		}
		f, err := safeopen.Dir(d.path)
		if err != nil {
			if errors.Is(err, safeopen.ErrUnsafe) {
				return fmt.Errorf("%w: %s: %w", errdefs.ErrInvalidArgument, d.flag, err)
			}
			return fmt.Errorf("%w: %s: %w", errdefs.ErrUnavailable, d.flag, err)
		}
		f.Close()
	}
	return nil
}
