//go:build e2e

package serve

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/runner"
)

// poolTemplate creates template name on the pair under test.
func poolTemplate(t *testing.T, name string, flags ...string) {
	t.Helper()
	args := append([]string{"--root", rootDir, "template", "create", name, "--replace", "--engine", engineName, "--isolation", isolationName}, flags...)
	if out, err := exec.Command(airlockBin, args...).CombinedOutput(); err != nil {
		t.Fatalf("template create: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command(airlockBin, "--root", rootDir, "template", "rm", name).Run() })
}

// pooled lists the ids of the pooled sandboxes the server shows.
func (a api) pooled(t *testing.T) []string {
	t.Helper()
	var list []runner.SandboxInfo
	a.call(t, "GET", "/v1/sandboxes", nil, http.StatusOK, &list)
	var ids []string
	for _, si := range list {
		if si.State == "pooled" {
			ids = append(ids, si.ID)
		}
	}
	return ids
}

// waitPooled polls until the server shows a pool as want says.
func (a api) waitPooled(t *testing.T, what string, want func(ids []string) bool) []string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ids := a.pooled(t)
		if want(ids) {
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60s the pool is still not %s: %v", what, ids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func atLeast(n int) func([]string) bool { return func(ids []string) bool { return len(ids) >= n } }

// poolable skips nothing: on the docker engine a pool is refused, and the
// test checks the refusal instead.
func poolable(t *testing.T) bool {
	t.Helper()
	if engineName == "oci" {
		return true
	}
	poolTemplate(t, "e2e-pool-docker")
	out, err := exec.Command(airlockBin, "--root", rootDir, "serve", "--socket", t.TempDir()+"/s.sock", "--pool", "e2e-pool-docker=1").CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() == 0 || !strings.Contains(string(out), "cannot keep a warm pool; use --engine oci") {
		t.Fatalf("serve --pool on the docker engine: %v: %s; want a refusal naming --engine oci", err, out)
	}
	return false
}

// TestServePool makes 50 pooled runs: each sees a fresh /tmp and /out (a
// marker one run writes is never seen by another), each id is distinct,
// and each run's artifact is its own.
func TestServePool(t *testing.T) {
	if !poolable(t) {
		return
	}
	poolTemplate(t, "e2e-pool")
	s := startServer(t, "--pool", "e2e-pool=3")
	a := s.apis()[0]
	a.waitPooled(t, "full", atLeast(3))
	script := `for f in /tmp/marker /out/marker.txt "$HOME/marker"; do [ -e "$f" ] && echo "SEEN $f: $(cat "$f")"; done
echo "$RUN" >/tmp/marker; echo "$RUN" >/out/marker.txt; echo "$RUN" >"$HOME/marker"; echo done`
	seen := map[string]bool{}
	for i := range 50 {
		a.waitPooled(t, "refilled", atLeast(1))
		var res runner.Result
		a.call(t, "POST", "/v1/runs", map[string]any{"template": "e2e-pool", "env": []string{fmt.Sprintf("RUN=%d", i)}, "argv": []string{"sh", "-c", script}}, http.StatusOK, &res)
		if res.Reason != runner.ReasonExited || res.ExitCode != 0 || string(res.Stdout.Head) != "done\n" {
			t.Fatalf("pooled run %d: %s exit %d, stdout %q stderr %q %s", i, res.Reason, res.ExitCode, res.Stdout.Head, res.Stderr.Head, res.Error)
		}
		if res.Pool != "e2e-pool" {
			t.Fatalf("run %d was not pooled: %+v", i, res)
		}
		if seen[res.ID] {
			t.Fatalf("run %d reused sandbox id %s", i, res.ID)
		}
		seen[res.ID] = true
		sum := sha256.Sum256([]byte(fmt.Sprintf("%d\n", i)))
		if len(res.Artifacts) != 1 || res.Artifacts[0].Path != "marker.txt" || res.Artifacts[0].SHA256 != hex.EncodeToString(sum[:]) {
			t.Fatalf("run %d's artifacts are not its own marker: %+v", i, res.Artifacts)
		}
		if res.Receipt == nil {
			t.Fatalf("run %d has no receipt", i)
		}
	}
	if st, _, b := a.do(t, "GET", "/metrics", nil); st != 200 || !strings.Contains(string(b), `airlock_pool_claims_total{template="e2e-pool"} 50`) {
		t.Errorf("/metrics does not count 50 claims: %s", grepLines(string(b), "airlock_pool_"))
	}
	// MCP's run_code on the template takes from the same pool: the
	// service's, under every face.
	a.waitPooled(t, "refilled", atLeast(1))
	res, text := tool(t, s.mcpClient(t), "run_code", map[string]any{"language": "sh", "code": "echo pooled", "template": "e2e-pool"})
	if out, _ := res.StructuredContent.(map[string]any); res.IsError || out["stdout"] != "pooled\n" {
		t.Fatalf("MCP run_code on the pooled template: %v %s", res.StructuredContent, text)
	}
	if st, _, b := a.do(t, "GET", "/metrics", nil); st != 200 || !strings.Contains(string(b), `airlock_pool_claims_total{template="e2e-pool"} 51`) {
		t.Errorf("MCP's run_code did not take a pooled sandbox: %s", grepLines(string(b), "airlock_pool_"))
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestServePoolExhausted: with the pool's one sandbox claimed (the refill
// starts when its run ends), a second run starts cold, or, under
// --pool-exhausted fail, is refused with 429 over_limit.
func TestServePoolExhausted(t *testing.T) {
	if !poolable(t) {
		return
	}
	poolTemplate(t, "e2e-pool-one")
	for _, mode := range []string{"cold", "fail"} {
		t.Run(mode, func(t *testing.T) {
			s := startServer(t, "--pool", "e2e-pool-one=1", "--pool-exhausted", mode)
			a := s.apis()[0]
			a.waitPooled(t, "full", atLeast(1))
			var wg sync.WaitGroup
			var first runner.Result
			wg.Add(1)
			go func() {
				defer wg.Done()
				a.call(t, "POST", "/v1/runs", map[string]any{"template": "e2e-pool-one", "argv": []string{"sleep", "3"}}, http.StatusOK, &first)
			}()
			a.waitPooled(t, "claimed", func(ids []string) bool { return len(ids) == 0 })
			st, _, b := a.do(t, "POST", "/v1/runs", strings.NewReader(`{"template":"e2e-pool-one","argv":["echo","second"]}`))
			wg.Wait()
			if first.Pool != "e2e-pool-one" || first.Reason != runner.ReasonExited {
				t.Fatalf("the first run: %+v", first)
			}
			switch mode {
			case "cold":
				if st != http.StatusOK || !strings.Contains(string(b), `"reason":"exited"`) || strings.Contains(string(b), `"pool"`) {
					t.Fatalf("a run on an empty pool: %d %s; want a cold run", st, b)
				}
			case "fail":
				if st != http.StatusTooManyRequests || !strings.Contains(string(b), `"over_limit"`) || !strings.Contains(string(b), "--pool-exhausted fail") {
					t.Fatalf("a run on an empty pool: %d %s; want 429 over_limit", st, b)
				}
			}
		})
	}
}

// TestServePoolTemplateChange: re-creating the template replaces every
// pooled sandbox, and the new ones carry the new settings.
func TestServePoolTemplateChange(t *testing.T) {
	if !poolable(t) {
		return
	}
	poolTemplate(t, "e2e-pool-change", "--memory", "512MiB")
	s := startServer(t, "--pool", "e2e-pool-change=2")
	a := s.apis()[0]
	old := a.waitPooled(t, "full", atLeast(2))
	poolTemplate(t, "e2e-pool-change", "--memory", "256MiB")
	a.waitPooled(t, "replaced", func(ids []string) bool {
		return len(ids) == 2 && !slices.ContainsFunc(ids, func(id string) bool { return slices.Contains(old, id) })
	})
	var res runner.Result
	a.call(t, "POST", "/v1/runs", map[string]any{"template": "e2e-pool-change", "argv": []string{"true"}}, http.StatusOK, &res)
	if res.Pool != "e2e-pool-change" || res.Limits.MemoryBytes != 256<<20 || slices.Contains(old, res.ID) {
		t.Fatalf("a run after the template changed: pool %q memory %d id %s (old %v)", res.Pool, res.Limits.MemoryBytes, res.ID, old)
	}
}

// TestServePoolKill9: SIGKILL of the server with a full pool, then
// `airlock reap`, leaves nothing (the suite's leftover check runs too).
func TestServePoolKill9(t *testing.T) {
	if !poolable(t) {
		return
	}
	poolTemplate(t, "e2e-pool-kill")
	s := startServer(t, "--pool", "e2e-pool-kill=3", "--pool-sandboxes", "e2e-pool-kill=2")
	a := s.apis()[0]
	ids := a.waitPooled(t, "full", atLeast(5))
	s.cmd.Process.Signal(syscall.SIGKILL)
	s.cmd.Wait()
	if out, err := exec.Command(airlockBin, "--root", rootDir, "reap").CombinedOutput(); err != nil {
		t.Fatalf("airlock reap: %v: %s", err, out)
	}
	// A pooled sandbox's supervisor, which outlives the server, may be
	// ending it as reap runs (reap leaves a sandbox whose lock another
	// destroyer holds): what is left must go within a few seconds.
	var left []string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		left = left[:0]
		for _, l := range leftovers() {
			for _, id := range ids {
				if strings.Contains(l, id) {
					left = append(left, l)
				}
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Fatalf("after kill -9 of the server and airlock reap, the pool left: %v", left)
	}
}

// TestServeSandboxPool: a create that names a template with a sandbox pool
// takes a pooled sandbox, which then carries the create's labels and runs
// execs; a create that does not fit (its own env) makes one; a pooled
// sandbox is no client's until claimed. Any engine.
func TestServeSandboxPool(t *testing.T) {
	poolTemplate(t, "e2e-sbpool")
	s := startServer(t, "--pool-sandboxes", "e2e-sbpool=2")
	a := s.apis()[0]
	pooled := a.waitPooled(t, "full", atLeast(2))
	var e apiError
	a.call(t, "POST", "/v1/sandboxes/"+pooled[0]+"/exec", map[string]any{"argv": []string{"true"}}, http.StatusNotFound, &e)

	si := a.create(t, map[string]any{"template": "e2e-sbpool", "labels": map[string]string{"who": "e2e"}})
	if !slices.Contains(pooled, si.ID) || si.State != "ready" || si.Labels["who"] != "e2e" || si.Labels["pool"] != "" {
		t.Fatalf("a create on the pooled template: %s %s %v (pooled %v)", si.ID, si.State, si.Labels, pooled)
	}
	if r := a.exec(t, si.ID, map[string]any{"argv": []string{"sh", "-c", "echo hi > f && cat f && pwd"}}); string(r.Stdout.Head) != "hi\n/home/user\n" {
		t.Fatalf("exec in the claimed sandbox: %+v", r)
	}
	cold := a.create(t, map[string]any{"template": "e2e-sbpool", "env": []string{"MINE=1"}})
	if slices.Contains(pooled, cold.ID) {
		t.Fatalf("a create with its own env took pooled sandbox %s", cold.ID)
	}
	if st, _, b := a.do(t, "GET", "/metrics", nil); st != 200 || !strings.Contains(string(b), `airlock_pool_claims_total{template="sandboxes/e2e-sbpool"} 1`) {
		t.Errorf("/metrics: %s", grepLines(string(b), "airlock_pool_"))
	}
	// MCP's sandbox_create on the template takes a pooled sandbox too.
	ready := a.waitPooled(t, "refilled", atLeast(1))
	if id, text := mcpSandbox(t, s.mcpClient(t), map[string]any{"template": "e2e-sbpool"}); !slices.Contains(ready, id) {
		t.Fatalf("MCP sandbox_create on the pooled template made %q (%s), not one of %v", id, text, ready)
	}
}
