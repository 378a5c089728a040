//go:build e2e

// Package e2e runs airlock end to end against the real thing: the airlock
// binary, a real dockerd, airlock's pinned runsc, and real images. `make
// test` installs and starts all of it first; nothing here is mocked, and
// nothing is skipped.
package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/engine/docker"
	"github.com/airlock-sandbox/airlock/runner"
)

var (
	airlockBin string // the binary under test
	rootDir    string // airlock's state directory for these tests
	busybox    string // pinned reference of the busybox test image
	defaultRef string // pinned reference of the default image
	dockerCli  *client.Client
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

	airlockBin = filepath.Join(tmp, "airlock")
	build := exec.Command("go", "build", "-o", airlockBin, "../cmd/airlock")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return 0, fmt.Errorf("building airlock: %w", err)
	}

	// The default image comes from setup's root; the tests' own images go
	// into a root of their own so they never touch the user's index.
	sysRoot := os.Getenv("AIRLOCK_ROOT")
	if sysRoot == "" {
		sysRoot = runner.DefaultRoot
	}
	out, err := exec.Command(airlockBin, "--root", sysRoot, "image", "default").Output()
	if err != nil {
		return 0, fmt.Errorf("no default image: %w", err)
	}
	defaultRef = strings.TrimSpace(string(out))
	rootDir = filepath.Join(tmp, "root")
	lock, err := os.ReadFile(filepath.Join(sysRoot, "images", "default.lock"))
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(filepath.Join(rootDir, "images"), 0o755); err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(rootDir, "images", "default.lock"), lock, 0o644); err != nil {
		return 0, err
	}

	dockerCli, err = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return 0, err
	}
	layoutDir := filepath.Join(tmp, "busybox-oci")
	if err := writeBusyboxLayout(layoutDir); err != nil {
		return 0, fmt.Errorf("building the busybox image: %w", err)
	}
	res := airlock(nil, "image", "import", "--name", "airlock-e2e/busybox", layoutDir)
	if res.code != 0 {
		return 0, fmt.Errorf("importing busybox: exit %d: %s", res.code, res.stderr)
	}
	busybox = strings.TrimSpace(res.stdout)

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
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(mi, []byte(rootDir)) {
		fmt.Fprintf(os.Stderr, "mounts left behind under %s\n", rootDir)
		code = 1
	}
	return code, nil
}

// writeBusyboxLayout writes an OCI image layout holding busybox-static and
// a link per applet, with a gzip layer. extra files are added to the layer.
func writeBusyboxLayout(dir string, extra ...string) error {
	bin, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return err
	}
	list, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"bin/", "tmp/", "etc/", "proc/", "dev/", "sys/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode})
	}
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bin))})
	tw.Write(bin)
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" {
			continue
		}
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox"})
	}
	passwd := "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/passwd", Mode: 0o644, Size: int64(len(passwd))})
	tw.Write([]byte(passwd))
	for i, content := range extra {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("etc/extra%d", i), Mode: 0o644, Size: int64(len(content))})
		tw.Write([]byte(content))
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerBytes := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerBytes)), nil
	})
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Env = []string{"PATH=/bin"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img)
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
	cmd := exec.Command(airlockBin, append([]string{"--root", rootDir}, args...)...)
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
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			r.maxRSS = ru.Maxrss * 1024
		}
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

// sandboxes lists the containers airlock created that still exist.
func sandboxes() []string {
	list, err := dockerCli.ContainerList(context.Background(), container.ListOptions{
		All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelID)),
	})
	if err != nil {
		return []string{"listing failed: " + err.Error()}
	}
	var names []string
	for _, c := range list {
		names = append(names, c.Labels[docker.LabelID])
	}
	return names
}

func noSandboxLeft(t *testing.T) {
	t.Helper()
	if left := sandboxes(); len(left) > 0 {
		t.Errorf("containers left behind: %v", left)
	}
}
