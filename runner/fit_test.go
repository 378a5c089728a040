package runner

import (
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/receipt"
)

// execResult is an exec's Result as a node's sandbox gives it: stdout
// and stderr as captured under caps of outCap and errCap, sealed by r for
// job-1, whose expected stdout is the whole stdout, of pod pod-uid-1.
func execResult(t *testing.T, r *Runner, stdout, stderr string, outCap, errCap int64) Result {
	t.Helper()
	pol := isolation.Default().WithDefaults()
	pol.Limits.Output = 1 << 30 // the record's; the captures cap at limit
	pol.Seccomp = &isolation.SeccompProfile{SHA256: strings.Repeat("a", 64)}
	job := &engine.SandboxSpec{ID: "sb1", Image: digest.Digest("sha256:" + strings.Repeat("b", 64)), Init: &engine.Process{Argv: []string{"sh"}}, Policy: pol}
	out, errw := newCapture(outCap, nil, nil), newCapture(errCap, nil, nil)
	out.Write([]byte(stdout))
	errw.Write([]byte(stderr))
	start := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	res := Result{ID: "ex1", SandboxID: "sb1", Image: job.Image.String(), Engine: "oci", Isolation: string(pol.Isolation), Seccomp: pol.Seccomp.SHA256,
		Reason: ReasonExited, Stdout: out.stream(), Stderr: errw.stream(), Limits: limitsOf(pol.Limits),
		StartedAt: start, FinishedAt: start.Add(time.Second), DurationMS: 1000}
	rec, err := resultReceipt(res, policyRecord(job, Spec{Output: Output{Disabled: true}}, engine.Runtime{Name: "runsc", Version: "v1"}), []string{"sh"}, "v1")
	if err != nil {
		t.Fatal(err)
	}
	rec.JobID, rec.Pass, rec.PodUID = "job-1", passOf(res, &stdout), "pod-uid-1"
	if err := r.seal(rec, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// A Result too large for a pod's status is cut to fit, its receipt signed
// again: it verifies and agrees with its receipt field by field, and
// binds what the program wrote (totals, hashes, the verdict) as before.
func TestFitResult(t *testing.T) {
	r := &Runner{root: t.TempDir(), version: "v1"}
	// Text with characters of 2 and 3 bytes, to be cut between; stderr
	// past its cap, and not UTF-8.
	stdout := strings.Repeat("ab é€ 42\n", 50<<10)
	stderr := strings.Repeat("err\xff\n", 100<<10)
	res := execResult(t, r, stdout, stderr, 1<<30, 256<<10)
	if !res.Stderr.Truncated || res.Stdout.Truncated || !*res.Receipt.Receipt.Pass {
		t.Fatalf("the test's Result: stdout truncated %v, stderr %v, pass %v", res.Stdout.Truncated, res.Stderr.Truncated, *res.Receipt.Receipt.Pass)
	}
	const max = 512 << 10
	got, err := r.fitResult(res, max)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	if len(b) > max || len(b) < max-4<<10 {
		t.Errorf("the cut Result is %d bytes; want at most %d, and not much less", len(b), max)
	}
	if err := receipt.Verify(*got.Receipt, r.key.Public().(ed25519.PublicKey)); err != nil {
		t.Errorf("the cut Result's receipt: %v", err)
	}
	line, _ := json.Marshal(BatchResult{JobID: "job-1", Pass: got.Receipt.Receipt.Pass, Result: got})
	if err := receipt.CheckResult(line); err != nil {
		t.Errorf("CheckResult(the cut Result) = %v", err)
	}
	for name, pair := range map[string][2]Stream{"stdout": {res.Stdout, got.Stdout}, "stderr": {res.Stderr, got.Stderr}} {
		was, is := pair[0], pair[1]
		if !is.Truncated || is.Bytes != was.Bytes || is.SHA256 != was.SHA256 || len(is.Head) == 0 || len(is.Tail) == 0 ||
			int64(len(is.Head)+len(is.Tail)) >= was.Bytes {
			t.Errorf("%s: %d head and %d tail bytes of %d, truncated %v, sha256 %s", name, len(is.Head), len(is.Tail), is.Bytes, is.Truncated, is.SHA256)
		}
	}
	if !strings.HasPrefix(stdout, string(got.Stdout.Head)) || !strings.HasSuffix(stdout, string(got.Stdout.Tail)) {
		t.Errorf("stdout's head and tail are not its first and last bytes")
	}
	if rec := got.Receipt.Receipt; !*rec.Pass || rec.PodUID != "pod-uid-1" || rec.JobID != "job-1" || rec.ExitCode != 0 || rec.AirlockVersion != "v1" {
		t.Errorf("the cut Result's receipt lost what it bound: %+v", rec)
	}

	// A Result that fits is given as it is.
	small := execResult(t, r, "42\n", "", 1<<20, 1<<20)
	if got, err := r.fitResult(small, max); err != nil || got.Receipt != small.Receipt {
		t.Errorf("a Result that fits: %v, receipt re-signed %v", err, got.Receipt != small.Receipt)
	}
	// A Result another key signed is not signed again.
	other := &Runner{root: t.TempDir(), version: "v1"}
	foreign := execResult(t, other, stdout, "", 1<<30, 1<<20)
	if _, err := r.fitResult(foreign, max); !errdefs.IsInvalidArgument(err) {
		t.Errorf("another key's Result: %v", err)
	}
	// One that cannot fit without its output is an error, not a Result.
	if _, err := r.fitResult(res, 1<<10); !errdefs.IsResourceExhausted(err) {
		t.Errorf("a Result that cannot fit: %v", err)
	}
}

func TestCutStream(t *testing.T) {
	whole := Stream{Head: []byte("0123456789"), Bytes: 10}
	for _, tc := range []struct {
		in         Stream
		keep       int
		head, tail string
		truncated  bool
	}{
		{whole, 10, "0123456789", "", false},
		{whole, 4, "0123", "6789", true},
		{whole, 6, "012345", "6789", true},
		{whole, 0, "", "", true},
		{Stream{Head: []byte("0123"), Tail: []byte("wxyz"), Bytes: 100, Truncated: true}, 2, "01", "yz", true},
		// No character split: "é" is 2 bytes, "€" 3.
		{Stream{Head: []byte("aé€b"), Bytes: 7}, 2, "a", "b", true},
		{Stream{Head: []byte("aé€b"), Bytes: 7}, 4, "aé", "€b", true},
	} {
		got := cutStream(tc.in, tc.keep)
		if string(got.Head) != tc.head || string(got.Tail) != tc.tail || got.Truncated != tc.truncated || got.Bytes != tc.in.Bytes {
			t.Errorf("cutStream(%q|%q, %d) = %q|%q truncated %v; want %q|%q %v", tc.in.Head, tc.in.Tail, tc.keep, got.Head, got.Tail, got.Truncated, tc.head, tc.tail, tc.truncated)
		}
	}
}
