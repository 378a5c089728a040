package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/lifecycle"
	"github.com/airlock-sandbox/airlock/receipt"
	"github.com/airlock-sandbox/airlock/units"
)

// A long-lived sandbox is created once, runs many execs, moves files in
// and out, and is destroyed once. It keeps two records:
//   - its lifecycle state (<root>/state/<id>.json): requested → created →
//     ready ⇄ running → terminating → terminated, ready ⇄ paused
//     (sandbox_pause.go), or failed (sandbox lost) and expired (TTL or
//     idle timeout);
//   - its reconnect record (<root>/sandboxes/<id>.json, SandboxInfo): the
//     image, engine, policy, areas, labels and deadlines, updated under
//     <root>/sandboxes/.lock.
// Its areas (workspace, /tmp, /out) live in <root>/sandboxes/<id>/.

// Defaults of a SandboxSpec.
const (
	DefaultIdleTimeout = 15 * time.Minute
	DefaultTTL         = time.Hour
)

// SandboxSpec describes a long-lived sandbox: the policy fields of a Spec,
// without a program. Zero fields take the defaults.
type SandboxSpec struct {
	// Image is a digest-pinned reference; empty means the default image.
	Image string
	// Env holds "K=V" entries every exec starts with.
	Env            []string
	Policy         isolation.Policy
	SeccompProfile string
	// Output is the output directory (default /out, 64MiB).
	Output Output
	// IdleTimeout ends the sandbox once no exec has run for this long;
	// TTL ends it this long after its creation, whatever it does.
	IdleTimeout, TTL time.Duration
	// WorkspaceSize caps /home/user (default 1GiB).
	WorkspaceSize units.Bytes
	Labels        map[string]string
	// DownloadTypes is the download allowlist; nil means the sessions
	// default (the scanner's types plus source code as text).
	DownloadTypes []string
	// Inputs are copied in read-only when the sandbox is made, as a run's
	// are (default under /work); InputLimit caps their total size
	// (default 256MiB).
	Inputs     []Input
	InputLimit units.Bytes
	// Snapshot names a snapshot of the engine's (engine.Snapshotter, a
	// template's: see Runner.Snapshot) to restore the sandbox from instead
	// of booting it: its processes run on where the snapshot stopped them,
	// in the sandbox's own new areas. The snapshot must have been taken
	// under this exact image and policy; a sandbox restored from one takes
	// no Inputs at create.
	Snapshot string

	// pool, set by a warm pool, leaves the sandbox created, for the pool
	// to record pooled; a claim makes it ready.
	pool string
	// OneShot makes the sandbox one job's (a restored run's, a /run_code
	// answer's): its TTL, the job's timeout and a grace, is held to the
	// ceiling on timeouts with the job, not to the TTL's (--max-ttl).
	OneShot bool
}

// ExecSpec is one program run in a live sandbox.
type ExecSpec struct {
	Argv []string
	// Env is added to the sandbox's environment.
	Env     []string
	Workdir string
	Stdin   io.Reader
	// Stdout and Stderr receive the output live, up to OutputLimit.
	Stdout, Stderr io.Writer
	// Timeout and OutputLimit default to the sandbox's policy, and may
	// only narrow it: a longer or bigger one is cut to the sandbox's (the
	// Result's Limits hold the ones applied). One over the runner's
	// ceilings (serve's --max-timeout, --max-output-limit) is refused as
	// invalid input, as docs/api.md says.
	Timeout     time.Duration
	OutputLimit units.Bytes
	// ResultBytes, when above 0, is the most of each stream's head the
	// Result keeps, for a caller that took the output live: the stream is
	// then truncated past it, with its tail, total and sha256 as past the
	// output limit, which still applies to the whole.
	ResultBytes units.Bytes
	// Detach starts the program in the background, where it lives until
	// the sandbox ends; its output is discarded.
	Detach bool
	// JobID and ExpectedStdout, when set, go into the exec's receipt as a
	// batch job's do (see Spec): an exec that runs a job for a client
	// elsewhere, such as an airlock node's one-shot pod.
	JobID          string
	ExpectedStdout *string
	// PodUID, when set, goes into the exec's receipt: the UID of the
	// Kubernetes pod whose program the exec is (an airlock node's one-shot
	// pod), so that the receipt holds for that pod alone.
	PodUID string
	// Collect, when set, ends the sandbox with the exec: once the program
	// has ended, every process of the sandbox is ended and the output
	// directory collected under Collect's rules, as a run's is, into the
	// Result and its receipt. The sandbox is then of no use but Close.
	Collect *Output
}

