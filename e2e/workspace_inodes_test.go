//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/e2etest"
	"github.com/airlock-sandbox/airlock/runner"
)

// inodeFillScript creates empty files in each directory it is given until the
// kernel refuses one, and prints per directory: the path, how many it
// made, the errno that stopped it (0: it stopped at the bound it was
// given), and the filesystem's inode total and free count.
const inodeFillScript = `
import os, sys
bound = int(sys.argv[1])
for d in sys.argv[2:]:
    os.makedirs(d, exist_ok=True)
    n, err = 0, 0
    try:
        while n < bound:
            open(os.path.join(d, "f%d" % n), "x").close()
            n += 1
    except OSError as e:
        err = e.errno
    st = os.statvfs(d)
    print("FILL", d, n, err, st.f_files, st.f_ffree, flush=True)
`

type fillLine struct {
	dir         string
	made, errno int
	files, free uint64
}

func parseFill(t *testing.T, out string) map[string]fillLine {
	t.Helper()
	m := map[string]fillLine{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) != 6 || f[0] != "FILL" {
			continue
		}
		var fl fillLine
		fl.dir = f[1]
		fl.made, _ = strconv.Atoi(f[2])
		fl.errno, _ = strconv.Atoi(f[3])
		fl.files, _ = strconv.ParseUint(f[4], 10, 64)
		fl.free, _ = strconv.ParseUint(f[5], 10, 64)
		m[fl.dir] = fl
	}
	return m
}

// TestSandboxInodeExhaustion: a program fills a small sandbox's workspace
// and /tmp with empty files. Each stops at its own inode cap with ENOSPC
// (a few hundred, not the host's millions), the host's filesystem under
// airlock's root gains nothing but the workspace image's blocks (within
// its size), a second sandbox goes on working, an upload into the full
// areas is refused naming the cause, the full workspace works again once
// the program frees inodes, and removal leaves nothing.
func TestSandboxInodeExhaustion(t *testing.T) {
	full := sbCreate(t, "--workspace-size", "16MiB", "--tmp-size", "8MiB", "--idle-timeout", "5m")
	t.Cleanup(func() { airlock(nil, "sandbox", "rm", full.ID) })
	other := sbCreate(t, "--idle-timeout", "5m")
	t.Cleanup(func() { airlock(nil, "sandbox", "rm", other.ID) })

	res, c := sbExec(t, full.ID, []string{"--timeout", "5m"}, "python3", "-c", inodeFillScript, "10000000", "/home/user/fill", "/tmp/fill")
	if res.ExitCode != 0 {
		t.Fatalf("the fill: %+v\n%s", res, c.stderr)
	}
	fills := parseFill(t, string(res.Stdout.Head))
	// 16MiB at one inode per 16KiB, and 8MiB of /tmp at 64 per MiB; what
	// mkfs rounds up to whole inode tables at most doubles it.
	for dir, want := range map[string]uint64{"/home/user/fill": 1024, "/tmp/fill": 512} {
		f, ok := fills[dir]
		if !ok {
			t.Fatalf("no fill of %s: %s %s", dir, res.Stdout.Head, res.Stderr.Head)
		}
		t.Logf("%s: %d files made, stopped by errno %d; %d inodes, %d free", dir, f.made, f.errno, f.files, f.free)
		if f.errno != int(syscall.ENOSPC) || f.files < want || f.files > 2*want || uint64(f.made) > f.files || uint64(f.made)+16 < f.files || f.free > 0 {
			t.Errorf("%s: %d files made, errno %d, %d inodes (%d free); want ENOSPC at about %d", dir, f.made, f.errno, f.files, f.free, want)
		}
	}

	// The host holds the workspace as one sparse image within its size.
	var st syscall.Stat_t
	img := filepath.Join(runner.SandboxDir(rootDir, full.ID), "workspace.img")
	if err := syscall.Stat(img, &st); err != nil {
		t.Fatal(err)
	}
	if used := st.Blocks * 512; used > 16<<20+64<<10 {
		t.Errorf("the workspace image takes %d bytes of the host's disk, past its 16MiB and its extents' blocks", used)
	}
	t.Logf("the full workspace's image takes %d KiB of the host's disk", st.Blocks/2)
	var hostFiles int
	filepath.WalkDir(runner.SandboxDir(rootDir, full.ID), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != runner.SandboxDir(rootDir, full.ID) {
			return filepath.SkipDir // an area: a mount of its own
		}
		hostFiles++
		return nil
	})
	if hostFiles > 8 {
		t.Errorf("the sandbox's directory holds %d host inodes", hostFiles)
	}

	// Another sandbox is untouched.
	if r, c := sbExec(t, other.ID, nil, "sh", "-c", "echo a >/home/user/a && echo b >/tmp/b && cat /home/user/a /tmp/b"); r.ExitCode != 0 || string(r.Stdout.Head) != "a\nb\n" {
		t.Fatalf("the other sandbox: %+v\n%s", r, c.stderr)
	}

	// An upload into the full areas is refused, naming why.
	src := filepath.Join(t.TempDir(), "up.txt")
	os.WriteFile(src, []byte("hello\n"), 0o644)
	for _, dst := range []string{"/home/user/up.txt", "/tmp/up.txt"} {
		c := airlock(nil, "cp", src, full.ID+":"+dst)
		if c.code == 0 || !strings.Contains(c.stderr, "full") {
			t.Errorf("cp into the full %s: exit %d: %s%s; want a refusal saying it is full", dst, c.code, c.stdout, c.stderr)
		}
	}

	// Freed inodes are usable again: the workspace was never remounted
	// read-only.
	if r, c := sbExec(t, full.ID, nil, "sh", "-c", "rm -rf /home/user/fill /tmp/fill && echo ok >/home/user/ok && cat /home/user/ok"); r.ExitCode != 0 || string(r.Stdout.Head) != "ok\n" {
		t.Fatalf("after freeing the inodes: %+v\n%s", r, c.stderr)
	}
	if c := airlock(nil, "cp", src, full.ID+":/home/user/up.txt"); c.code != 0 {
		t.Fatalf("cp after freeing the inodes: exit %d: %s", c.code, c.stderr)
	}

	if c := airlock(nil, "sandbox", "rm", full.ID); c.code != 0 {
		t.Fatalf("sandbox rm: exit %d: %s", c.code, c.stderr)
	}
	// The other sandbox still lives: only what names this one counts.
	for _, l := range sbGone(full.ID) {
		if strings.Contains(l, full.ID) {
			t.Errorf("after sandbox rm: %s", l)
		}
	}
}

