//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/e2etest"
)

// limitProbe fetches its URL four times through the proxy, printing the
// body's length or the error of each.
const limitProbe = `
import sys, urllib.request
for i in range(4):
    try:
        with urllib.request.urlopen(sys.argv[1], timeout=20) as r:
            print("got", len(r.read()))
    except Exception as e:
        print("failed", type(e).__name__)
`

// --egress-limit caps what a sandbox's proxy moves, in a one-shot run and
// in a long-lived sandbox (whose proxy the supervisor serves): with 100KiB
// and a 48KiB body, two fetches pass, the third is cut, the fourth is
// refused, and the audit log says byte_limit. The run's policy record
// carries the limit.
func TestEgressLimit(t *testing.T) {
	if engineName == "docker" {
		t.Skip("the docker engine refuses egress (TestEgressAllowHost)")
	}
	allow := e2etest.Upstream(t, strings.Repeat("x", 48<<10))
	url := fmt.Sprintf("http://%s/", allow)
	check := func(t *testing.T, id, out string) {
		t.Helper()
		if strings.Count(out, fmt.Sprintf("got %d\n", 48<<10)) != 2 || strings.Count(out, "failed") != 2 {
			t.Errorf("four fetches of 48KiB under a 100KiB limit: want two whole, two failed:\n%s", out)
		}
		cut := false
		for _, ev := range egressRecords(t, id) {
			cut = cut || ev["reason"] == "byte_limit"
		}
		if !cut {
			t.Errorf("no byte_limit in the sandbox's egress records: %v", egressRecords(t, id))
		}
	}
	flags := []string{"--allow-host", allow, "--egress-limit", "100KiB"}
	probe := []string{"python3", "-c", limitProbe, url}

	t.Run("run", func(t *testing.T) {
		res, c := runJSON(t, nil, append(append(flags, "--"), probe...)...)
		if res.ExitCode != 0 {
			t.Fatalf("exit %d: %s\n%s", res.ExitCode, res.Stderr.Head, c.stderr)
		}
		check(t, res.ID, string(res.Stdout.Head))
		if res.Policy == nil || res.Policy.Egress == nil || res.Policy.Egress.LimitBytes != 100<<10 {
			t.Errorf("the policy's record does not show the limit: %+v", res.Policy)
		}
	})
	t.Run("sandbox", func(t *testing.T) {
		si := sbCreate(t, flags...)
		t.Cleanup(func() { airlock(nil, "sandbox", "rm", si.ID) })
		res, c := sbExec(t, si.ID, nil, probe...)
		if res.ExitCode != 0 {
			t.Fatalf("exit %d: %s\n%s", res.ExitCode, res.Stderr.Head, c.stderr)
		}
		check(t, si.ID, string(res.Stdout.Head))
	})
	if c := airlock(nil, "run", "--egress-limit", "1MiB", "--", "true"); c.code != 64 || !strings.Contains(c.stderr, "no egress") {
		t.Errorf("--egress-limit without --allow-host: exit %d, %s; want 64 saying the sandbox has no egress", c.code, c.stderr)
	}
}