// SandboxInfo is a sandbox's reconnect record, as `airlock sandbox
// inspect` shows it.
type SandboxInfo struct {
	ID        string                 `json:"id"`
	State     lifecycle.State        `json:"state"`
	Image     string                 `json:"image"`
	ImageRef  string                 `json:"image_ref,omitempty"`
	Engine    string                 `json:"engine"`
	Isolation string                 `json:"isolation"`
	Seccomp   string                 `json:"seccomp_profile_sha256,omitempty"`
	Limits    isolation.LimitsRecord `json:"limits"`
	// Policy is the sandbox's effective policy, as its execs' receipts
	// record it (with each exec's limits); with ImageManifest and
	// RuntimeVersion, what those receipts take from the sandbox. Nil for
	// a sandbox made before execs had receipts.
	Policy         *isolation.Record `json:"policy,omitempty"`
	ImageManifest  string            `json:"image_manifest,omitempty"`
	RuntimeVersion string            `json:"runtime_version,omitempty"`
	// Workspace is the workspace's path inside the sandbox.
	Workspace      string            `json:"workspace"`
	WorkspaceBytes int64             `json:"workspace_bytes"`
	Labels         map[string]string `json:"labels"`
	DownloadTypes  []string          `json:"download_types,omitempty"`
	CreatedAt      time.Time         `json:"created_at"`
	ExpiresAt      time.Time         `json:"expires_at"`
	IdleTimeoutMS  int64             `json:"idle_timeout_ms"`
	LastActivity   time.Time         `json:"last_activity"`
	// Areas are its host directories; Creator is the process that created
	// it; Execs and Transfers the airlock processes of the execs and file
	// transfers in progress, by id. The record keeps them; Public leaves
	// them out.
	Areas     Areas            `json:"areas,omitzero" openapi:"-"`
	Creator   owner            `json:"creator,omitzero" openapi:"-"`
	Execs     map[string]owner `json:"execs,omitempty" openapi:"-"`
	Transfers map[string]owner `json:"transfers,omitempty" openapi:"-"`
	Error     string           `json:"error,omitempty"`
	// Snapshot names the snapshot the sandbox was restored from; empty
	// for one that booted.
	Snapshot string `json:"snapshot,omitempty"`
}

// Public is si as a client of the API sees it: without the host's paths
// and processes, which a client has no use for and should not learn.
func (si SandboxInfo) Public() SandboxInfo {
	si.Areas, si.Creator, si.Execs, si.Transfers = Areas{}, owner{}, nil, nil
	return si
}

var sandboxIDPattern = regexp.MustCompile(`^sb-[0-9a-f]{20}$`)

var labelKey = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// Sandbox is a handle on one live sandbox.
type Sandbox struct {
	r    *Runner
	id   string
	eng  engine.Sandbox
	info SandboxInfo
}

// ID is the sandbox's id.
func (sb *Sandbox) ID() string { return sb.id }

// Info is the sandbox's record as it was when the handle was made.
func (sb *Sandbox) Info() SandboxInfo { return sb.info }

