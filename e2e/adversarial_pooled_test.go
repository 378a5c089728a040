//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/runner"
)

// advTemplates are the policies the suite's runs need, one warm pool
// each: a run goes to the template of its image, pids and memory, and its
// timeout, output limit and env ride in the request.
var advTemplates = []struct {
	name, image, pids, memory string
	size                      int
}{
	{"adv-default", "", "", "", 2},
	{"adv-busybox", "busybox", "", "", 2},
	{"adv-busybox-pids64", "busybox", "64", "", 1},
	{"adv-pids64-1g", "", "64", "1GiB", 1},
	{"adv-mem128", "", "", "128MiB", 1},
}

// advPool runs the suite's runs on warm pools of `airlock serve`.
type advPool struct {
	srv    *exec.Cmd
	client *http.Client
	// snapshots, when set, are the templates' snapshots by name: each run
	// is then an exec in a sandbox of its own taken from the template's
	// sandbox pool, restored from the snapshot, and destroyed after it.
	snapshots map[string]string
	mu        sync.Mutex
	errs      []string
}

// advWarm is the warm program of the suite's snapshot templates: it says
// it is ready and sleeps, one process beside the sandbox's init.
const advWarm = `touch "$AIRLOCK_READY_FILE" && exec sleep 1000000`

// TestAdversarialPooled runs the adversarial suite's network, filesystem,
// privilege, secrets and resources groups on pooled sandboxes: every run
// goes through POST /v1/runs to a server with a warm pool per policy, and
// must be a claim (the pools fail when empty, and the run retries), with
// the outcomes TestAdversarial expects of `airlock run`.
func TestAdversarialPooled(t *testing.T) {
	if engineName != "oci" {
		// Pools hold sandboxes of the oci engine only: on this engine the
		// check is that serve refuses one, and says so.
		if r := airlock(nil, "template", "create", "adv-docker", "--replace", "--engine", engineName); r.code != 0 {
			t.Fatalf("template create: exit %d: %s", r.code, r.stderr)
		}
		defer airlock(nil, "template", "rm", "adv-docker")
		r := airlock(nil, "serve", "--socket", filepath.Join(t.TempDir(), "s.sock"), "--pool", "adv-docker=1")
		if r.code == 0 || !strings.Contains(r.stderr, "cannot keep a warm pool; use --engine oci") {
			t.Fatalf("serve --pool on engine %s: exit %d: %s; want a refusal naming --engine oci", engineName, r.code, r.stderr)
		}
		return
	}
	testAdversarialPooled(t, false)
}

// TestAdversarialRestored is TestAdversarialPooled in sandboxes restored
// from snapshots: each template is made with --warm, and each run is an
// exec in a sandbox of its own, taken from the template's sandbox pool
// (restored from its snapshot) and destroyed after it. The outcomes are
// TestAdversarialPooled's except where a restored sandbox differs by
// design (advRuns.restored). Snapshots are gVisor's, on the oci engine.
func TestAdversarialRestored(t *testing.T) {
	onlyPair(t, "oci", "gvisor")
	testAdversarialPooled(t, true)
}

