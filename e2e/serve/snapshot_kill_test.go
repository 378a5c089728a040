//go:build e2e

package serve

// kill -9 of `airlock serve` in the middle of a pause, of a resume and of
// the refill of a pool restored from a snapshot, then `airlock reap`:
// nothing is left of a sandbox that no longer exists (runtime sandbox,
// cgroups, mounts, bundle, records, checkpoint). Each kill falls at a
// share of the time the operation took uncut, or on a file it writes
// half-way, and the test logs how far the operation had got.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/runner"
)

// gvisorOnly skips a test of snapshots on a pair without them (CI runs
// e2e/serve on oci/gvisor).
func gvisorOnly(t *testing.T) {
	t.Helper()
	if engineName != "oci" || isolationName != "gvisor" {
		t.Skipf("pause and snapshots are oci/gvisor's; this pair is %s/%s", engineName, isolationName)
	}
}

// kill9 ends the server as a crash would.
func (s *srv) kill9() {
	s.cmd.Process.Signal(syscall.SIGKILL)
	s.cmd.Wait()
}

// reap runs `airlock reap` and logs what it reaped.
func reap(t *testing.T) {
	t.Helper()
	out, err := exec.Command(airlockBin, "--root", rootDir, "reap").CombinedOutput()
	if err != nil {
		t.Fatalf("airlock reap: %v: %s", err, out)
	}
	t.Logf("airlock reap: %s", strings.Join(strings.Fields(string(out)), " "))
}

// waitGone polls until leftovers() holds nothing that keep does not
// (all when keep is nil) for 15 s: a sandbox's supervisor, which
// outlives the server, may still be ending it as reap runs.
func waitGone(t *testing.T, what string, keep func(string) bool) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		left = left[:0]
		for _, l := range leftovers() {
			if keep == nil || keep(l) {
				left = append(left, l)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s, then airlock reap, left: %v", what, left)
		}
	}
}

// naming keeps the leftovers that name one of ids.
func naming(ids []string) func(string) bool {
	return func(l string) bool {
		return slices.ContainsFunc(ids, func(id string) bool { return strings.Contains(l, id) })
	}
}

var sandboxID = regexp.MustCompile(`sb-[0-9a-f]{20}`)

// exists reports whether path is there.
func exists(path string) bool { _, err := os.Lstat(path); return err == nil }

// progress says how far a cut-short pause or resume of sandbox id got:
// its checkpoint's files, whether the engine's state records it paused,
// and runsc's status of it.
func progress(id string) string {
	ck := filepath.Join(rootDir, "oci", "checkpoints", id)
	var p []string
	switch {
	case exists(filepath.Join(ck, "complete")):
		p = append(p, "checkpoint whole")
	case exists(filepath.Join(ck, "checkpoint.img")):
		p = append(p, "checkpoint being written or not marked whole")
	case exists(ck):
		p = append(p, "checkpoint directory empty")
	default:
		p = append(p, "no checkpoint")
	}
	var st struct{ Paused bool }
	if b, err := os.ReadFile(filepath.Join(rootDir, "oci", "bundles", id, "sandbox.json")); err == nil && json.Unmarshal(b, &st) == nil {
		p = append(p, fmt.Sprintf("state paused=%v", st.Paused))
	}
	out, err := exec.Command(filepath.Join(rootDir, "tools", "runsc"), "--root", filepath.Join(rootDir, "oci", "runsc"), "state", "airlock-"+id).Output()
	var rs struct{ Status string }
	if err != nil || json.Unmarshal(out, &rs) != nil {
		rs.Status = "none"
	}
	return strings.Join(append(p, "runsc "+rs.Status), ", ")
}

// killPoint is when a kill falls: after a delay, or once a file exists.
type killPoint struct {
	after time.Duration
	file  func(id string) string
}

func (k killPoint) String() string {
	if k.file != nil {
		return "on " + filepath.Base(k.file("ID"))
	}
	return k.after.Round(time.Millisecond).String()
}