// Create makes a long-lived sandbox and returns it ready for execs. Its
// TTL and idle timeout are enforced by a detached supervisor (see
// WithSupervisor) and by every sweep. On error nothing is left behind.
func (r *Runner) Create(ctx context.Context, s SandboxSpec) (_ *Sandbox, err error) {
	eng := r.engine
	if err := s.defaults(); err != nil {
		return nil, err
	}
	var snap engine.Snapshotter
	if s.Snapshot != "" {
		if snap, err = r.snapshotter(); err != nil {
			return nil, err
		}
		if len(s.Inputs) > 0 {
			return nil, fmt.Errorf("%w: a sandbox restored from a snapshot takes no inputs at create (its mounts are the snapshot's); upload them once it is made", errdefs.ErrInvalidArgument)
		}
	}
	job, err := r.planSandbox(s)
	if err != nil {
		return nil, err
	}
	id := "sb-" + job.ID
	now := time.Now().UTC()
	spec := &engine.SandboxSpec{ID: id, Image: job.Image, Policy: job.Policy, Env: job.Env, Workdir: WorkspaceDir, Owner: job.Owner, Deadline: now.Add(s.TTL)}
	if err := eng.Check(ctx, spec); err != nil {
		return nil, err
	}
	lc, err := r.lifecycle()
	if err != nil {
		return nil, err
	}
	if err := privateDir(sandboxesDir(r.root)); err != nil {
		return nil, fmt.Errorf("%w: creating the sandboxes directory: %v", errdefs.ErrUnavailable, err)
	}
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.lockWait)
	held, err := lc.Begin(bctx, id, map[string]any{
		"kind": "sandbox", "image": job.Image.String(), "engine": r.engine.Name(), "isolation": string(job.Policy.Isolation),
		"seccomp_profile_sha256": job.Policy.Seccomp.SHA256, "limits": limitsOf(job.Policy.Limits), "owner": job.Owner,
		"labels": s.Labels, "ttl_ms": s.TTL.Milliseconds(), "idle_timeout_ms": s.IdleTimeout.Milliseconds(),
	})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%w: recording the sandbox: %w", errdefs.ErrUnavailable, err)
	}
	defer held.Release()
	si := SandboxInfo{
		ID: id, Image: job.Image.String(), Engine: r.engine.Name(), Isolation: string(job.Policy.Isolation),
		Seccomp: job.Policy.Seccomp.SHA256, Limits: limitsOf(job.Policy.Limits),
		Workspace: WorkspaceDir, WorkspaceBytes: int64(s.WorkspaceSize), Labels: s.Labels, DownloadTypes: s.DownloadTypes,
		CreatedAt: now, ExpiresAt: now.Add(s.TTL), IdleTimeoutMS: s.IdleTimeout.Milliseconds(), LastActivity: now,
		Creator: self(), Snapshot: s.Snapshot,
	}
	if si.Labels == nil {
		si.Labels = map[string]string{}
	}
	if s.pool != "" {
		si.Labels = map[string]string{"pool": s.pool}
	}
	if ref, err := images.ParseRef(s.Image); err == nil && ref.Name != "" {
		si.ImageRef = ref.String()
	}
	var esb engine.Sandbox
	defer func() {
		if err == nil {
			return
		}
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), areaTimeout)
		defer cancel()
		var errs []error
		if esb != nil {
			errs = append(errs, esb.Destroy(bg))
		}
		errs = append(errs, r.engine.Reap(bg, id))
		errs = append(errs, removeSandboxFiles(bg, r.root, id))
		if ferr := errors.Join(errs...); ferr != nil {
			err = fmt.Errorf("%w (and freeing what was made: %v; `airlock reap` removes it)", err, ferr)
		}
		lc.Move(id, lifecycle.Failed, err.Error(), nil)
		lc.Move(id, lifecycle.Terminating, "", nil)
		lc.Move(id, lifecycle.Terminated, "", nil)
	}()
	if err := writeInfo(r.root, &si); err != nil {
		return nil, err
	}
	// Supervised from the start: a creator killed from here on leaves a
	// sandbox its supervisor frees (orphaned).
	if err := r.startSupervisor(id); err != nil {
		return nil, err
	}
	areas, err := CreateAreas(ctx, r.root, id, AreasSpec{
		WorkspaceSize: int64(s.WorkspaceSize), TmpSize: int64(job.Policy.Limits.Tmp), Out: s.Output,
		UID: job.Policy.UID, GID: job.Policy.GID,
	})
	if err != nil {
		return nil, err
	}
	// /tmp is the host tmpfs made above, which the engine binds in place
	// of its own (isolation.TmpDir), so that transfers reach it.
	spec.Mounts = append(spec.Mounts, areas.Mounts()...)
	var staged []receipt.File
	if len(s.Inputs) > 0 {
		// Staged as a run's inputs are, on a tmpfs of the sandbox's that
		// goes with its areas, and bound read-only.
		sc := &scratch{dir: areas.Dir}
		if err := sc.stageInputs(ctx, r.root, s.Inputs, int64(s.InputLimit), spec.Deadline); err != nil {
			RemoveAreas(context.WithoutCancel(ctx), areas.Dir)
			return nil, err
		}
		spec.Mounts, staged = append(spec.Mounts, sc.mounts...), sc.inputs
	}
	spec.TmpSource = areas.Tmp
	si.Areas = *areas
	rt, err := r.engine.Runtime(ctx, job.Policy.Isolation)
	if err != nil {
		return nil, err
	}
	pol := policyRecord(spec, Spec{Output: s.Output, InputLimit: s.InputLimit, Workdir: WorkspaceDir}, rt)
	if snap != nil {
		// The name the engine gives a restored sandbox (engine.Snapshotter).
		pol.Hostname = isolation.RestoredHostname(spec.Policy.Hostname, id)
	}
	si.Policy, si.RuntimeVersion, si.ImageManifest = &pol, rt.Version, r.manifestOf(job.Image)
	if err := writeInfo(r.root, &si); err != nil {
		return nil, err
	}
	if snap != nil {
		esb, err = snap.Restore(ctx, spec, s.Snapshot)
	} else {
		esb, err = eng.Create(ctx, spec)
	}
	if err != nil {
		return nil, err
	}
	states := []lifecycle.State{lifecycle.Created, lifecycle.Ready}
	if s.pool != "" {
		states = states[:1]
	}
	for _, st := range states {
		var extra map[string]any
		if st == lifecycle.Created && len(staged) > 0 {
			extra = map[string]any{"inputs": staged}
		}
		if err := lc.Move(id, st, "", extra); err != nil {
			return nil, fmt.Errorf("%w: recording the sandbox: %w", errdefs.ErrUnavailable, err)
		}
	}
	si.State = states[len(states)-1]
	r.log.Info("sandbox created", "sandbox_id", id, "image_digest", si.Image)
	return &Sandbox{r: r, id: id, eng: esb, info: si}, nil
}