// TestRunTmpInodes: a one-shot run fills its /tmp (8MiB) and /dev/shm
// (64MiB) with empty files. Under runc each is a host tmpfs whose inodes
// are host kernel memory: each stops at 64 inodes per MiB with ENOSPC
// (without nr_inodes an 8MiB /tmp took the kernel's default of 3,085,474
// here). runsc ignores nr_inodes: under gVisor the inodes are the
// sentry's, charged to the sandbox's memory, and the run ends as any
// program that spends its memory does.
func TestRunTmpInodes(t *testing.T) {
	res, c := runJSON(t, nil, "--tmp-size", "8MiB", "--timeout", "120s", "--", "python3", "-c", inodeFillScript, "20000", "/tmp/fill", "/dev/shm/fill")
	fills := parseFill(t, string(res.Stdout.Head))
	t.Logf("%s exit %d, memory peak %d: %+v", res.Reason, res.ExitCode, res.Usage.MemoryPeakBytes, fills)
	if res.Reason != "exited" || res.ExitCode != 0 || len(fills) != 2 {
		t.Fatalf("the fill: %s exit %d: %s %s %s", res.Reason, res.ExitCode, res.Stdout.Head, res.Stderr.Head, c.stderr)
	}
	if isolationName == "gvisor" {
		return
	}
	want := map[string]uint64{"/tmp/fill": 512, "/dev/shm/fill": 4096}
	if engineName == "docker" {
		delete(want, "/dev/shm/fill") // dockerd mounts /dev/shm itself, with no nr_inodes
	}
	for dir, n := range want {
		if f := fills[dir]; f.errno != int(syscall.ENOSPC) || f.files != n || uint64(f.made)+16 < n {
			t.Errorf("%s: %d files made, errno %d, %d inodes; want ENOSPC at %d", dir, f.made, f.errno, f.files, n)
		}
	}
}

