//go:build e2e

package e2e

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/internal/imagetest"
	"github.com/airlock-sandbox/airlock/runner"
)

func busyboxID(t *testing.T) string {
	t.Helper()
	r, err := images.ParseRef(busybox)
	if err != nil {
		t.Fatal(err)
	}
	return r.ID.String()
}

func TestImportDockerSaveArchive(t *testing.T) {
	rc, err := dockerCli.ImageSave(context.Background(), []string{busyboxID(t)})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "saved.tar")
	f, _ := os.Create(path)
	io.Copy(f, rc)
	rc.Close()
	f.Close()
	c := airlock(nil, "image", "import", "--name", "airlock-e2e/saved", path)
	want := "airlock-e2e/saved@" + busyboxID(t)
	if c.code != 0 || strings.TrimSpace(c.stdout) != want {
		t.Fatalf("exit %d stdout %q stderr %s; want %s", c.code, c.stdout, c.stderr, want)
	}
	if !strings.Contains(c.stderr, "verifying layer 1/1") {
		t.Errorf("no progress shown: %s", c.stderr)
	}
	res, _ := runJSON(t, nil, "--image", want, "--", "echo", "from-saved")
	if string(res.Stdout.Head) != "from-saved\n" {
		t.Errorf("run from imported archive: %q", res.Stdout.Head)
	}
}

func TestImportOCILayoutTar(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layout")
	nonce := fmt.Sprintf("layout-tar %d", time.Now().UnixNano())
	if err := imagetest.BusyboxLayout(dir, nonce); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "layout.tar")
	if err := tarDir(dir, path); err != nil {
		t.Fatal(err)
	}
	c := airlock(nil, "image", "import", "--name", "airlock-e2e/layout-tar", path)
	if c.code != 0 {
		t.Fatalf("exit %d: %s", c.code, c.stderr)
	}
	ref := strings.TrimSpace(c.stdout)
	res, _ := runJSON(t, nil, "--image", ref, "--", "cat", "/etc/extra0")
	if string(res.Stdout.Head) != nonce {
		t.Errorf("ran the wrong image: %q", res.Stdout.Head)
	}

	var rows []struct {
		Ref      string `json:"ref"`
		InStore  bool   `json:"in_store"`
		InDocker bool   `json:"in_docker"`
	}
	ls := airlock(nil, "image", "ls", "--json")
	if err := json.Unmarshal([]byte(ls.stdout), &rows); err != nil {
		t.Fatalf("image ls --json: %v: %q", err, ls.stdout)
	}
	found := false
	for _, r := range rows {
		found = found || (r.Ref == ref && r.InStore && r.InDocker)
	}
	if !found {
		t.Errorf("image ls does not list %s as present: %s", ref, ls.stdout)
	}
}

func TestImportRefusesTamperedBlob(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layout")
	if err := imagetest.BusyboxLayout(dir, fmt.Sprintf("tampered %d", time.Now().UnixNano())); err != nil {
		t.Fatal(err)
	}
	// Find the largest blob (the layer) and change one byte in the middle.
	var biggest string
	var size int64
	filepath.Walk(filepath.Join(dir, "blobs"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Size() > size {
			biggest, size = p, fi.Size()
		}
		return nil
	})
	b, _ := os.ReadFile(biggest)
	b[len(b)/2] ^= 0xff
	os.WriteFile(biggest, b, 0o644)

	c := airlock(nil, "image", "import", "--name", "airlock-e2e/tampered", dir)
	if c.code != 64 || !strings.Contains(c.stderr, "does not match its digest") || !strings.Contains(c.stderr, "nothing was imported") {
		t.Errorf("exit %d stderr %q", c.code, c.stderr)
	}
	ls := airlock(nil, "image", "ls")
	if strings.Contains(ls.stdout, "tampered") {
		t.Errorf("tampered image recorded:\n%s", ls.stdout)
	}
}

func TestImportRefusesNonImages(t *testing.T) {
	empty := t.TempDir()
	notTar := filepath.Join(t.TempDir(), "x.tar")
	os.WriteFile(notTar, []byte("hello"), 0o644)
	for _, p := range []string{empty, notTar} {
		c := airlock(nil, "image", "import", p)
		if c.code != 64 || c.stderr == "" {
			t.Errorf("%s: exit %d stderr %q", p, c.code, c.stderr)
		}
	}
	if c := airlock(nil, "image", "import", "/no/such/file"); c.code != 66 {
		t.Errorf("missing file: exit %d stderr %q", c.code, c.stderr)
	}
}