// defaults fills s's zero fields and refuses what cannot be.
func (s *SandboxSpec) defaults() error {
	if s.IdleTimeout == 0 {
		s.IdleTimeout = DefaultIdleTimeout
	}
	if s.TTL == 0 {
		s.TTL = DefaultTTL
	}
	if s.WorkspaceSize == 0 {
		s.WorkspaceSize = DefaultWorkspaceSize
	}
	if s.IdleTimeout < 0 || s.TTL < 0 {
		return fmt.Errorf("%w: the idle timeout and the TTL must be positive", errdefs.ErrInvalidArgument)
	}
	// Deadlines are computed in Durations: a year keeps them far from
	// overflow.
	if s.TTL > isolation.MaxTimeout && !s.OneShot {
		return fmt.Errorf("%w: ttl %v is above the maximum of %v (a year)", errdefs.ErrInvalidArgument, s.TTL, isolation.MaxTimeout)
	}
	if s.IdleTimeout > isolation.MaxTimeout {
		return fmt.Errorf("%w: idle timeout %v is above the maximum of %v (a year)", errdefs.ErrInvalidArgument, s.IdleTimeout, isolation.MaxTimeout)
	}
	if err := checkLabels(s.Labels); err != nil {
		return err
	}
	s.Output = s.Output.WithDefaults()
	in := Spec{Inputs: s.Inputs, InputLimit: s.InputLimit}
	in.normalize()
	s.Inputs, s.InputLimit = in.Inputs, in.InputLimit
	return nil
}

