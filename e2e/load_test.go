//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/engine/docker"
	"github.com/airlock-sandbox/airlock/engine/oci"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
)

func TestFiftyConcurrentRuns(t *testing.T) {
	dir := t.TempDir()
	var jobs strings.Builder
	for i := 0; i < 50; i++ {
		fmt.Fprintf(&jobs, `{"id":"c%02d","argv":["sh","-c","sleep 1; echo %d"],"expected_stdout":"%d\n"}`+"\n", i, i, i)
	}
	jobsPath, out := filepath.Join(dir, "jobs.jsonl"), filepath.Join(dir, "out.jsonl")
	os.WriteFile(jobsPath, []byte(jobs.String()), 0o644)
	c := airlock(nil, "batch", jobsPath, "--out", out, "--parallel", "50", "--image", busybox,
		"--engine", engineName, "--isolation", isolationName, "--out-dir", "none", "--timeout", "120s")
	if c.code != 0 || !strings.Contains(c.stderr, "expected stdout: 50 pass, 0 fail") {
		t.Errorf("50 at once: exit %d\n%s", c.code, c.stderr)
		b, _ := os.ReadFile(out)
		for line := range strings.SplitSeq(string(b), "\n") {
			var r struct {
				JobID string `json:"job_id"`
				Error string `json:"error"`
			}
			if json.Unmarshal([]byte(line), &r) == nil && r.Error != "" {
				t.Logf("job %s: %s", r.JobID, r.Error)
			}
		}
	}
	noSandboxLeft(t)
}

// leakCounts are the host resources a run must give back.
func leakCounts(t *testing.T) (goroutines, fds, mounts, cgroups int) {
	t.Helper()
	ents, _ := os.ReadDir("/proc/self/fd")
	return runtime.NumGoroutine(), len(ents), len(mountsUnderRoot()), len(cgroup.IDs())
}

// apiRunner is the embeddable API's runner on the tests' root and the
// engine under test.
func apiRunner(t *testing.T) *runner.Runner {
	t.Helper()
	var eng engine.Engine
	var err error
	if engineName == "oci" {
		eng, err = oci.New(rootDir)
	} else {
		var d *docker.Engine
		d, err = docker.New()
		if err == nil {
			t.Cleanup(func() { d.Close() })
		}
		eng = d
	}
	if err != nil {
		t.Fatal(err)
	}
	r, err := runner.New(runner.WithRoot(rootDir), runner.WithEngine(eng))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSoakNoLeaks runs sandboxes one after another through the embeddable
// API, in this process, and checks that goroutines, fds, mounts and cgroups
// come back exactly to where they were: 30 in `make test` (one leak per
// run shows as 30), $AIRLOCK_SOAK_RUNS (500 in `make soak`) when set.
func TestSoakNoLeaks(t *testing.T) {
	r := apiRunner(t)
	var err error
	pol := isolation.Default()
	pol.Isolation = isolation.Mode(isolationName)
	run := func() {
		res, err := r.Run(context.Background(), runner.Spec{Image: busybox, Argv: []string{"echo", "soak"}, Policy: pol})
		if err != nil || res.Reason != runner.ReasonExited || string(res.Stdout.Head) != "soak\n" {
			t.Fatalf("run: %v %s %q", err, res.Reason, res.Stdout.Head)
		}
	}
	for i := 0; i < 10; i++ { // warm the client's connection pool and caches
		run()
	}
	g0, f0, m0, c0 := leakCounts(t)
	// 500 runs took about 4 minutes on docker/gvisor, under one on
	// oci/seccomp.
	n := 30
	if v := os.Getenv("AIRLOCK_SOAK_RUNS"); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("AIRLOCK_SOAK_RUNS=%q: give a positive count", v)
		}
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		run()
	}
	t.Logf("%d runs in %v", n, time.Since(start).Round(time.Second))
	var g1, f1, m1, c1 int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if g1, f1, m1, c1 = leakCounts(t); g1 <= g0 && f1 <= f0 {
			break
		}
	}
	t.Logf("before/after %d runs: goroutines %d/%d, fds %d/%d, mounts %d/%d, cgroups %d/%d", n, g0, g1, f0, f1, m0, m1, c0, c1)
	if g1 > g0 || f1 > f0 || m1 > m0 || c1 > c0 {
		t.Errorf("leak after %d runs: goroutines %d→%d, fds %d→%d, mounts %d→%d, cgroups %d→%d", n, g0, g1, f0, f1, m0, m1, c0, c1)
	}
	noSandboxLeft(t)
}
