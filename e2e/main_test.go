//go:build e2e

// Package e2e runs airlock end to end against the real thing: the airlock
// binary, a real dockerd, airlock's pinned runsc, and real images. `make
// test` installs and starts all of it first; nothing here is mocked.
// `make test` runs the package once per engine and isolation pair; a test
// whose subject one of the two does not enter runs on one pair only
// (onlyPair), and egress tests skip the docker engine, which refuses egress.
package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/airlock-sandbox/airlock/engine/docker"
	"github.com/airlock-sandbox/airlock/internal/e2etest"
	"github.com/airlock-sandbox/airlock/runner"
)

var (
	engineName    string // the engine under test: AIRLOCK_E2E_ENGINE, default docker
	isolationName string // the isolation mode under test: AIRLOCK_E2E_ISOLATION, default gvisor
	airlockBin    string // the binary under test
	peakRSSBin    string // runs a command and reports its own peak RSS
	tmpDir        string // the suite's scratch directory
	rssSeq        atomic.Int64
	rootDir       string // airlock's state directory for these tests
	busybox       string // pinned reference of the busybox test image
	defaultRef    string // pinned reference of the default image
	dockerCli     *client.Client
)

func TestMain(m *testing.M) {
	code, err := setup(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e setup: %v\n(run `make test`, which installs and starts everything these tests need)\n", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	tmp, err := os.MkdirTemp("", "airlock-e2e-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)

	if airlockBin, err = e2etest.Build(tmp, "../cmd/airlock"); err != nil {
		return 0, err
	}
	if peakRSSBin, err = e2etest.BuildAs(tmp, "../internal/e2etest/peakrss", "peakrss"); err != nil {
		return 0, err
	}
	tmpDir = tmp

	// The default image comes from setup's root; the tests' own images go
	// into a root of their own so they never touch the user's index.
	sysRoot := e2etest.SysRoot()
	out, err := exec.Command(airlockBin, "--root", sysRoot, "image", "default").Output()
	if err != nil {
		return 0, fmt.Errorf("no default image: %w", err)
	}
	defaultRef = strings.TrimSpace(string(out))
	engineName, isolationName = e2etest.Pair("docker")
	fmt.Fprintf(os.Stderr, "e2e: engine %s, isolation %s\n", engineName, isolationName)
	if rootDir, err = e2etest.Root(tmp, sysRoot); err != nil {
		return 0, err
	}

	dockerCli, err = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return 0, err
	}
	ref, err := e2etest.ImportBusybox(airlockBin, rootDir, tmp, "airlock-e2e/busybox")
	if err != nil {
		return 0, err
	}
	busybox = ref.String()

	code := m.Run()
	if left := sandboxes(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "containers left behind: %v\n", left)
		code = 1
	}
	// Every run's scratch directory and output tmpfs is gone too.
	if runs, _ := os.ReadDir(filepath.Join(rootDir, "runs")); len(runs) > 0 {
		fmt.Fprintf(os.Stderr, "run directories left behind: %d\n", len(runs))
		code = 1
	}
	if e2etest.MountsLeft(rootDir) {
		fmt.Fprintf(os.Stderr, "mounts left behind under %s\n", rootDir)
		code = 1
	}
	return code, nil
}

type cliResult struct {
	code           int
	stdout, stderr string
	maxRSS         int64 // bytes
	wall           time.Duration
}

// airlock runs the binary with the tests' root. env entries are added to
// airlock's own environment.
func airlock(env []string, args ...string) cliResult {
	if len(args) > 0 && args[0] == "run" {
		args = append([]string{"run", "--engine", engineName, "--isolation", isolationName}, args[1:]...)
	}
	// Through peakrss: the CLI's own rusage would count this test binary's
	// memory, which it shares until its exec.
	rssFile := filepath.Join(tmpDir, fmt.Sprintf("rss-%d", rssSeq.Add(1)))
	defer os.Remove(rssFile)
	cmd := exec.Command(peakRSSBin, append([]string{rssFile, "--", airlockBin, "--root", rootDir}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	start := time.Now()
	err := cmd.Run()
	r := cliResult{stdout: so.String(), stderr: se.String(), wall: time.Since(start)}
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			r.code = ee.ExitCode()
		} else {
			r.code = -1
			r.stderr += err.Error()
		}
	}
	if b, err := os.ReadFile(rssFile); err == nil {
		r.maxRSS, _ = strconv.ParseInt(string(b), 10, 64)
	}
	return r
}

// runJSON runs `airlock run --json ARGS…` and decodes the one object it prints.
func runJSON(t *testing.T, env []string, args ...string) (runner.Result, cliResult) {
	t.Helper()
	c := airlock(env, append([]string{"run", "--json"}, args...)...)
	var res runner.Result
	dec := json.NewDecoder(strings.NewReader(c.stdout))
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("stdout is not one JSON object (%v): %q\nstderr: %s", err, c.stdout, c.stderr)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON value: %q", c.stdout)
	}
	return res, c
}

// sandboxes lists what airlock created that still exists: containers,
// runsc containers, run cgroups and bundles.
func sandboxes() []string {
	list, err := dockerCli.ContainerList(context.Background(), container.ListOptions{
		All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelID)),
	})
	if err != nil {
		return []string{"listing failed: " + err.Error()}
	}
	var names []string
	for _, c := range list {
		names = append(names, "container "+c.Labels[docker.LabelID])
	}
	state := filepath.Join(rootDir, "oci", "runsc")
	if _, err := os.Stat(state); err == nil {
		out, err := exec.Command(filepath.Join(rootDir, "tools", "runsc"), "--root", state, "list", "--quiet").Output()
		if err != nil {
			names = append(names, "runsc list failed: "+err.Error())
		}
		for _, id := range strings.Fields(string(out)) {
			names = append(names, "runsc "+id)
		}
	}
	if state := filepath.Join(rootDir, "oci", "runc"); dirExists(state) {
		out, err := exec.Command("runc", "--root", state, "list", "--quiet").Output()
		if err != nil {
			names = append(names, "runc list failed: "+err.Error())
		}
		for _, id := range strings.Fields(string(out)) {
			names = append(names, "runsc "+id) // counted with runsc: a runtime sandbox
		}
	}
	for _, c := range e2etest.Cgroups() {
		names = append(names, "cgroup "+c)
	}
	bundles, _ := os.ReadDir(filepath.Join(rootDir, "oci", "bundles"))
	for _, b := range bundles {
		names = append(names, "bundle "+b.Name())
	}
	// The runtimes' files of a container they do not list (runsc's
	// socket and lock, a runc state directory); runsc's shared empty
	// network namespace stays.
	for _, rt := range []string{"runsc", "runc"} {
		files, _ := os.ReadDir(filepath.Join(rootDir, "oci", rt))
		for _, f := range files {
			if f.Name() != "null-netns" {
				names = append(names, rt+" state file "+f.Name())
			}
		}
	}
	return names
}

// onlyPair runs t only when the pair under test is engine/isolation ("" is
// either): for a test whose subject the other pairs would only repeat.
// `make test` runs every pair, so each such test still runs once there.
func onlyPair(t *testing.T, engine, isolation string) {
	t.Helper()
	if (engine != "" && engine != engineName) || (isolation != "" && isolation != isolationName) {
		t.Skipf("runs on the pair engine=%s isolation=%s only (%s/%s repeats it)", cmp.Or(engine, "any"), cmp.Or(isolation, "any"), engineName, isolationName)
	}
}

func noSandboxLeft(t *testing.T) {
	t.Helper()
	if left := sandboxes(); len(left) > 0 {
		t.Errorf("containers left behind: %v", left)
	}
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