// planSandbox plans a long-lived sandbox as a run of its policy.
func (r *Runner) planSandbox(s SandboxSpec) (*engine.SandboxSpec, error) {
	// A pool's own deadline for its unclaimed sandboxes is not a request's,
	// nor is a one-shot run's sandbox's.
	switch {
	case s.OneShot:
		if err := r.ceil.check(asked{Workspace: units.Bytes(s.WorkspaceSize)}); err != nil {
			return nil, err
		}
	case s.pool == "":
		if err := r.ceil.check(asked{TTL: s.TTL, Workspace: units.Bytes(s.WorkspaceSize)}); err != nil {
			return nil, err
		}
	}
	env := append([]string{"HOME=" + WorkspaceDir}, s.Env...)
	return r.plan(Spec{Image: s.Image, Argv: []string{"true"}, Env: env, Policy: s.Policy, SeccompProfile: s.SeccompProfile, Output: s.Output, Inputs: s.Inputs})
}

// Open reconnects to live sandbox id, made by any airlock process. A
// sandbox that is gone is errdefs.ErrNotFound; one lost from outside
// wraps engine.ErrSandboxLost.
func (r *Runner) Open(ctx context.Context, id string) (*Sandbox, error) {
	eng := r.engine
	si, err := ReadSandbox(r.root, id)
	if err != nil {
		return nil, err
	}
	if si.Engine != r.engine.Name() {
		return nil, fmt.Errorf("%w: sandbox %q runs on engine %s, not %s", errdefs.ErrInvalidArgument, id, si.Engine, r.engine.Name())
	}
	switch si.State {
	case lifecycle.Failed:
		return nil, engine.Lost("sandbox %q failed earlier (%s); `airlock sandbox rm %s` frees it", id, si.Error, id)
	case lifecycle.Expired:
		return nil, goneError(id)
	case lifecycle.Requested, lifecycle.Created:
		return nil, fmt.Errorf("%w: sandbox %q is still being created; try again", errdefs.ErrUnavailable, id)
	case lifecycle.Pooled:
		return nil, fmt.Errorf("%w: sandbox %q waits in a warm pool and is no client's until a create claims it; `airlock sandbox create` makes one", errdefs.ErrNotFound, id)
	case lifecycle.Paused:
		// An exec or a transfer resumes it first.
		if si, err = r.Resume(ctx, id); err != nil {
			return nil, err
		}
	}
	esb, err := eng.Open(ctx, id)
	if errors.Is(err, engine.ErrSandboxLost) {
		r.markLost(id, err)
	}
	if err != nil {
		return nil, err
	}
	return &Sandbox{r: r, id: id, eng: esb, info: si}, nil
}

// destroyed reports whether sandbox id is being or has been destroyed.
func (r *Runner) destroyed(id string) bool {
	lc, err := r.lifecycle()
	if err != nil {
		return false
	}
	rec, err := lc.Get(id)
	return err == nil && (rec.State == "" || rec.State == lifecycle.Terminating || rec.State == lifecycle.Terminated || rec.State == lifecycle.Expired)
}

func (r *Runner) markLost(id string, err error) {
	if r.destroyed(id) {
		return // a destroyer's doing, and its to record
	}
	if lc, lerr := r.lifecycle(); lerr == nil {
		if merr := lc.Move(id, lifecycle.Failed, err.Error(), map[string]any{"error_kind": "sandbox_lost"}); merr != nil {
			r.log.Warn("recording state", "sandbox_id", id, "err", merr)
		}
	}
}

// Sandboxes lists the sandboxes under the runner's root.
func (r *Runner) Sandboxes(ctx context.Context) ([]SandboxInfo, error) { return ListSandboxes(r.root) }

