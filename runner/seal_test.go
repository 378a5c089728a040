package runner

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/receipt"
)

// sealed is a batch result line as the runner writes it: the Result, its
// streams captured by the runner's own capture, and a signed receipt.
func sealed(t *testing.T, jobID string, expected *string) BatchResult {
	t.Helper()
	pol := isolation.Default().WithDefaults()
	pol.Limits.Output = 1024
	pol.Seccomp = &isolation.SeccompProfile{SHA256: strings.Repeat("a", 64)}
	job := &engine.SandboxSpec{
		ID: "r1", Image: digest.Digest("sha256:" + strings.Repeat("b", 64)), Init: &engine.Process{Argv: []string{"sh", "-c", "x"}}, Policy: pol,
		Mounts: []engine.Mount{{Source: "/var/lib/airlock/runs/r1/in/0", Target: "/work/in", ReadOnly: true}, {Source: "/var/lib/airlock/runs/r1/out", Target: "/out"}},
	}
	s := Spec{JobID: jobID, ExpectedStdout: expected, InputLimit: 256 << 20, Output: Output{Artifacts: "/home/me/artifacts", Quarantine: "/home/me/q"}.WithDefaults()}
	out, errw := newCapture(1024, nil, nil), newCapture(1024, nil, nil)
	// A character split at the cap, and at the tail's start; stderr that
	// is not UTF-8.
	out.Write([]byte(strings.Repeat("a", 1023) + "é" + strings.Repeat("é", 40000)))
	errw.Write([]byte("err\xff\n"))
	start := time.Date(2025, 6, 1, 12, 0, 0, 5, time.UTC)
	res := Result{
		ID: job.ID, Image: job.Image.String(), Engine: "oci", Isolation: string(pol.Isolation), Seccomp: pol.Seccomp.SHA256,
		Reason: ReasonOutputLimit, ExitCode: 137, Stdout: out.stream(), Stderr: errw.stream(), Limits: limitsOf(pol.Limits),
		Artifacts: []artifacts.Artifact{{Path: "a.txt", Size: 4, SHA256: strings.Repeat("c", 64), MIME: "text/plain"}},
		Rejected:  []artifacts.Rejection{{Path: "x.sh", Reason: artifacts.ReasonTypeNotAllowed, Detail: "text/x-shellscript", Quarantined: "/home/me/q/x.sh"}},
		StartedAt: start, FinishedAt: start.Add(1234 * time.Millisecond), DurationMS: 1234,
	}
	rec, err := receiptOf(job, s, res, nil, engine.Runtime{Name: "runsc", Version: "v1", Flags: isolation.RunscFlags()})
	if err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	signed, err := receipt.Sign(key, rec)
	if err != nil {
		t.Fatal(err)
	}
	res.Policy, res.Receipt = &signed.Receipt.Policy, &signed
	return BatchResult{JobID: jobID, Pass: passOf(res, expected), Result: res}
}

func TestSealedResultVerifies(t *testing.T) {
	want := "a\n"
	br := sealed(t, "job-1", &want)
	if !br.Stdout.Truncated || len(br.Stdout.Tail) == 0 {
		t.Fatalf("stdout should be truncated with a tail: %+v", br.Stdout.Bytes)
	}
	b, err := json.Marshal(br)
	if err != nil {
		t.Fatal(err)
	}
	if err := receipt.CheckResult(b); err != nil {
		t.Fatalf("CheckResult(untouched line) = %v", err)
	}
	for _, host := range []string{"/home/me", "/var/lib/airlock"} {
		if p, _ := json.Marshal(br.Policy); strings.Contains(string(p), host) {
			t.Errorf("the policy record holds host path %s: %s", host, p)
		}
	}
	rec := br.Receipt.Receipt
	if rec.JobID != "job-1" || rec.Pass == nil || *rec.Pass || *br.Pass != *rec.Pass {
		t.Errorf("job %q pass %v, line pass %v", rec.JobID, rec.Pass, br.Pass)
	}
	if rec.Policy.Limits.FileSizeBytes != 64<<20 || rec.Policy.Limits.OpenFiles != 1024 || br.Limits != rec.Policy.Limits {
		t.Errorf("limits: result %+v, receipt %+v", br.Limits, rec.Policy.Limits)
	}
	// The same edits a harness could make, made through the runner's types.
	for name, edit := range map[string]func(br *BatchResult){
		"exit code":  func(br *BatchResult) { br.ExitCode = 0 },
		"stdout":     func(br *BatchResult) { br.Stdout.Head = []byte("fine") },
		"tail":       func(br *BatchResult) { br.Stdout.Tail = br.Stdout.Tail[1:] },
		"stderr":     func(br *BatchResult) { br.Stderr.Head = []byte("ok\xff\n") },
		"artifact":   func(br *BatchResult) { br.Artifacts[0].SHA256 = strings.Repeat("d", 64) },
		"rejection":  func(br *BatchResult) { br.Rejected = nil },
		"open files": func(br *BatchResult) { br.Limits.OpenFiles = 1 << 20 },
		"job id":     func(br *BatchResult) { br.JobID = "job-2" },
		"pass":       func(br *BatchResult) { br.Pass = new(true) },
	} {
		c := sealed(t, "job-1", &want)
		edit(&c)
		b, _ := json.Marshal(c)
		if err := receipt.CheckResult(b); !errors.Is(err, receipt.ErrMismatch) {
			t.Errorf("%s changed: CheckResult = %v, want a mismatch", name, err)
		}
	}
}

func TestPassOf(t *testing.T) {
	x := "x\n"
	for _, tc := range []struct {
		res  Result
		want *bool
		exp  *string
	}{
		{Result{Reason: ReasonExited, Stdout: Stream{Head: []byte("x\n")}}, new(true), &x},
		{Result{Reason: ReasonExited, ExitCode: 1, Stdout: Stream{Head: []byte("x\n")}}, new(false), &x},
		{Result{Reason: ReasonTimeout, Stdout: Stream{Head: []byte("x\n")}}, new(false), &x},
		{Result{Reason: ReasonExited, Stdout: Stream{Head: []byte("x\n"), Truncated: true}}, new(false), &x},
		{Result{Reason: ReasonExited, Stdout: Stream{Head: []byte("x\n")}}, nil, nil},
	} {
		got := passOf(tc.res, tc.exp)
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("passOf(%+v) = %v, want %v", tc.res, got, tc.want)
		}
	}
}
