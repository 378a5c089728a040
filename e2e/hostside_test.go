//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/volume"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/internal/imagetest"
	"github.com/airlock-sandbox/airlock/store"
)

// importConfigImage imports busybox with its config edited, and returns
// the pinned reference.
func importConfigImage(t *testing.T, name string, edit func(*v1.Config), extra ...imagetest.File) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layout")
	if err := imagetest.BusyboxLayoutConfig(dir, edit, extra...); err != nil {
		t.Fatal(err)
	}
	c := airlock(nil, "image", "import", "--name", "airlock-e2e/"+name, dir)
	if c.code != 0 {
		t.Fatalf("import: exit %d: %s", c.code, c.stderr)
	}
	return strings.TrimSpace(c.stdout)
}

func dockerVolumes(t *testing.T) []string {
	t.Helper()
	list, err := dockerCli.VolumeList(context.Background(), volume.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range list.Volumes {
		names = append(names, v.Name)
	}
	slices.Sort(names)
	return names
}

// An image's VOLUME never becomes writable storage: dockerd would back it
// with a volume on the host's disk, outside every limit, kept after the
// run, so the docker engine refuses the image; the oci engine ignores
// VOLUME and the path stays read-only.
func TestHostsideImageVolume(t *testing.T) {
	ref := importConfigImage(t, "volume", func(c *v1.Config) {
		c.Volumes = map[string]struct{}{"/vol": {}}
	}, imagetest.File{Name: "vol/keep", Mode: 0o644, Data: []byte("k")})
	before := dockerVolumes(t)
	c := airlock(nil, "run", "--image", ref, "--tmp-size", "1MiB", "--out-limit", "1MiB", "--",
		"sh", "-c", "head -c 4194304 /dev/zero > /vol/big && echo wrote")
	if engineName == "docker" {
		if c.code != 64 || !strings.Contains(c.stderr, "VOLUME /vol") || !strings.Contains(c.stderr, "rebuild the image without VOLUME") {
			t.Errorf("exit %d, want 64 naming the volume\nstdout: %s\nstderr: %s", c.code, c.stdout, c.stderr)
		}
	} else if c.code == 0 || strings.Contains(c.stdout, "wrote") {
		t.Errorf("the image's VOLUME path was writable: exit %d\nstdout: %s\nstderr: %s", c.code, c.stdout, c.stderr)
	}
	if after := dockerVolumes(t); !slices.Equal(before, after) {
		t.Errorf("docker volumes before %v, after %v", before, after)
	}
	noSandboxLeft(t)

	// airlock's label namespace is its own: an image cannot bring labels
	// the reaper or `airlock ps` would read.
	ref = importConfigImage(t, "airlock-label", func(c *v1.Config) {
		c.Labels = map[string]string{"airlock.owner": "someone-else"}
	})
	c = airlock(nil, "run", "--image", ref, "--", "true")
	if want := map[string]int{"docker": 64, "oci": 0}[engineName]; c.code != want || want == 64 && !strings.Contains(c.stderr, `"airlock.owner"`) {
		t.Errorf("image with an airlock.* label: exit %d, want %d\nstderr: %s", c.code, want, c.stderr)
	}
	noSandboxLeft(t)
}

// Of the rest of an image's config, nothing that dockerd acts on reaches
// the sandbox: no health check runs inside it, the user is airlock's, and
// only Env and WorkingDir are taken, as on the oci engine.
func TestHostsideImageConfigNeutralized(t *testing.T) {
	ref := importConfigImage(t, "config", func(c *v1.Config) {
		c.Healthcheck = &v1.HealthConfig{Test: []string{"CMD", "/bin/sh", "-c", "echo hc >> /out/hc"}, Interval: 50 * time.Millisecond}
		c.StopSignal = "SIGUSR1"
		c.ExposedPorts = map[string]struct{}{"80/tcp": {}}
		c.OnBuild = []string{"RUN touch /onbuild"}
		c.Shell = []string{"/bin/false"}
		c.WorkingDir = "/etc"
		c.User = "0:0"
		c.Env = append(c.Env, "IMGENV=yes")
		c.Labels = map[string]string{"org.example": "x"}
		c.Entrypoint = []string{"/bin/false"}
		c.Cmd = []string{"never"}
	})
	res, c := runJSON(t, nil, "--image", ref, "--", "sh", "-c", "sleep 2; id -u; pwd; echo $IMGENV; ls /out")
	if got, want := string(res.Stdout.Head), "65534\n/etc\nyes\n"; res.ExitCode != 0 || got != want {
		t.Errorf("exit %d, stdout %q, want %q\nstderr: %s %s", res.ExitCode, got, want, res.Stderr.Head, c.stderr)
	}
	for _, a := range res.Artifacts {
		t.Errorf("artifact %q: the image's health check ran inside the sandbox", a.Path)
	}
	noSandboxLeft(t)
}

// treeHash describes every entry of a tree: path, mode, size, and the
// content (regular files) or target (symlinks).
func treeHash(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		desc := fmt.Sprintf("%v %d", fi.Mode(), fi.Size())
		switch {
		case fi.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			h := sha256.New()
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
			desc += " " + hex.EncodeToString(h.Sum(nil))
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The unpacked image tree is shared by every run of the image and must
// keep matching its digest: mount points for targets the image lacks come
// from the run's own layer.
func TestHostsideSharedTreeUnchanged(t *testing.T) {
	ref := importConfigImage(t, "shared-tree", func(*v1.Config) {}, imagetest.File{Name: "etc/shared-tree", Mode: 0o644, Data: []byte(t.Name())})
	_, hexID, _ := strings.Cut(ref, "@")
	st, err := store.Open(filepath.Join(rootDir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	tree, err := st.Rootfs(context.Background(), digest.Digest(hexID))
	if err != nil {
		t.Fatal(err)
	}
	before := treeHash(t, tree)
	in := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(in, []byte("input\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--out-dir", "/zzznew", "--", "sh", "-c", "echo o > /zzznew/o"},
		{"--input", in + ":/yyynew/x", "--", "cat", "/yyynew/x"},
		{"--input", in + ":/var/deep/new/x", "--out-dir", "/srv/out/new", "--", "cat", "/var/deep/new/x"},
	} {
		c := airlock(nil, append([]string{"run", "--image", ref}, args...)...)
		if c.code != 0 {
			t.Errorf("%v: exit %d\nstdout: %s\nstderr: %s", args, c.code, c.stdout, c.stderr)
		}
	}
	after := treeHash(t, tree)
	for p, d := range after {
		if before[p] != d {
			t.Errorf("%s: %q before, %q after", p, before[p], d)
		}
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			t.Errorf("%s: removed", p)
		}
	}
	noSandboxLeft(t)
}

// What a program writes to its output directory never runs. dockerd
// gives a bind no noexec of its own: runc keeps the output tmpfs's, but
// runsc takes only the spec's options, so under docker and gVisor the
// program can run what it wrote there (inside gVisor still).
func TestHostsideOutNoexec(t *testing.T) {
	res, c := runJSON(t, nil, "--image", busybox, "--", "sh", "-c",
		"cp /bin/busybox /out/bb; chmod 755 /out/bb; /out/bb true; echo rc=$?; rm -f /out/bb")
	out := string(res.Stdout.Head)
	denied := res.ExitCode == 0 && out == "rc=126\n" && strings.Contains(string(res.Stderr.Head), "Permission denied")
	if engineName == "docker" && isolationName == "gvisor" {
		if denied {
			t.Errorf("the output directory is noexec under docker and gVisor now: update SECURITY.md and this test")
		}
	} else if !denied {
		t.Errorf("exit %d, stdout %q (want rc=126: EACCES), stderr %q %s", res.ExitCode, out, res.Stderr.Head, c.stderr)
	}
	noSandboxLeft(t)
}

// A pids limit the host cannot apply is refused before anything exists.
func TestHostsidePidsBound(t *testing.T) {
	c := airlock(nil, "run", "--image", busybox, "--pids", "4194304", "--", "true")
	if c.code != 64 || !strings.Contains(c.stderr, "between 8 and 32768") {
		t.Errorf("--pids 4194304: exit %d, want 64 naming the range\nstderr: %s", c.code, c.stderr)
	}
	noSandboxLeft(t)
	if c := airlock(nil, "run", "--image", busybox, "--pids", "32768", "--", "true"); c.code != 0 {
		t.Errorf("--pids 32768: exit %d\nstderr: %s", c.code, c.stderr)
	}
	noSandboxLeft(t)
}

// Where airlock makes the mounts itself (the oci engine), the sandbox's
// mount table names no host path of airlock's: not the image's tree, not
// the run's bundle, not a staged input.
func TestHostsideMountinfo(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "x")
	if err := os.WriteFile(in, []byte("input\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--"},
		{"--input", in + ":/work/x", "--input", dir + ":/work/d", "--"},
	} {
		args = append(append([]string{"--image", busybox}, args...), "sh", "-c", "grep -c airlock /proc/self/mountinfo; cat /proc/self/mountinfo")
		res, c := runJSON(t, nil, args...)
		count, table, _ := strings.Cut(string(res.Stdout.Head), "\n")
		if res.ExitCode != 0 {
			t.Fatalf("%v: exit %d\n%s\n%s", args, res.ExitCode, res.Stderr.Head, c.stderr)
		}
		if engineName == "oci" && count != "0" {
			t.Errorf("%v: %s lines name airlock's paths:\n%s", args, count, table)
		} else {
			t.Logf("%v: %s lines name airlock's paths:\n%s", args, count, table)
		}
	}
	noSandboxLeft(t)
}