// CheckExec refuses an exec Exec would refuse before it starts (its argv,
// env, workdir, and limits over the ceilings), and returns the limits it
// would run under: the sandbox's, narrowed by p's. A face that answers
// before the exec ends (a stream) checks first, so that a refusal is
// still an error response.
func (sb *Sandbox) CheckExec(p ExecSpec) (isolation.LimitsRecord, error) {
	limits := sb.info.Limits
	if err := checkCommand(p.Argv, p.Env); err != nil {
		return limits, err
	}
	if p.Workdir != "" {
		// As a run's: no /proc/self/fd/N (CVE-2024-21626) or the like.
		if err := isolation.CheckWorkdir(p.Workdir); err != nil {
			return limits, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
		}
	}
	if p.Timeout < 0 || p.OutputLimit < 0 {
		return limits, fmt.Errorf("%w: the timeout and the output limit must be positive", errdefs.ErrInvalidArgument)
	}
	// Limits count whole milliseconds, and zero is the sandbox's own: a
	// shorter timeout would read as none.
	if p.Timeout > 0 && p.Timeout < time.Millisecond {
		return limits, fmt.Errorf("%w: timeout %v: give at least 1ms", errdefs.ErrInvalidArgument, p.Timeout)
	}
	if err := sb.r.ceil.check(asked{Timeout: p.Timeout, Output: p.OutputLimit}); err != nil {
		return limits, err
	}
	// An exec may only narrow its sandbox's timeout and output limit.
	if p.Timeout > 0 && p.Timeout.Milliseconds() < limits.TimeoutMS {
		limits.TimeoutMS = p.Timeout.Milliseconds()
	}
	if p.OutputLimit > 0 && int64(p.OutputLimit) < limits.OutputBytes {
		limits.OutputBytes = int64(p.OutputLimit)
	}
	// A sandbox made without the runner's ceilings (by the CLI, say) is
	// still held to them.
	if err := sb.r.ceil.check(asked{Timeout: time.Duration(limits.TimeoutMS) * time.Millisecond, Output: units.Bytes(limits.OutputBytes)}); err != nil {
		return limits, fmt.Errorf("%w (the sandbox's own limit; give a smaller one for this exec)", err)
	}
	return limits, nil
}

