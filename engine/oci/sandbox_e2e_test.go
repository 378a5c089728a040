//go:build e2e

package oci

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/engine/enginetest"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/internal/imagetest"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/seccomp"
	"github.com/airlock-sandbox/airlock/store"
)

// sysRoot is setup's root, whose store and runsc the tests share.
func sysRoot() string {
	if r := os.Getenv("AIRLOCK_ROOT"); r != "" {
		return r
	}
	return "/var/lib/airlock"
}

// testRoot is an engine root of the test's own over setup's store and
// tools, holding a busybox image.
func testRoot(t *testing.T) (string, digest.Digest) {
	t.Helper()
	if err := Usable(sysRoot()); err != nil {
		t.Fatalf("the oci engine cannot run here: %v", err)
	}
	root := t.TempDir()
	// runsc keeps a mounted network namespace in its root.
	t.Cleanup(func() { syscall.Unmount(filepath.Join(root, "oci", "runsc", "null-netns"), syscall.MNT_DETACH) })
	for _, d := range []string{"store", "tools"} {
		if err := os.Symlink(filepath.Join(sysRoot(), d), filepath.Join(root, d)); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	if err := imagetest.BusyboxLayout(dir); err != nil {
		t.Fatal(err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(root, "store"))
	if err != nil {
		t.Fatal(err)
	}
	id, err := st.Put(context.Background(), img, "airlock-test/busybox:sandbox")
	if err != nil {
		t.Fatal(err)
	}
	return root, id
}

func TestSandboxConformance(t *testing.T) {
	root, image := testRoot(t)
	newEngine := func(t *testing.T) *Engine {
		e, err := New(root)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	for _, mode := range []isolation.Mode{isolation.GVisor, isolation.Seccomp} {
		t.Run(string(mode), func(t *testing.T) {
			p := isolation.Default()
			p.Isolation = mode
			p.Seccomp = profile(t, mode)
			e := newEngine(t)
			bin, state, args := e.runtimeFor(mode, "")
			if mode == isolation.GVisor {
				args = []string{"--root", state} // bare: no flags of airlock's
			}
			enginetest.Sandboxes(t, func(t *testing.T) engine.Sandboxer { return newEngine(t) }, image, enginetest.Harness{
				Policy: p,
				KillSandbox: func(t *testing.T, id string) {
					pid, err := e.statePid(context.Background(), bin, state, namePrefix+id)
					if err != nil {
						t.Fatal(err)
					}
					if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
						t.Fatal(err)
					}
				},
				Leftovers: func(t *testing.T, id string) []string { return leftovers(t, e, id) },
				BareExec: func(id string) *exec.Cmd {
					return exec.Command(bin, append(args, "exec", namePrefix+id, "true")...)
				},
			})
		})
	}
}

// profile is airlock's default seccomp profile for mode, as the runner
// loads it.
func profile(t *testing.T, mode isolation.Mode) *isolation.SeccompProfile {
	p, err := seccomp.Load("default")
	if err == nil && mode == isolation.GVisor {
		p, err = seccomp.ForGVisor(p)
	}
	if err == nil {
		err = seccomp.Validate(p)
	}
	if err != nil {
		t.Fatal(err)
	}
	return &isolation.SeccompProfile{JSON: p.Bytes(), Spec: p.Spec(), SHA256: p.SHA256()}
}

// leftovers lists what the host still holds for sandbox id: runtime
// containers, cgroups, mounts, the bundle and its lock.
func leftovers(t *testing.T, e *Engine, id string) []string {
	var left []string
	for _, rt := range e.runtimes() {
		out, _ := exec.Command(rt.bin, "--root", rt.state, "list", "--format", "json").Output()
		var cs []struct {
			ID string `json:"id"`
		}
		json.Unmarshal(out, &cs)
		for _, c := range cs {
			if c.ID == namePrefix+id {
				left = append(left, filepath.Base(rt.bin)+" container "+c.ID)
			}
		}
		if m, _ := filepath.Glob(filepath.Join(rt.state, "*"+id+"*")); len(m) > 0 {
			left = append(left, m...)
		}
	}
	if slices.Contains(cgroup.IDs(), id) {
		left = append(left, "cgroup "+id)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mi), "\n") {
		if strings.Contains(l, e.bundleDir(id)) {
			left = append(left, "mount "+l)
		}
	}
	for _, p := range []string{e.bundleDir(id), e.lockPath(id)} {
		if _, err := os.Lstat(p); err == nil {
			left = append(left, p)
		}
	}
	return left
}
