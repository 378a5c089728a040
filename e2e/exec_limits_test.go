//go:build e2e

package e2e

import (
	"testing"
)

// TestExecLimitsOnlyNarrow: an exec's --timeout and --output-limit may
// narrow its sandbox's, never widen them: a longer or bigger one is cut
// to the sandbox's, and the Result's limits say which applied.
func TestExecLimitsOnlyNarrow(t *testing.T) {
	si := sbCreate(t, "--timeout", "2s", "--output-limit", "4KiB")
	t.Cleanup(func() { airlock(nil, "sandbox", "rm", si.ID) })

	res, c := sbExec(t, si.ID, []string{"--timeout", "60s"}, "sleep", "10")
	if res.Reason != "timeout" || res.Limits.TimeoutMS != 2000 {
		t.Errorf("exec --timeout 60s in a sandbox of --timeout 2s: reason %s, timeout_ms %d; want timeout at 2000ms\n%s", res.Reason, res.Limits.TimeoutMS, c.stderr)
	}
	res, c = sbExec(t, si.ID, []string{"--output-limit", "1MiB"}, "head", "-c", "100000", "/dev/zero")
	if !res.Stdout.Truncated || res.Reason != "output_limit" || res.Limits.OutputBytes != 4096 {
		t.Errorf("exec --output-limit 1MiB in a sandbox of --output-limit 4KiB: reason %s, truncated %v, output_bytes %d; want output_limit at 4096\n%s",
			res.Reason, res.Stdout.Truncated, res.Limits.OutputBytes, c.stderr)
	}
	// Narrowing still applies.
	res, c = sbExec(t, si.ID, []string{"--timeout", "1s", "--output-limit", "2KiB"}, "echo", "ok")
	if res.ExitCode != 0 || string(res.Stdout.Head) != "ok\n" || res.Limits.TimeoutMS != 1000 || res.Limits.OutputBytes != 2048 {
		t.Errorf("exec --timeout 1s --output-limit 2KiB: %+v\n%s", res, c.stderr)
	}
}