// Exec runs one program in the sandbox and returns its Result, with the
// same reasons as a run, sealed by a receipt as a run's is.
func (sb *Sandbox) Exec(ctx context.Context, p ExecSpec) (Result, error) {
	limits, err := sb.CheckExec(p)
	if err != nil {
		return Result{}, err
	}
	si := sb.info
	execID, err := newID()
	if err != nil {
		return Result{}, err
	}
	lc, err := sb.r.lifecycle()
	if err != nil {
		return Result{}, err
	}
	// The exec is recorded before it starts: the sandbox is not idle while
	// it runs, and a destroy that won the race makes it fail here.
	err = updateInfo(sb.r.root, sb.id, func(cur *SandboxInfo) error {
		cur.pruneDead()
		if cur.Execs == nil {
			cur.Execs = map[string]owner{}
		}
		cur.Execs[execID] = self()
		cur.LastActivity = time.Now().UTC()
		merr := lc.Move(sb.id, lifecycle.Running, "", nil)
		if errors.Is(merr, lifecycle.ErrTransition) {
			if rec, gerr := lc.Get(sb.id); gerr == nil && rec.State == lifecycle.Paused {
				// Paused since it was opened: alive, and an exec's
				// open resumes it.
				return fmt.Errorf("%w: sandbox %q was paused as this exec began; try again (an exec resumes a paused sandbox)", errdefs.ErrConflict, sb.id)
			}
			return goneError(sb.id)
		}
		return merr
	})
	if err != nil {
		return Result{}, err
	}
	defer func() {
		uerr := updateInfo(sb.r.root, sb.id, func(cur *SandboxInfo) error {
			delete(cur.Execs, execID)
			cur.LastActivity = time.Now().UTC()
			if cur.liveExecs() == 0 {
				if merr := lc.Move(sb.id, lifecycle.Ready, "", nil); merr != nil && !errors.Is(merr, lifecycle.ErrTransition) {
					return merr
				}
			}
			return nil
		})
		if uerr != nil && !errdefs.IsNotFound(uerr) {
			sb.r.log.Warn("recording the end of an exec", "sandbox_id", sb.id, "err", uerr)
		}
	}()

	runCtx, kill := context.WithCancelCause(ctx)
	defer kill(nil)
	keep := int64(p.ResultBytes)
	stdout := newCaptureKeep(limits.OutputBytes, keep, p.Stdout, func() { kill(errOutputLimit) })
	stderr := newCaptureKeep(limits.OutputBytes, keep, p.Stderr, func() { kill(errOutputLimit) })
	res := Result{
		ID: execID, SandboxID: sb.id, Snapshot: si.Snapshot, Image: si.Image, ImageRef: si.ImageRef, Engine: si.Engine,
		Isolation: si.Isolation, Seccomp: si.Seccomp, Limits: limits,
	}
	begin := time.Now()
	exit, err := sb.eng.Exec(runCtx, &engine.Process{
		Argv: p.Argv, Env: p.Env, Workdir: p.Workdir, Stdin: p.Stdin, Stdout: stdout, Stderr: stderr,
		Timeout: time.Duration(limits.TimeoutMS) * time.Millisecond, Detach: p.Detach,
	})
	res.Stdout, res.Stderr = stdout.stream(), stderr.stream()
	if err != nil && sb.r.destroyed(sb.id) {
		// rm, or the supervisor at the deadline, destroyed it under the exec.
		res.Reason, res.ExitCode, res.DurationMS = ReasonDestroyed, -1, time.Since(begin).Milliseconds()
		res.Error = "another airlock process destroyed the sandbox: `airlock sandbox rm`, or its TTL or idle timeout passed"
		err = nil
	} else if err != nil {
		res.Reason, res.Error, res.ErrorKind, res.ExitCode = ReasonError, err.Error(), ErrorKind(err), -1
		res.DurationMS = time.Since(begin).Milliseconds()
		if errors.Is(err, engine.ErrSandboxLost) {
			sb.r.markLost(sb.id, err)
		}
	} else {
		res.exited(exit, context.Cause(runCtx))
	}
	if p.Collect != nil && err == nil && res.Error == "" {
		if err = sb.collect(ctx, *p.Collect, &res); err != nil {
			res.Reason, res.Error, res.ErrorKind = ReasonError, err.Error(), ErrorKind(err)
		}
	}
	if err == nil && res.Error == "" && si.Policy != nil {
		pol := *si.Policy
		pol.Limits = limits
		rec, serr := resultReceipt(res, pol, p.Argv, si.RuntimeVersion)
		if serr == nil {
			rec.ImageManifest = si.ImageManifest
			// Judged on the whole stdout's size and sha256: its head may
			// be cut (ResultBytes).
			rec.JobID, rec.Pass, rec.PodUID = p.JobID, receipt.Verdict(rec, p.ExpectedStdout), p.PodUID
			addOutput(&rec, res)
			serr = sb.r.seal(rec, &res)
		}
		if serr != nil {
			err = serr
			res.Reason, res.Error, res.ErrorKind = ReasonError, err.Error(), ErrorKind(err)
		}
	}
	ev := auditSummary(res, err)
	ev["event"], ev["sandbox_id"], ev["exec_id"], ev["detach"] = "exec", sb.id, execID, p.Detach
	if h, herr := receipt.Hash(p.Argv); herr == nil {
		ev["argv_sha256"] = h
	}
	if aerr := lc.Audit().Append(ev); aerr != nil {
		err = also(err, fmt.Errorf("recording the exec: %w", aerr))
		res.Reason, res.Error = ReasonError, err.Error()
	}
	return res, err
}

// alive refuses a transfer into a sandbox that is gone or lost.
func (sb *Sandbox) alive() (SandboxInfo, error) {
	si, err := ReadSandbox(sb.r.root, sb.id)
	if err != nil {
		return si, err
	}
	if si.State == lifecycle.Failed || si.State == lifecycle.Expired || si.State == lifecycle.Orphaned {
		return si, goneError(sb.id)
	}
	return si, nil
}