// wait waits for the kill point, from the operation's start; it reports
// false when the file never came (the operation ended first).
func (k killPoint) wait(id string, done <-chan error) bool {
	if k.file == nil {
		time.Sleep(k.after)
		return true
	}
	path := k.file(id)
	for !exists(path) {
		select {
		case <-done:
			return false
		default:
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// spread is n kill points across d, the time an uncut operation took,
// and the file points given.
func spread(d time.Duration, files ...func(string) string) []killPoint {
	var ks []killPoint
	for _, f := range []float64{0.1, 0.3, 0.5, 0.7, 0.9} {
		ks = append(ks, killPoint{after: time.Duration(f * float64(d))})
	}
	for _, f := range files {
		ks = append(ks, killPoint{file: f})
	}
	return ks
}

// newSandbox makes a gVisor sandbox with a file in its workspace, to be
// destroyed through whichever server is up by then.
func newSandbox(t *testing.T, a api) string {
	t.Helper()
	var si runner.SandboxInfo
	a.call(t, "POST", "/v1/sandboxes", map[string]any{"engine": engineName, "isolation": isolationName, "idle_timeout": "5m", "ttl": "10m"}, http.StatusCreated, &si)
	t.Cleanup(func() {
		if t.Failed() {
			exec.Command(airlockBin, "--root", rootDir, "sandbox", "rm", si.ID).Run()
		}
	})
	if r := a.exec(t, si.ID, map[string]any{"argv": []string{"sh", "-c", "echo kept > f"}}); r.ExitCode != 0 {
		t.Fatalf("writing a file in %s: %+v", si.ID, r)
	}
	return si.ID
}

// TestServeKill9Pause: the server SIGKILLed during POST .../pause, at
// several points; a new server then resumes the sandbox, which runs on
// with its file (every other time), or destroys it straight away. After
// the last, airlock reap, and nothing of any of them is left, their
// checkpoints included.
func TestServeKill9Pause(t *testing.T) {
	gvisorOnly(t)
	testKill9Op(t, "pause", func(id string) string { return filepath.Join(rootDir, "oci", "checkpoints", id, "checkpoint.img") })
}

// TestServeKill9Resume: as TestServeKill9Pause, the server killed during
// POST .../resume of a paused sandbox.
func TestServeKill9Resume(t *testing.T) {
	gvisorOnly(t)
	testKill9Op(t, "resume", func(id string) string { return filepath.Join(rootDir, "oci", "bundles", id, "restore.pid") })
}

func testKill9Op(t *testing.T, op string, half func(string) string) {
	s := startServer(t)
	a := s.apis()[0]
	post := func(a api, id, what string) error {
		_, err := a.sendJSON(context.Background(), "POST", "/v1/sandboxes/"+id+"/"+what, nil, http.StatusOK, nil)
		return err
	}
	// The uncut operation, timed.
	id := newSandbox(t, a)
	ids := []string{id}
	if op == "resume" {
		a.call(t, "POST", "/v1/sandboxes/"+id+"/pause", nil, http.StatusOK, nil)
	}
	begin := time.Now()
	a.call(t, "POST", "/v1/sandboxes/"+id+"/"+op, nil, http.StatusOK, nil)
	took := time.Since(begin)
	a.call(t, "DELETE", "/v1/sandboxes/"+id, nil, http.StatusNoContent, nil)
	t.Logf("an uncut %s took %v", op, took)

	for i, k := range spread(took, half) {
		id := newSandbox(t, a)
		ids = append(ids, id)
		if op == "resume" {
			a.call(t, "POST", "/v1/sandboxes/"+id+"/pause", nil, http.StatusOK, nil)
		}
		done := make(chan error, 1)
		go func(a api) { done <- post(a, id, op) }(a)
		reached := k.wait(id, done)
		s.kill9()
		answer := "cut short"
		if err := <-done; err == nil {
			answer = "answered before the kill"
		}
		t.Logf("%s killed at %v (reached %v): %s; %s", op, k, reached, answer, progress(id))
		s = startServer(t)
		a = s.apis()[0]
		if i%2 == 0 {
			// Whatever was cut short, a resume finishes it.
			var si runner.SandboxInfo
			a.call(t, "POST", "/v1/sandboxes/"+id+"/resume", nil, http.StatusOK, &si)
			if r := a.exec(t, id, map[string]any{"argv": []string{"cat", "f"}}); si.State != "ready" || string(r.Stdout.Head) != "kept\n" {
				t.Fatalf("after a %s killed at %v and a resume: state %s, exec %+v", op, k, si.State, r)
			}
		}
		a.call(t, "DELETE", "/v1/sandboxes/"+id, nil, http.StatusNoContent, nil)
	}
	s.kill9()
	reap(t)
	waitGone(t, fmt.Sprintf("kill -9 of the server during %d %ss", len(ids)-1, op), naming(ids))
}

// poolState summarises what the root holds after a kill: the sandboxes'
// states, and the engine's and areas' leftovers by kind.
func poolState() string {
	states := map[string]int{}
	recs, _ := filepath.Glob(filepath.Join(rootDir, "sandboxes", "sb-*.json"))
	for _, r := range recs {
		si, err := runner.ReadSandbox(rootDir, strings.TrimSuffix(filepath.Base(r), ".json"))
		st := string(si.State)
		if err != nil {
			st = "gone"
		}
		states[st]++
	}
	kinds := map[string]int{}
	for _, l := range leftovers() {
		k, _, _ := strings.Cut(l, " ")
		if rel, ok := strings.CutPrefix(l, rootDir+"/"); ok {
			// oci/bundles, oci/checkpoints, sandboxes, runs
			parts := strings.SplitN(rel, "/", 3)
			k = parts[0]
			if k == "oci" && len(parts) > 1 {
				k += "/" + parts[1]
			}
		}
		kinds[k]++
	}
	var p []string
	for _, k := range slices.Sorted(maps.Keys(states)) {
		p = append(p, fmt.Sprintf("%d %s", states[k], k))
	}
	p = append(p, "leftovers:")
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		p = append(p, fmt.Sprintf("%s %d", k, kinds[k]))
	}
	return strings.Join(p, " ")
}

// TestServeKill9PoolRefill: the server SIGKILLed while it fills the pool
// of a run-code template (sandboxes restored from its snapshot) at its
// start, and while it refills it after a /run_code claimed one, at
// several points across the time an uncut fill took; after each kill,
// airlock reap, and nothing of any sandbox is left.
func TestServeKill9PoolRefill(t *testing.T) {
	gvisorOnly(t)
	poolTemplate(t, "e2e-rc-kill", "--run-code", "python")
	flags := []string{"--run-code-template", "python=e2e-rc-kill", "--pool-sandboxes", "e2e-rc-kill=2"}
	// What is there already is not this test's; cgroups are the host's,
	// so only those of sandboxes this root holds are.
	old := map[string]bool{}
	for _, l := range leftovers() {
		old[l] = true
	}
	var ids []string
	ours := func(l string) bool { return !old[l] && (strings.Contains(l, rootDir) || naming(ids)(l)) }
	seen := func() {
		for _, l := range leftovers() {
			if strings.Contains(l, rootDir) || strings.HasPrefix(l, "runtime sandbox ") {
				ids = append(ids, sandboxID.FindAllString(l, -1)...)
			}
		}
	}
	runCode := func(a api) {
		var r fusionReply
		a.call(t, "POST", "/run_code", map[string]any{"code": "print(6 * 7)", "language": "python"}, http.StatusOK, &r)
		if r.Status != "Success" || r.RunResult.Stdout != "42\n" {
			t.Fatalf("/run_code: %+v", r)
		}
	}

	// Uncut, timed: the fill at start, and the refill after a claim.
	begin := time.Now()
	s := startServer(t, flags...)
	a := s.apis()[0]
	a.waitPooled(t, "full", atLeast(2))
	fill := time.Since(begin)
	runCode(a)
	begin = time.Now()
	a.waitPooled(t, "refilled", atLeast(2))
	refill := time.Since(begin)
	t.Logf("an uncut fill of 2 took %v, a refill of 1 %v", fill, refill)
	s.kill9()
	seen()
	reap(t)
	waitGone(t, "kill -9 of the server with a full pool", ours)

	for _, phase := range []string{"fill", "refill"} {
		d := fill
		if phase == "refill" {
			d = refill
		}
		for _, k := range spread(d) {
			begin := time.Now()
			s := startServer(t, flags...)
			a := s.apis()[0]
			if phase == "refill" {
				a.waitPooled(t, "full", atLeast(2))
				runCode(a)
				begin = time.Now()
			}
			time.Sleep(k.after - time.Since(begin))
			s.kill9()
			at := time.Since(begin)
			seen()
			t.Logf("%s killed %v into it (aimed at %v): %s", phase, at.Round(time.Millisecond), k, poolState())
			reap(t)
			waitGone(t, fmt.Sprintf("kill -9 of the server %v into a pool's %s", k, phase), ours)
		}
	}
}
