package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/receipt"
	"github.com/airlock-sandbox/airlock/store"
)

// sign records the run's effective policy in res.Policy, then makes the
// run's receipt of res and signs it with the key under the root, created
// on first use.
func (r *Runner) sign(ctx context.Context, job *engine.SandboxSpec, s Spec, res *Result, inputs []receipt.File, manifest string) error {
	// An interrupted run is still sealed: ask on a context of its own.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sealTimeout)
	defer cancel()
	rt, err := r.engine.Runtime(rctx, job.Policy.Isolation)
	if err != nil {
		return err
	}
	rec, err := receiptOf(job, s, *res, inputs, rt)
	if err != nil {
		return err
	}
	rec.ImageManifest = manifest
	return r.seal(rec, res)
}

// seal signs rec with the key under the root, created on first use, and
// puts it and the policy it records in res.
func (r *Runner) seal(rec receipt.Receipt, res *Result) error {
	if r.loadKey(); r.keyErr != nil {
		return fmt.Errorf("%w: receipt key: %v", errdefs.ErrUnavailable, r.keyErr)
	}
	rec.AirlockVersion = r.version
	signed, err := receipt.Sign(r.key, rec)
	if err != nil {
		return fmt.Errorf("%w: signing the receipt: %v", errdefs.ErrInternal, err)
	}
	res.Policy, res.Receipt = &signed.Receipt.Policy, &signed
	return nil
}

// loadKey reads the receipt key under the root, creating it on first use,
// once per Runner.
func (r *Runner) loadKey() {
	r.keyOnce.Do(func() { r.key, r.keyErr = receipt.LoadOrCreateKey(filepath.Join(r.root, "keys")) })
}

// receiptOf is the receipt of res, but for what only the Runner knows:
// the image manifest and airlock's version.
func receiptOf(job *engine.SandboxSpec, s Spec, res Result, inputs []receipt.File, rt engine.Runtime) (receipt.Receipt, error) {
	rec, err := resultReceipt(res, policyRecord(job, s, rt), job.Init.Argv, rt.Version)
	if err != nil {
		return rec, err
	}
	rec.JobID, rec.Pass = s.JobID, passOf(res, s.ExpectedStdout)
	rec.Inputs = append(rec.Inputs, inputs...)
	addOutput(&rec, res)
	return rec, nil
}

// addOutput records res's artifacts and rejections in rec.
func addOutput(rec *receipt.Receipt, res Result) {
	for _, a := range res.Artifacts {
		rec.Artifacts = append(rec.Artifacts, receipt.File{Path: a.Path, Size: a.Size, SHA256: a.SHA256, MIME: a.MIME})
	}
	for _, x := range res.Rejected {
		rec.Rejected = append(rec.Rejected, receipt.Rejection{Path: x.Path, Reason: string(x.Reason), Detail: x.Detail})
	}
}

// resultReceipt is the receipt of what every Result has: a run's or an
// exec's under policy pol, for argv.
func resultReceipt(res Result, pol isolation.Record, argv []string, runtimeVersion string) (receipt.Receipt, error) {
	policyHash, err := receipt.Hash(pol)
	if err != nil {
		return receipt.Receipt{}, err
	}
	argvHash, err := receipt.Hash(argv)
	if err != nil {
		return receipt.Receipt{}, err
	}
	return receipt.Receipt{
		RunID:          res.ID,
		SandboxID:      res.SandboxID,
		Snapshot:       res.Snapshot,
		Image:          res.Image,
		Engine:         res.Engine,
		Runtime:        pol.Runtime.Name,
		RuntimeVersion: runtimeVersion,
		Isolation:      res.Isolation,
		SeccompSHA256:  res.Seccomp,
		Policy:         pol,
		PolicySHA256:   policyHash,
		ArgvSHA256:     argvHash,
		Inputs:         []receipt.File{},
		Stdout:         streamOf(res.Stdout),
		Stderr:         streamOf(res.Stderr),
		Artifacts:      []receipt.File{},
		Rejected:       []receipt.Rejection{},
		Reason:         string(res.Reason),
		ExitCode:       res.ExitCode,
		StartedAt:      res.StartedAt,
		FinishedAt:     res.FinishedAt,
	}, nil
}

// policyRecord is the run's effective policy, with no host path in it, so
// the same policy records and hashes the same in every run.
func policyRecord(job *engine.SandboxSpec, s Spec, rt engine.Runtime) isolation.Record {
	rec := job.Policy.Record()
	rec.Mounts = mountTargets(job.Mounts)
	if o := s.Output; !o.Disabled {
		types := o.Types
		if types == nil {
			types = artifacts.DefaultTypes
		}
		rec.Output = &isolation.OutputRecord{
			Dir: o.Dir, SizeBytes: int64(o.Size), Files: o.Files, MaxFileBytes: int64(o.MaxFileSize),
			Types: append([]string{}, types...), AllowDotfiles: o.AllowDotfiles,
		}
	}
	rec.InputLimitBytes = int64(s.InputLimit)
	rec.Workdir = s.Workdir
	// The flags an engine gives are its mode's; egress changes runsc's
	// network flag, as the engine does when it runs the sandbox.
	rec.Runtime = isolation.RuntimeRecord{Name: rt.Name, Flags: append([]string{}, isolation.RunscNetwork(rt.Flags, job.Policy.Egress)...)}
	return rec
}

// passOf is a batch job's verdict: the program exited 0 and printed
// exactly the expected stdout. Nil when the job expects nothing.
func passOf(res Result, expected *string) *bool {
	if expected == nil {
		return nil
	}
	pass := res.Reason == ReasonExited && res.ExitCode == 0 && !res.Stdout.Truncated && string(res.Stdout.Head) == *expected
	return &pass
}

// streamOf binds both what the program wrote and what the Result carries.
func streamOf(s Stream) receipt.Stream {
	return receipt.StreamOf(s.SHA256, s.Bytes, s.Truncated, s.Head, s.Tail)
}

// mountTargets describes the binds by where they appear, not by the
// run's host paths.
func mountTargets(ms []engine.Mount) []isolation.MountRecord {
	out := []isolation.MountRecord{}
	for _, m := range ms {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		out = append(out, isolation.MountRecord{Target: m.Target, Mode: mode})
	}
	return out
}

// manifestOf finds the image's manifest digest in airlock's store; empty
// when the store does not hold it.
func (r *Runner) manifestOf(id digest.Digest) string {
	st, err := store.Open(filepath.Join(r.root, "store"))
	if err != nil {
		return ""
	}
	entries, err := st.List()
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if e.ID == id {
			return e.Manifest.String()
		}
	}
	return ""
}

// sealTimeout bounds what sealing asks of the engine.
const sealTimeout = 30 * time.Second

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