// TestWorkspaceCannotFillHostDisk: with airlock's root on a filesystem of
// 192MiB of its own, a sandbox cannot fill that filesystem through its
// workspace: a workspace larger than the room left is refused at create,
// naming the cause, and a program filling a workspace that fits gets
// ENOSPC at its cap, with the host's filesystem keeping its room and
// airlock still working there.
func TestWorkspaceCannotFillHostDisk(t *testing.T) {
	fs := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(fs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", fs, "tmpfs", 0, "size=192m,mode=0755"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(fs, syscall.MNT_DETACH) })
	root, err := e2etest.Root(fs, e2etest.SysRoot())
	if err != nil {
		t.Fatal(err)
	}
	al := func(args ...string) cliResult {
		cmd := exec.Command(airlockBin, append([]string{"--root", root}, args...)...)
		var so, se strings.Builder
		cmd.Stdout, cmd.Stderr = &so, &se
		err := cmd.Run()
		c := cliResult{stdout: so.String(), stderr: se.String()}
		if ee, ok := err.(*exec.ExitError); ok {
			c.code = ee.ExitCode()
		} else if err != nil {
			c.code, c.stderr = -1, c.stderr+err.Error()
		}
		return c
	}
	create := func(size string) (string, cliResult) {
		c := al("sandbox", "create", "--json", "--engine", engineName, "--isolation", isolationName, "--idle-timeout", "5m", "--workspace-size", size)
		var si runner.SandboxInfo
		json.Unmarshal([]byte(c.stdout), &si)
		id := si.ID
		if c.code == 0 {
			t.Cleanup(func() { al("sandbox", "rm", id) })
		}
		return id, c
	}
	free := func() int64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(fs, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bavail) * st.Bsize
	}
	// Files of 32MiB, under the default --file-size, until one fails.
	fill := []string{"sh", "-c", "i=0; while [ $i -lt 12 ] && dd if=/dev/zero of=/home/user/big$i bs=1M count=32 2>/tmp/dd; do i=$((i+1)); done; cat /tmp/dd; sync"}

	if id, c := create("1GiB"); c.code == 0 {
		// Let it try: the host's filesystem must keep its room.
		r := al("exec", "--json", "--timeout", "120s", id, "--", fill[0], fill[1], fill[2])
		t.Fatalf("a 1GiB workspace on a 192MiB filesystem was made; its fill: %s %s; the host's filesystem has %d bytes free", r.stdout, r.stderr, free())
	} else if !strings.Contains(c.stderr, "--workspace-size") {
		t.Fatalf("a 1GiB workspace on a 192MiB filesystem: exit %d: %s; want a refusal naming --workspace-size", c.code, c.stderr)
	}
	id, c := create("64MiB")
	if c.code != 0 {
		t.Fatalf("a 64MiB workspace: exit %d: %s", c.code, c.stderr)
	}
	r := al("exec", "--timeout", "120s", id, "--", fill[0], fill[1], fill[2])
	if !strings.Contains(r.stdout, "No space left on device") || free() < 64<<20 {
		t.Fatalf("filling a 64MiB workspace: %s %s; the host's filesystem has %d bytes free", r.stdout, r.stderr, free())
	}
	if c := al("exec", id, "--", "sh", "-c", "rm /home/user/big* && echo ok >/home/user/ok && cat /home/user/ok"); c.code != 0 || c.stdout != "ok\n" {
		t.Fatalf("after the fill: exit %d %s %s", c.code, c.stdout, c.stderr)
	}
	if c := al("sandbox", "rm", id); c.code != 0 {
		t.Fatalf("sandbox rm: exit %d: %s", c.code, c.stderr)
	}
	left, _ := filepath.Glob(filepath.Join(root, "sandboxes", "sb-*"))
	if len(left) > 0 || e2etest.MountsLeft(root) {
		t.Fatalf("left under the small root: %v, mounts %v", left, e2etest.MountsLeft(root))
	}
}
