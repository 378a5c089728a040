package runner

// A run on a sandbox restored from a snapshot: a template's snapshot
// serves one-shot runs as it serves creates, one sandbox per run.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/artifacts"
)

// restoredGrace is how long a run's restored sandbox may outlive the
// run's timeout (its TTL past it, and its idle timeout), should the run's
// own destroy not come.
const restoredGrace = time.Minute

// RunRestored runs s as the one exec of a sandbox restored from base's
// snapshot, then destroys the sandbox: the run starts where the snapshot
// stopped instead of booting. argv, when not nil, is the exec's argv in
// place of s.Argv (a fork server's client, say); the receipt names that.
// files are written into the sandbox (its /tmp or workspace) before the
// exec, as the job's own data.
// The output directory is collected as a run's is, once every process of
// the sandbox has ended. why, when not "", says why s does not fit the
// snapshot and nothing was done (inputs, or fitsShape): the caller runs
// it cold.
func (r *Runner) RunRestored(ctx context.Context, s Spec, base SandboxSpec, argv []string, files map[string][]byte) (res Result, why string, err error) {
	if base.Snapshot == "" {
		return Result{}, "no snapshot", nil
	}
	s.normalize()
	job, err := r.plan(s)
	if err != nil {
		return Result{}, "", err
	}
	if err := checkDestinations(s.Output); err != nil {
		return Result{}, "", err
	}
	// Its TTL and idle timeout are set below, from the run's timeout.
	base.OneShot = true
	if err := base.defaults(); err != nil {
		return Result{}, "", err
	}
	b, err := r.planSandbox(base)
	if err != nil {
		return Result{}, "", err
	}
	if len(s.Inputs) > 0 {
		return Result{}, "inputs are mounted at boot, and a restored sandbox's mounts are its snapshot's", nil
	}
	if s.DeliverByRun {
		return Result{}, "delivery into a directory per run is a cold run's", nil
	}
	if why := fitsShape(s.Output, job, base.Output, b); why != "" {
		return Result{}, why, nil
	}
	base.TTL = job.Policy.Limits.Timeout + restoredGrace
	base.IdleTimeout = restoredGrace
	sb, err := r.Create(ctx, base)
	if err != nil {
		return Result{}, "", err
	}
	defer func() {
		if cerr := sb.Close(context.WithoutCancel(ctx)); cerr != nil {
			err = errors.Join(err, fmt.Errorf("destroying the run's sandbox %q: %w", sb.ID(), cerr))
		}
	}()
	for _, p := range slices.Sorted(maps.Keys(files)) {
		if _, err := sb.Upload(ctx, p, bytes.NewReader(files[p]), int64(len(files[p]))+1); err != nil {
			return Result{}, "", fmt.Errorf("writing %s into the run's sandbox: %w", p, err)
		}
	}
	if argv == nil {
		argv = s.Argv
	}
	out := s.Output
	res, err = sb.Exec(ctx, ExecSpec{
		Argv: argv, Env: s.Env, Workdir: s.Workdir, Stdin: s.Stdin, Stdout: s.Stdout, Stderr: s.Stderr,
		Timeout: job.Policy.Limits.Timeout, OutputLimit: s.Policy.Limits.Output,
		JobID: s.JobID, ExpectedStdout: s.ExpectedStdout, Collect: &out,
	})
	return res, "", err
}

// collect ends the engine's sandbox, so that no process is left to race
// the scan, then collects its output directory into res as a run's is.
// The sandbox is then of no use but to be destroyed.
func (sb *Sandbox) collect(ctx context.Context, o Output, res *Result) error {
	out := sb.info.Areas.Out
	if err := sb.eng.Destroy(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("%w: ending sandbox %q before collecting its output: %v", errdefs.ErrInternal, sb.id, err)
	}
	if out == "" || o.Disabled {
		return nil
	}
	return collectOutput(ctx, out, o, res)
}

// deliverByRun points o's delivery directories at the run's own beneath
// them, DIR/<res.ID>, and records them in res (Spec.DeliverByRun). The
// run ID is airlock's (20 hex digits), never a job's; artifacts.Collect
// makes the directory as it makes DIR, refusing one another user owns.
func deliverByRun(o Output, res *Result) Output {
	if o.Artifacts != "" {
		o.Artifacts = filepath.Join(o.Artifacts, res.ID)
		res.delivered.artifacts = o.Artifacts
	}
	if o.Quarantine != "" {
		o.Quarantine = filepath.Join(o.Quarantine, res.ID)
		res.delivered.quarantine = o.Quarantine
	}
	return o
}

// collectOutput scans (and delivers) output directory dir into res's
// artifacts and rejections under o's rules.
func collectOutput(ctx context.Context, dir string, o Output, res *Result) error {
	rep, err := artifacts.Collect(context.WithoutCancel(ctx), dir, artifacts.Options{
		Dest: o.Artifacts, Quarantine: o.Quarantine,
		MaxFileBytes: int64(o.MaxFileSize), MaxTotalBytes: int64(o.Size), MaxFiles: o.Files,
		Types: o.Types, AllowDotfiles: o.AllowDotfiles,
	})
	res.Artifacts, res.Rejected = rep.Artifacts, rep.Rejected
	if err != nil {
		return fmt.Errorf("%w: collecting artifacts: %v", errdefs.ErrInternal, err)
	}
	return nil
}
