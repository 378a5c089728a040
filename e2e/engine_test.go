//go:build e2e

package e2e

import (
	"archive/tar"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/runner"
)

// hostProcsIn lists host processes whose cgroup path mentions the run.
func hostProcsIn(id string) []string {
	var found []string
	paths, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), "/airlock/"+id) {
			found = append(found, p)
		}
	}
	return found
}

func TestDaemonDoesNotOutliveRun(t *testing.T) {
	res, _ := runJSON(t, nil, "--image", busybox, "--", "sh", "-c",
		"setsid sleep 300 </dev/null >/dev/null 2>&1 & nohup sleep 301 </dev/null >/dev/null 2>&1 & echo started")
	if res.Reason != runner.ReasonExited || string(res.Stdout.Head) != "started\n" {
		t.Fatalf("reason %s stdout %q", res.Reason, res.Stdout.Head)
	}
	if procs := hostProcsIn(res.ID); len(procs) > 0 {
		t.Errorf("processes of run %s outlived it: %v", res.ID, procs)
	}
	for _, dir := range []string{"/sys/fs/cgroup/pids/airlock/" + res.ID, "/sys/fs/cgroup/airlock/" + res.ID} {
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("the run's cgroup %s is still there", dir)
		}
	}
	noSandboxLeft(t)
}

// The oci engine's store and runtime need no daemon at all.
func TestOCIEngineNeedsNoDaemon(t *testing.T) {
	c := airlock([]string{"DOCKER_HOST=unix:///nonexistent/docker.sock"},
		"run", "--engine", "oci", "--image", busybox, "--", "echo", "no daemon")
	if c.code != 0 || c.stdout != "no daemon\n" {
		t.Errorf("exit %d stdout %q stderr %s", c.code, c.stdout, c.stderr)
	}
}

// rootfsTar writes a root filesystem tar holding busybox and files more
// files of size bytes each, so that importing or unpacking it takes a while.
func rootfsTar(t *testing.T, files, size int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rootfs.tar")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	bin, _ := os.ReadFile("/bin/busybox")
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "bin/", Mode: 0o755})
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bin))})
	tw.Write(bin)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/true", Linkname: "busybox"})
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "data/", Mode: 0o755})
	body := make([]byte, size)
	nonce := fmt.Sprint(time.Now().UnixNano())
	for i := 0; i < files; i++ {
		copy(body, nonce)
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("data/f%06d", i), Mode: 0o644, Size: int64(size)})
		tw.Write(body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// killWhen starts cmd and SIGKILLs it as soon as a name matching glob
// appears, reporting whether it did so before cmd finished by itself.
func killWhen(t *testing.T, cmd *exec.Cmd, glob string) bool {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	for {
		select {
		case <-done:
			return false
		default:
		}
		if m, _ := filepath.Glob(glob); len(m) > 0 {
			cmd.Process.Signal(syscall.SIGKILL)
			<-done
			return true
		}
		time.Sleep(time.Millisecond)
	}
}

func TestInterruptedImportAndUnpackLeaveStoreUsable(t *testing.T) {
	// The store and the oci engine's unpack, whatever the pair.
	onlyPair(t, "oci", "gvisor")
	store := filepath.Join(rootDir, "store")
	tarPath := rootfsTar(t, 20000, 4<<10)

	// Killed while blobs are being written: nothing half-written is listed.
	imp := exec.Command(airlockBin, "--root", rootDir, "image", "import", "--rootfs", "--name", "airlock-e2e/big", "--env", "PATH=/bin", tarPath)
	if !killWhen(t, imp, filepath.Join(store, "oci", "blobs", "sha256", ".tmp-*")) {
		t.Fatal("the import finished before it could be interrupted")
	}
	if ls := airlock(nil, "image", "ls"); strings.Contains(ls.stdout, "airlock-e2e/big") {
		t.Errorf("an interrupted import is listed:\n%s", ls.stdout)
	}
	c := airlock(nil, "image", "import", "--rootfs", "--name", "airlock-e2e/big", "--env", "PATH=/bin", tarPath)
	if c.code != 0 {
		t.Fatalf("import after an interrupted one: exit %d %s", c.code, c.stderr)
	}
	ref, err := images.ParseRef(strings.TrimSpace(c.stdout))
	if err != nil {
		t.Fatal(err)
	}

	// Killed while the root filesystem is being unpacked: the half tree is
	// never used, and the next run unpacks it whole.
	rootfs := filepath.Join(store, "unpacked")
	run := exec.Command(airlockBin, "--root", rootDir, "run", "--engine", "oci", "--out-dir", "none", "--image", ref.String(), "--", "true")
	if !killWhen(t, run, filepath.Join(rootfs, ".tmp-*", "data", "f0*")) {
		t.Fatal("the unpack finished before it could be interrupted")
	}
	if _, err := os.Stat(filepath.Join(rootfs, ref.ID.Encoded())); err == nil {
		t.Fatal("a half-unpacked root filesystem was published")
	}
	res, _ := runJSON(t, nil, "--engine", "oci", "--image", ref.String(), "--", "/bin/busybox", "sh", "-c", "ls /data | wc -l")
	if res.Reason != runner.ReasonExited || strings.TrimSpace(string(res.Stdout.Head)) != "20000" {
		t.Errorf("run after an interrupted unpack: reason %s stdout %q stderr %q", res.Reason, res.Stdout.Head, res.Stderr.Head)
	}
	if stale, _ := filepath.Glob(filepath.Join(rootfs, ".tmp-*")); len(stale) > 0 {
		t.Errorf("stale unpack directories left: %v", stale)
	}
	// The killed run may have left its scratch directory; nothing else.
	os.RemoveAll(filepath.Join(rootDir, "runs"))
	noSandboxLeft(t)
	// The store is setup's: leave no 80 MB image (nor the blobs of the
	// killed import) behind in it.
	if c := airlock(nil, "image", "rm", ref.String()); c.code != 0 {
		t.Errorf("image rm: exit %d %s", c.code, c.stderr)
	} else {
		t.Logf("%s", strings.TrimSpace(c.stdout))
	}
}
