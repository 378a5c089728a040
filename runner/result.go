package runner

import (
	"errors"
	"time"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/receipt"
)

// Reason is why a run ended. The values are stable: scripts match on them.
type Reason string

const (
	// ReasonExited: the program exited by itself; see ExitCode.
	ReasonExited Reason = "exited"
	// ReasonTimeout: airlock killed the program at its wall-clock limit.
	ReasonTimeout Reason = "timeout"
	// ReasonOOM: the kernel killed the program at its memory limit.
	ReasonOOM Reason = "oom"
	// ReasonOutputLimit: airlock killed the program when stdout or stderr
	// passed its cap.
	ReasonOutputLimit Reason = "output_limit"
	// ReasonPidsLimit: a fork was refused at the pids limit and the program
	// did not exit cleanly (under gVisor, the sandbox ends at that point).
	ReasonPidsLimit Reason = "pids_limit"
	// ReasonKilled: the run was cancelled (airlock itself was interrupted).
	ReasonKilled Reason = "killed"
	// ReasonDestroyed: another airlock process destroyed the run: `airlock
	// kill`, or `airlock reap` once the run's deadline had passed.
	ReasonDestroyed Reason = "destroyed"
	// ReasonError: the engine failed; see Error.
	ReasonError Reason = "error"
)

// Result is the whole account of one run.
type Result struct {
	ID string `json:"id,omitempty"`
	// SandboxID names the long-lived sandbox an exec ran in.
	SandboxID string `json:"sandbox_id,omitempty"`
	// Pool names the warm pool whose sandbox ran the program; empty for a
	// cold start. A pooled sandbox is used by this run alone.
	Pool string `json:"pool,omitempty"`
	// Snapshot names the snapshot (the sha256 of its manifest) the
	// sandbox an exec ran in was restored from; empty for one that booted.
	Snapshot string `json:"snapshot,omitempty"`
	// Image is the image ID that ran ("sha256:…").
	Image string `json:"image,omitempty"`
	// ImageRef is the reference as given, when it carried a name.
	ImageRef  string `json:"image_ref,omitempty"`
	Engine    string `json:"engine,omitempty"`
	Isolation string `json:"isolation,omitempty"`
	// Seccomp is the sha256 of the seccomp profile that was applied.
	Seccomp string `json:"seccomp_profile_sha256,omitempty"`
	Reason  Reason `json:"reason"`
	// ExitCode is the program's exit status; 128+N when a signal N ended
	// it, -1 when the engine failed or the program never started.
	ExitCode   int                    `json:"exit_code"`
	DurationMS int64                  `json:"duration_ms,omitempty"`
	Stdout     Stream                 `json:"stdout,omitzero"`
	Stderr     Stream                 `json:"stderr,omitzero"`
	Limits     isolation.LimitsRecord `json:"limits,omitzero"`
	// Usage is what the sandbox consumed, read from its cgroup.
	Usage Usage `json:"usage,omitzero"`
	// Egress sums the audit records of the run's egress proxy: connections
	// (and DNS queries) allowed and refused, bytes each way. Absent for a
	// run without egress, and for an exec in a long-lived sandbox, whose
	// proxy serves every exec (the audit log has each record).
	Egress *egress.Totals `json:"egress,omitempty"`
	// Artifacts and Rejected are every decision about the output
	// directory's files; absent when the output directory is off or the
	// run never got that far.
	Artifacts  []artifacts.Artifact  `json:"artifacts,omitzero"`
	Rejected   []artifacts.Rejection `json:"rejected,omitzero"`
	StartedAt  time.Time             `json:"started_at,omitzero"`
	FinishedAt time.Time             `json:"finished_at,omitzero"`
	// Error is the failure, with Reason "error".
	Error string `json:"error,omitempty"`
	// ErrorKind classifies Error: invalid_input, not_found, sandbox_lost,
	// unavailable or internal.
	ErrorKind string `json:"error_kind,omitempty"`
	// Policy is the run's effective policy, as its receipt records it.
	Policy *isolation.Record `json:"policy,omitempty"`
	// Receipt is the signed evidence of the run; see `airlock receipt verify`.
	Receipt *receipt.Signed `json:"receipt,omitempty"`

	// delivered holds where a run that delivers by run (Spec.DeliverByRun)
	// put its files; a batch result shows it (BatchResult.ArtifactsDir).
	delivered delivery
}

// delivery is where a run's files went: its own directories beneath
// Output.Artifacts and Output.Quarantine.
type delivery struct{ artifacts, quarantine string }

// limitsOf is what the Result and the run's record show of l.
func limitsOf(l isolation.Limits) isolation.LimitsRecord { return l.Record() }

// exited fills in res from how its program ended, for a run and an exec
// alike: the code, the reason (cause, the run context's, names a kill of
// airlock's own), the usage and the times.
func (res *Result) exited(exit engine.Exit, cause error) {
	res.ExitCode = exit.Code
	res.Reason = reasonOf(exit, cause)
	res.Usage = Usage{CPUMS: exit.Usage.CPU.Milliseconds(), MemoryPeakBytes: exit.Usage.MemoryPeak, PidsPeak: exit.Usage.PidsPeak}
	res.Egress = exit.Egress
	// Wall clock only: the duration is then the one the recorded times
	// give (a receipt's verifier computes it so), not the monotonic
	// clock's, which a clock adjustment can put a millisecond apart.
	res.StartedAt, res.FinishedAt = exit.Started.Round(0), exit.Finished.Round(0)
	if !exit.Started.IsZero() && !exit.Finished.IsZero() {
		res.DurationMS = res.FinishedAt.Sub(res.StartedAt).Milliseconds()
	}
}

// Usage is what a sandbox consumed.
type Usage struct {
	CPUMS           int64 `json:"cpu_ms"`
	MemoryPeakBytes int64 `json:"memory_peak_bytes"`
	PidsPeak        int64 `json:"pids_peak"`
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