// transferring records a transfer in progress, as Exec records an exec:
// the sandbox is not idle while it lasts (Deadline), and no pause begins.
// done removes it and counts its end as activity.
func (sb *Sandbox) transferring() (done func(), err error) {
	id, err := newID()
	if err != nil {
		return nil, err
	}
	err = updateInfo(sb.r.root, sb.id, func(cur *SandboxInfo) error {
		cur.pruneDead()
		if cur.Transfers == nil {
			cur.Transfers = map[string]owner{}
		}
		cur.Transfers[id] = self()
		cur.LastActivity = time.Now().UTC()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return func() {
		uerr := updateInfo(sb.r.root, sb.id, func(cur *SandboxInfo) error {
			delete(cur.Transfers, id)
			cur.LastActivity = time.Now().UTC()
			return nil
		})
		if uerr != nil && !errdefs.IsNotFound(uerr) {
			sb.r.log.Warn("recording the end of a transfer", "sandbox_id", sb.id, "err", uerr)
		}
	}, nil
}

// transferred records a transfer in the audit log.
func (sb *Sandbox) transferred(tr Transfer, err error) (Transfer, error) {
	ev := transferEvent(sb.id, tr)
	lc, lerr := sb.r.lifecycle()
	if lerr != nil {
		return tr, also(err, lerr)
	}
	if aerr := lc.Audit().Append(ev); aerr != nil {
		return tr, also(err, fmt.Errorf("recording the transfer: %w", aerr))
	}
	return tr, err
}

// Upload writes at most limit bytes of rd to sandboxPath, in the
// workspace or /tmp; see Areas.Upload. A refusal is a *TransferError.
func (sb *Sandbox) Upload(ctx context.Context, sandboxPath string, rd io.Reader, limit int64) (Transfer, error) {
	si, err := sb.alive()
	if err == nil {
		var done func()
		if done, err = sb.transferring(); err == nil {
			defer done()
			return sb.transferred(si.Areas.Upload(ctx, sandboxPath, rd, limit))
		}
	}
	return Transfer{Direction: DirectionUpload, Path: sandboxPath, Decision: DecisionRefused}, err
}

// Download writes the file at sandboxPath to w through the artifact
// scanner's rules and the sandbox's allowlist; see Areas.Download.
func (sb *Sandbox) Download(ctx context.Context, sandboxPath string, w io.Writer) (Transfer, error) {
	si, err := sb.alive()
	if err == nil {
		var done func()
		if done, err = sb.transferring(); err == nil {
			defer done()
			return sb.transferred(si.Areas.Download(ctx, sandboxPath, w, si.download()))
		}
	}
	return Transfer{Direction: DirectionDownload, Path: sandboxPath, Decision: DecisionRefused}, err
}

// Close destroys the sandbox: every process, its runtime state, cgroups,
// mounts and areas. It is idempotent.
func (sb *Sandbox) Close(ctx context.Context) error { return sb.r.Destroy(ctx, sb.id) }

// Destroy destroys sandbox id, whoever made it, once however many callers
// race; one being created is waited for, then destroyed. A sandbox id
// that is already gone succeeds.
func (r *Runner) Destroy(ctx context.Context, id string) error {
	return r.destroySandbox(ctx, id, "")
}

func (r *Runner) destroySandbox(ctx context.Context, id string, why lifecycle.State) error {
	if err := CheckSandboxID(id); err != nil {
		return err
	}
	lc, err := r.lifecycle()
	if err != nil {
		return err
	}
	free := func() error {
		bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), lockTimeout)
		defer cancel()
		var errs []error
		if esb, err := r.engine.Open(bg, id); err == nil {
			errs = append(errs, esb.Destroy(bg))
		}
		errs = append(errs, freeSandbox(bg, r.root, []engine.Reaper{r.engine}, id))
		return errors.Join(errs...)
	}
	return destroySandbox(ctx, lc, r.root, id, why, false, free)
}