func tarDir(dir, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	defer tw.Close()
	return filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h, _ := tar.FileInfoHeader(fi, "")
		h.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer src.Close()
			_, err = io.Copy(tw, src)
			return err
		}
		return nil
	})
}

// TestImageRm imports an image of its own, runs it, and removes it: refused
// while a run uses it (exit 75), then gone from the list, the store, its
// unpacked tree and dockerd; running it is then "not found". The default
// image is never removed.
func TestImageRm(t *testing.T) {
	tarPath := rootfsTar(t, 3, 64)
	c := airlock(nil, "image", "import", "--rootfs", "--name", "airlock-e2e/rm-me", "--env", "PATH=/bin", tarPath)
	if c.code != 0 {
		t.Fatalf("import: exit %d %s", c.code, c.stderr)
	}
	ref := strings.TrimSpace(c.stdout)
	id := ref[strings.LastIndex(ref, ":")+1:]
	if res, _ := runJSON(t, nil, "--image", ref, "--", "/bin/busybox", "true"); res.Reason != runner.ReasonExited || res.ExitCode != 0 {
		t.Fatalf("run before rm: %s %d %s", res.Reason, res.ExitCode, res.Error)
	}

	busy := exec.Command(airlockBin, "--root", rootDir, "run", "--engine", engineName, "--isolation", isolationName, "--image", ref, "--", "/bin/busybox", "sleep", "600")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	waitRunning(t, 1)
	if c := airlock(nil, "image", "rm", ref); c.code != 75 || !strings.Contains(c.stderr, "running sandbox uses it") {
		t.Errorf("rm while in use: exit %d stderr %q; want 75", c.code, c.stderr)
	}
	busy.Process.Signal(syscall.SIGTERM)
	busy.Wait()
	// A live sandbox pins its image for its whole life, after its creator
	// has exited; once removed, it lets go.
	sb := airlock(nil, "sandbox", "create", "--engine", engineName, "--isolation", isolationName, "--image", ref)
	if sb.code != 0 {
		t.Fatalf("sandbox create: exit %d %s", sb.code, sb.stderr)
	}
	if c := airlock(nil, "image", "rm", ref); c.code != 75 || !strings.Contains(c.stderr, "running sandbox uses it") {
		t.Errorf("rm while a sandbox lives on it: exit %d stderr %q; want 75", c.code, c.stderr)
	}
	if c := airlock(nil, "sandbox", "rm", strings.TrimSpace(sb.stdout)); c.code != 0 {
		t.Fatalf("sandbox rm: exit %d %s", c.code, c.stderr)
	}

	c = airlock(nil, "image", "rm", ref)
	if c.code != 0 || !strings.Contains(c.stdout, "removed") {
		t.Fatalf("rm: exit %d stdout %q stderr %q", c.code, c.stdout, c.stderr)
	}
	t.Logf("%s", strings.TrimSpace(c.stdout))
	if ls := airlock(nil, "image", "ls"); strings.Contains(ls.stdout, id) {
		t.Errorf("still listed:\n%s", ls.stdout)
	}
	if _, err := os.Stat(filepath.Join(rootDir, "store", "unpacked", id)); !os.IsNotExist(err) {
		t.Errorf("unpacked tree left: %v", err)
	}
	if _, _, err := dockerCli.ImageInspectWithRaw(context.Background(), "sha256:"+id); err == nil {
		t.Error("dockerd still holds it")
	}
	if c := airlock(nil, "run", "--image", ref, "--", "true"); c.code != 66 {
		t.Errorf("run after rm: exit %d %s; want 66", c.code, c.stderr)
	}
	if c := airlock(nil, "image", "rm", ref); c.code != 66 {
		t.Errorf("second rm: exit %d %s; want 66", c.code, c.stderr)
	}
	if c := airlock(nil, "image", "rm", defaultRef); c.code != 64 || !strings.Contains(c.stderr, "default image") {
		t.Errorf("rm of the default: exit %d %s; want 64", c.code, c.stderr)
	}
	noSandboxLeft(t)
}