func testAdversarialPooled(t *testing.T, restored bool) {
	h := newAdvHost(t)
	var pools []string
	snapshots := map[string]string{}
	for _, tp := range advTemplates {
		args := []string{"template", "create", tp.name, "--replace", "--engine", "oci", "--isolation", isolationName, "--timeout", "120s"}
		if tp.image == "busybox" {
			args = append(args, "--image", busybox)
		}
		if tp.pids != "" {
			args = append(args, "--pids", tp.pids)
		}
		if tp.memory != "" {
			args = append(args, "--memory", tp.memory)
		}
		pool := "--pool"
		if restored {
			args = append(args, "--json", "--warm", "--", "sh", "-c", advWarm)
			pool = "--pool-sandboxes"
		}
		r := airlock(nil, args...)
		if r.code != 0 {
			t.Fatalf("template create %s: exit %d: %s", tp.name, r.code, r.stderr)
		}
		t.Cleanup(func() { airlock(nil, "template", "rm", tp.name) })
		if restored {
			var tpl struct{ Snapshot string }
			if err := json.Unmarshal([]byte(r.stdout), &tpl); err != nil || tpl.Snapshot == "" {
				t.Fatalf("template create %s --warm: no snapshot in %q (%v)", tp.name, r.stdout, err)
			}
			snapshots[tp.name] = tpl.Snapshot
		}
		pools = append(pools, pool, fmt.Sprintf("%s=%d", tp.name, tp.size))
	}
	p := startPooled(t, h.secret, pools)
	how := " (pooled)"
	if restored {
		p.snapshots, how = snapshots, " (each in a sandbox restored from a snapshot)"
	}
	start := time.Now()
	r := h.runAll(t, p.run)
	r.restored = restored
	if restored {
		t.Logf("the fork bomb: %s %s %q; the memory hog: %s %s %q; the thread bomb: %s %d %q", r.forkBomb.res.Reason, r.forkBomb.res.ErrorKind, r.forkBomb.res.Error,
			r.memory.res.Reason, r.memory.res.ErrorKind, r.memory.res.Error, r.threads.res.Reason, r.threads.res.ExitCode, r.threads.res.Error)
	}
	t.Logf("runs took %v", time.Since(start).Round(time.Millisecond))
	p.mu.Lock()
	for _, e := range p.errs {
		t.Error(e)
	}
	p.mu.Unlock()
	if err := r.probeDone(); err != nil {
		t.Error(err)
	}
	cases := advGroups(t, advCases(h, r), "network", "filesystem", "privilege", "secrets", "resources")
	advReport(t, how, cases)
}

// startPooled starts `airlock serve` with the pools, the secret in its
// environment, and waits until every pool is full.
func startPooled(t *testing.T, secret string, pools []string) *advPool {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	cmd := exec.Command(airlockBin, append([]string{"--root", rootDir, "serve", "--socket", sock, "--pool-exhausted", "fail"}, pools...)...)
	cmd.Env = append(os.Environ(), "AIRLOCK_E2E_SECRET="+secret)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &advPool{srv: cmd, client: &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("airlock serve: %v: %s", err, stderr.String())
		}
	})
	want := 0
	for _, tp := range advTemplates {
		want += tp.size
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		var list []runner.SandboxInfo
		if resp, err := p.client.Get("http://airlock/v1/sandboxes"); err == nil {
			json.NewDecoder(resp.Body).Decode(&list)
			resp.Body.Close()
		}
		n := 0
		for _, si := range list {
			if si.State == "pooled" {
				n++
			}
		}
		if n >= want {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pools hold %d of %d sandboxes after 2 minutes: %s", n, want, stderr.String())
		}
	}
}

// run is `airlock run --json ARGS` as a pooled run: its template from the
// image, pids and memory flags; its timeout, output limit and env in the
// request. A 429 (the pool is empty) is retried until a claim.
func (p *advPool) run(_ []string, args ...string) advRun {
	var image, pids, memory string
	req := map[string]any{}
	i := 0
	for ; i < len(args) && args[i] != "--"; i += 2 {
		switch v := args[i+1]; args[i] {
		case "--image":
			image = "busybox"
			if v != busybox {
				return advRun{err: fmt.Errorf("no pool for image %s", v)}
			}
		case "--pids":
			pids = v
		case "--memory":
			memory = v
		case "--timeout":
			req["timeout"] = v
		case "--output-limit":
			req["output_limit"] = v
		case "--env":
			env, _ := req["env"].([]string)
			req["env"] = append(env, v)
		default:
			return advRun{err: fmt.Errorf("the pooled suite does not know flag %s", args[i])}
		}
	}
	req["argv"] = args[i+1:]
	for _, tp := range advTemplates {
		if tp.image == image && tp.pids == pids && tp.memory == memory {
			req["template"] = tp.name
		}
	}
	if req["template"] == nil {
		return advRun{err: fmt.Errorf("no pool for image %q pids %q memory %q", image, pids, memory)}
	}
	if p.snapshots != nil {
		return p.restored(req)
	}
	body, _ := json.Marshal(req)
	begin := time.Now()
	for {
		resp, err := p.client.Post("http://airlock/v1/runs", "application/json", bytes.NewReader(body))
		if err != nil {
			return advRun{err: err}
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		var r advRun
		if err := json.Unmarshal(b, &r.res); err != nil || resp.StatusCode != http.StatusOK {
			r.err = fmt.Errorf("POST /v1/runs: %d %s", resp.StatusCode, b)
			return r
		}
		if r.res.Pool != req["template"] {
			p.mu.Lock()
			p.errs = append(p.errs, fmt.Sprintf("a run on %s was not pooled: %s", req["template"], b))
			p.mu.Unlock()
		}
		r.cli = cliResult{code: cliCode(r.res), stdout: string(b), wall: time.Since(begin), maxRSS: peakRSS(p.srv.Process.Pid)}
		// A pooled sandbox is freed just after its Result is out: the
		// suite's leftover checks look once it is.
		state := filepath.Join(rootDir, "state", r.res.ID+".json")
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(state); os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				r.err = fmt.Errorf("run %s was not torn down 30s after its Result", r.res.ID)
				break
			}
		}
		return r
	}
}

