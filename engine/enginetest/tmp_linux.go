package enginetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/isolation"
)

// tmpSourceSize caps the case's /tmp.
const tmpSourceSize = 8 << 20

// hostTmp mounts a tmpfs as the runner makes a sandbox's /tmp area:
// capped, nosuid,nodev, its root the sandbox user's. It is unmounted when
// the test ends, after any sandbox made later is destroyed.
func (s *suite) hostTmp(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=1024,mode=0755,uid=%d,gid=%d", tmpSourceSize, s.h.Policy.UID, s.h.Policy.GID)
	if err := unix.Mount("tmpfs", tmp, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		t.Fatalf("mounting a tmpfs for /tmp: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(tmp, 0); err != nil {
			t.Errorf("unmounting %s: %v", tmp, err)
		}
	})
	return tmp
}

// A TmpSource is the sandbox's /tmp, both ways: what the host writes there
// the sandbox reads, and what the sandbox writes the host reads, as the
// sandbox's user. It stays nosuid,nodev and capped: writing past its size
// is ENOSPC for the program, and the sandbox lives on. A source that is
// not a nosuid,nodev tmpfs root is refused before anything is made.
func testTmpSource(t *testing.T, s *suite) {
	tmp := s.hostTmp(t)
	spec := s.spec()
	spec.TmpSource = tmp
	sb := s.createSpec(t, spec)

	if err := os.WriteFile(filepath.Join(tmp, "from-host.txt"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := run(t, sb, engine.Process{Argv: []string{"cat", "/tmp/from-host.txt"}}); r.stdout != "host\n" || r.Code != 0 {
		t.Fatalf("cat /tmp/from-host.txt: code %d, %q %q; want what the host wrote", r.Code, r.stdout, r.stderr)
	}
	if r := run(t, sb, engine.Process{Argv: sh("echo sandbox > /tmp/from-sandbox.txt")}); r.Code != 0 {
		t.Fatalf("writing /tmp: code %d, %q", r.Code, r.stderr)
	}
	b, err := os.ReadFile(filepath.Join(tmp, "from-sandbox.txt"))
	if err != nil || string(b) != "sandbox\n" {
		t.Fatalf("the host reads %q, %v; want what the sandbox wrote", b, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(tmp, "from-sandbox.txt"), &st); err != nil || st.Uid != s.h.Policy.UID || st.Gid != s.h.Policy.GID {
		t.Errorf("the sandbox's file is owned by %d:%d (%v); want %d:%d", st.Uid, st.Gid, err, s.h.Policy.UID, s.h.Policy.GID)
	}

	// The mount the program sees. Under runc it is the host kernel's bind,
	// which keeps the tmpfs's nosuid,nodev. Under gVisor it is the
	// sentry's, with the spec's options (dockerd's binds take none); the
	// host's flags still hold on the gofer's side.
	r := run(t, sb, engine.Process{Argv: sh("grep ' /tmp ' /proc/self/mounts")})
	t.Logf("/tmp inside: %s", strings.TrimSpace(r.stdout))
	f := strings.Fields(r.stdout)
	if len(f) < 4 {
		t.Fatalf("/tmp is not in the sandbox's mount table: %q %q", r.stdout, r.stderr)
	}
	if opts := strings.Split(f[3], ","); s.h.Policy.Isolation == isolation.Seccomp && (!slices.Contains(opts, "nosuid") || !slices.Contains(opts, "nodev")) {
		t.Errorf("/tmp inside is mounted %q; want nosuid,nodev", r.stdout)
	}

	// Past its size: ENOSPC, not an OOM kill, and the sandbox lives on.
	r = run(t, sb, engine.Process{Argv: sh(fmt.Sprintf("dd if=/dev/zero of=/tmp/fill bs=1048576 count=%d; echo rc=$?", 2*tmpSourceSize>>20))})
	if r.OOMKilled || !strings.Contains(r.stdout, "rc=1") || !strings.Contains(r.stderr, "No space left on device") {
		t.Fatalf("filling /tmp: %+v, stdout %q, stderr %q; want dd's ENOSPC", r.Exit, r.stdout, r.stderr)
	}
	if fi, err := os.Stat(filepath.Join(tmp, "fill")); err != nil || fi.Size() > tmpSourceSize {
		t.Errorf("the fill holds %v bytes (%v); want at most %d", fi, err, tmpSourceSize)
	}
	if r := run(t, sb, engine.Process{Argv: sh("rm /tmp/fill && echo freed")}); r.stdout != "freed\n" {
		t.Fatalf("after the fill: code %d, %q %q", r.Code, r.stdout, r.stderr)
	}

	// A plain directory is no /tmp source.
	bad := s.spec()
	bad.TmpSource = t.TempDir()
	ctx := context.Background()
	if sb, err := s.e.Create(ctx, bad); !errdefs.IsInvalidArgument(err) {
		if err == nil {
			sb.Destroy(ctx)
		}
		t.Errorf("Create with a plain directory as /tmp: %v; want invalid argument", err)
	}
	if left := s.h.Leftovers(t, bad.ID); len(left) > 0 {
		t.Errorf("a refused Create left: %v", left)
	}
}