// restored makes run req an exec in a sandbox of its own, taken from the
// pool of req's template (restored from its snapshot), and destroys the
// sandbox after it. A 429 (the pool is empty) is retried until a claim.
func (p *advPool) restored(req map[string]any) advRun {
	tpl := req["template"].(string)
	begin := time.Now()
	var si runner.SandboxInfo
	for {
		body, _ := json.Marshal(map[string]any{"template": tpl})
		st, b, err := p.call("POST", "/v1/sandboxes", body)
		if err != nil {
			return advRun{err: err}
		}
		if st == http.StatusTooManyRequests {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err := json.Unmarshal(b, &si); err != nil || st != http.StatusCreated {
			return advRun{err: fmt.Errorf("POST /v1/sandboxes: %d %s", st, b)}
		}
		break
	}
	delete(req, "template")
	body, _ := json.Marshal(req)
	var r advRun
	st, b, err := p.call("POST", "/v1/sandboxes/"+si.ID+"/exec", body)
	var e struct {
		Error struct{ Kind, Message string }
	}
	switch {
	case err != nil:
	case st != http.StatusOK && json.Unmarshal(b, &e) == nil && e.Error.Kind == "sandbox_lost":
		// As `airlock exec` reports an exec into a lost sandbox.
		r.res = runner.Result{SandboxID: si.ID, Reason: runner.ReasonError, ErrorKind: e.Error.Kind, Error: e.Error.Message, Snapshot: si.Snapshot}
	case st != http.StatusOK || json.Unmarshal(b, &r.res) != nil:
		err = fmt.Errorf("POST /v1/sandboxes/%s/exec: %d %s", si.ID, st, b)
	}
	r.err = err
	if st, b, err := p.call("DELETE", "/v1/sandboxes/"+si.ID, nil); err != nil || st != http.StatusNoContent {
		r.err = errors.Join(r.err, fmt.Errorf("DELETE /v1/sandboxes/%s: %d %s (%v)", si.ID, st, b, err))
	}
	if r.err == nil && (r.res.Snapshot == "" || r.res.Snapshot != p.snapshots[tpl] || si.Snapshot != r.res.Snapshot) {
		p.mu.Lock()
		p.errs = append(p.errs, fmt.Sprintf("a run on %s was not in a sandbox restored from its snapshot %s: sandbox %s, result %q", tpl, p.snapshots[tpl], si.Snapshot, r.res.Snapshot))
		p.mu.Unlock()
	}
	r.cli = cliResult{code: cliCode(r.res), stdout: string(b), wall: time.Since(begin), maxRSS: peakRSS(p.srv.Process.Pid)}
	return r
}

// call makes one request of the server and reads its answer.
func (p *advPool) call(method, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(method, "http://airlock"+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// cliCode is the exit code `airlock run` or `airlock exec` gives a Result
// (README, "Exit codes").
func cliCode(res runner.Result) int {
	if res.Reason == runner.ReasonError && res.ErrorKind == "sandbox_lost" {
		return 69
	}
	switch res.Reason {
	case runner.ReasonExited:
		return res.ExitCode
	case runner.ReasonTimeout:
		return 124
	case runner.ReasonOutputLimit:
		return 123
	case runner.ReasonPidsLimit:
		return 122
	case runner.ReasonOOM:
		return 137
	}
	return -1
}

// peakRSS is a process's peak resident set (VmHWM), in bytes.
func peakRSS(pid int) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
